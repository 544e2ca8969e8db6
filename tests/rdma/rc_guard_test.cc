// rc's guarded reads (transport.h kWrGuard) on a real device: a guard word
// and the read it guards go in one post; when the word matches both are
// read, when it differs the post fails with BAD_HANDLE and the guarded
// read's destination keeps what it held. Both sizes: one that fits the
// bounce buffer (one round trip) and one that does not (the guard first).
// The other order (Caps::guard_after): a write or an atomic and then the
// guard word, which is read after the op landed; a mismatch is BAD_HANDLE
// with the op done.
#include "guard_harness.h"

namespace lt::transport::test {
namespace {

class RcGuard : public GuardHarness {
 protected:
  RcGuard() : GuardHarness(&make_rc, &rc_peer, 1u << 20) {}  // larger than the bounce buffer
  // [guard on the word at kLen - 8 expecting `expect`, read of `len` bytes at 0]
  Result<size_t> guarded_read(uint64_t expect, std::byte* dst, size_t len, uint64_t* word) {
    return guarded(expect, rdma_wr(Op::kRead, 2, dst, len, 0, mem_.rkey), word);
  }
};

TEST_F(RcGuard, MatchingGuardReadsBoth) {
  ASSERT_TRUE(a_->t->caps().guarded_reads);
  for (size_t len : {size_t{8}, size_t{4096}, kLen - 8}) {
    std::vector<std::byte> back(len);
    uint64_t word = 0;
    auto r = guarded_read(kWord, back.data(), len, &word);
    ASSERT_TRUE(r.is_ok()) << len << ": " << r.status().name();
    EXPECT_EQ(*r, 2u);
    EXPECT_EQ(word, kWord);
    EXPECT_EQ(std::memcmp(back.data(), mem_.addr, len), 0) << len;
  }
}

TEST_F(RcGuard, MismatchLeavesTheDestinationUntouched) {
  for (size_t len : {size_t{8}, size_t{4096}, kLen - 8}) {
    std::vector<std::byte> back(len, std::byte{0xab});
    uint64_t word = 0;
    auto r = guarded_read(kWord + 1, back.data(), len, &word);
    ASSERT_FALSE(r.is_ok()) << len;
    EXPECT_EQ(r.status().code(), Code::kBadHandle) << len;
    EXPECT_EQ(back, std::vector<std::byte>(len, std::byte{0xab})) << len;
    EXPECT_TRUE(ab_->alive());
  }
}

TEST_F(RcGuard, WriteThenGuardWritesAndReportsTheWord) {
  ASSERT_TRUE(a_->t->caps().guard_after);
  uint8_t seed = 10;
  for (size_t len : {size_t{8}, size_t{4096}, kLen - 8}) {
    for (uint64_t expect : {kWord, kWord + 1}) {
      auto data = pattern(len, seed++);
      uint64_t word = 0;
      auto r = guard_after(rdma_wr(Op::kWrite, 1, data.data(), len, 0, mem_.rkey), expect, &word);
      if (expect == kWord) {
        ASSERT_TRUE(r.is_ok()) << len << ": " << r.status().name();
        EXPECT_EQ(*r, 2u);
      } else {
        ASSERT_FALSE(r.is_ok()) << len;
        EXPECT_EQ(r.status().code(), Code::kBadHandle) << len;
      }
      EXPECT_EQ(word, kWord) << len;
      // Either way the write was done before the word was read.
      EXPECT_EQ(std::memcmp(mem_.addr, data.data(), len), 0) << len;
      EXPECT_TRUE(ab_->alive());
    }
  }
}

TEST_F(RcGuard, AtomicsThenGuardReturnTheOldValue) {
  uint64_t start = 5;
  std::memcpy(mem_.addr + 64, &start, 8);
  uint64_t old = 0, word = 0;
  auto r = guard_after(atomic_wr(Op::kFetchAdd, &old, 64, mem_.rkey, 0, 3), kWord, &word);
  ASSERT_TRUE(r.is_ok()) << r.status().name();
  EXPECT_EQ(old, 5u);
  r = guard_after(atomic_wr(Op::kCmpSwap, &old, 64, mem_.rkey, 8, 100), kWord + 1, &word);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Code::kBadHandle);
  EXPECT_EQ(old, 8u);  // done before the word was read
  EXPECT_EQ(word, kWord);
  uint64_t now = 0;
  std::memcpy(&now, mem_.addr + 64, 8);
  EXPECT_EQ(now, 100u);
  r = guard_after(atomic_wr(Op::kFetchAdd, &old, 60, mem_.rkey, 0, 1), kWord, &word);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Code::kAlign);
  EXPECT_TRUE(ab_->alive());
}

TEST_F(RcGuard, GuardOutsideTheRegionIsRefusedAtPost) { expect_guard_outside_refused(); }

}  // namespace
}  // namespace lt::transport::test
