// The buffers a tcp connection's send queue keeps for its next copies of
// large frames: which are kept, which are handed out, and the bounds. The
// queue's bytes themselves are checked end to end by tcp_wire_test.cc and
// the conformance suite's large messages.
#include <gtest/gtest.h>

#include <vector>

#include "transport/tcp/spare_buffers.h"

namespace lt::transport::tcp {
namespace {

std::string buffer_of(size_t cap) {
  std::string s;
  s.reserve(cap);
  s.assign(100, 'x');
  return s;
}

TEST(TcpSpareBuffers, AGivenBufferIsHandedOutEmptyToTheNextCopyItFits) {
  SpareBuffers spares;
  std::string s = buffer_of(2u << 20);
  const char* mem = s.data();
  spares.give(&s);
  EXPECT_EQ(s.capacity(), std::string().capacity()) << "kept, so the caller frees nothing";
  std::string t = spares.take(1u << 20);
  EXPECT_EQ(t.data(), mem);
  EXPECT_TRUE(t.empty());
  // Nothing is kept now: the next copy gets a new buffer, rounded up.
  std::string u = spares.take((1u << 20) + 72);
  EXPECT_NE(u.data(), mem);
  EXPECT_GE(u.capacity(), (1u << 20) + SpareBuffers::kGrain);
}

TEST(TcpSpareBuffers, SmallCopiesAndSmallBuffersAreLeftToTheAllocator) {
  SpareBuffers spares;
  std::string small = buffer_of(SpareBuffers::kMinKept / 2);
  const size_t cap = small.capacity();
  spares.give(&small);
  EXPECT_EQ(small.capacity(), cap) << "not kept: the caller still owns it";
  EXPECT_EQ(spares.take(1000).capacity(), std::string().capacity());
}

TEST(TcpSpareBuffers, TheSmallestBufferThatFitsIsHandedOut) {
  SpareBuffers spares;
  std::string big = buffer_of(4u << 20), mid = buffer_of(1u << 20);
  const char* mid_mem = mid.data();
  const char* big_mem = big.data();
  spares.give(&big);
  spares.give(&mid);
  EXPECT_EQ(spares.take(512u << 10).data(), mid_mem);
  EXPECT_EQ(spares.take(512u << 10).data(), big_mem);
}

TEST(TcpSpareBuffers, KeepsAtMostItsCountAndBytesPreferringLargerBuffers) {
  SpareBuffers spares;
  const size_t small_cap = buffer_of(256u << 10).capacity();
  std::vector<std::string> left;
  for (size_t i = 0; i < SpareBuffers::kMaxKept + 3; ++i) {
    std::string s = buffer_of(256u << 10);
    spares.give(&s);
    if (s.capacity() >= SpareBuffers::kMinKept) left.push_back(std::move(s));
  }
  EXPECT_EQ(left.size(), 3u) << "past its count, a buffer no larger than those kept stays out";
  // A larger one replaces the smallest kept, which comes back to the caller.
  std::string large = buffer_of(1u << 20);
  const char* large_mem = large.data();
  spares.give(&large);
  EXPECT_EQ(large.capacity(), small_cap);
  EXPECT_EQ(spares.take(900u << 10).data(), large_mem);
  // Bytes are bounded too: one buffer of the whole budget displaces none
  // of a full set whose total would pass it.
  std::string huge = buffer_of(SpareBuffers::kMaxKeptBytes);
  spares.give(&huge);
  EXPECT_GE(huge.capacity(), SpareBuffers::kMaxKeptBytes) << "kept past the byte bound";
}

}  // namespace
}  // namespace lt::transport::tcp
