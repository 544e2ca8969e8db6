// shm's guarded posts (transport.h kWrGuard, Caps::guard_before): a guard
// word read first and one op of any kind after it, in one post. When the
// word matches both are done; when it differs the post fails with
// BAD_HANDLE, the op is not done and a read's destination keeps what it
// held; an op that fails behind a matching guard fails the post. The first
// post to a region maps it and goes op by op, as ops over 256 bytes do;
// later small ones go under one lock: the cases run on both paths, and on
// a view of the region (Endpoint::view), which must do what a post does.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "guard_harness.h"

namespace lt::transport::test {
namespace {

class ShmGuard : public GuardHarness {
 protected:
  ShmGuard() : GuardHarness(&make_shm, &shm_peer, 64u << 10) {}
};

TEST_F(ShmGuard, TheTransportSaysItChecksTheGuardBeforeAnyOp) {
  EXPECT_TRUE(a_->t->caps().guarded_reads);
  EXPECT_TRUE(a_->t->caps().guard_before);
  EXPECT_FALSE(a_->t->caps().guard_after);
}

TEST_F(ShmGuard, MatchingGuardReadsBoth) {
  for (int pass = 0; pass < 3; ++pass) {
    through_view_ = pass == 2;
    for (size_t len : {size_t{8}, size_t{12}, size_t{16}, size_t{256}, size_t{4096}, kWordAt}) {
      std::vector<std::byte> back(len);
      uint64_t word = 0;
      auto r = guarded(kWord, rdma_wr(Op::kRead, 2, back.data(), len, 0, mem_.rkey), &word);
      ASSERT_TRUE(r.is_ok()) << len << ": " << r.status().name();
      EXPECT_EQ(*r, 2u);
      EXPECT_EQ(word, kWord);
      EXPECT_EQ(std::memcmp(back.data(), mem_.addr, len), 0) << len;
    }
  }
}

TEST_F(ShmGuard, MismatchLeavesTheReadsDestinationUntouched) {
  for (int pass = 0; pass < 3; ++pass) {
    through_view_ = pass == 2;
    for (size_t len : {size_t{8}, size_t{12}, size_t{16}, size_t{256}, size_t{4096}}) {
      std::vector<std::byte> back(len, std::byte{0xab});
      uint64_t word = 0;
      auto r = guarded(kWord + 1, rdma_wr(Op::kRead, 2, back.data(), len, 0, mem_.rkey), &word);
      ASSERT_FALSE(r.is_ok()) << len;
      EXPECT_EQ(r.status().code(), Code::kBadHandle) << len;
      EXPECT_EQ(back, std::vector<std::byte>(len, std::byte{0xab})) << len;
      EXPECT_TRUE(ab_->alive());
    }
  }
}

TEST_F(ShmGuard, AWriteIsDoneOnlyWhenTheWordMatches) {
  uint8_t seed = 10;
  for (int pass = 0; pass < 3; ++pass) {
    through_view_ = pass == 2;
    for (size_t len : {size_t{8}, size_t{12}, size_t{16}, size_t{256}, size_t{4096}}) {
      std::vector<std::byte> before(mem_.addr, mem_.addr + len);
      auto data = pattern(len, seed++);
      uint64_t word = 0;
      auto r = guarded(kWord + 1, rdma_wr(Op::kWrite, 2, data.data(), len, 0, mem_.rkey), &word);
      ASSERT_FALSE(r.is_ok()) << len;
      EXPECT_EQ(r.status().code(), Code::kBadHandle) << len;
      EXPECT_EQ(std::memcmp(mem_.addr, before.data(), len), 0) << len << ": written all the same";
      r = guarded(kWord, rdma_wr(Op::kWrite, 2, data.data(), len, 0, mem_.rkey), &word);
      ASSERT_TRUE(r.is_ok()) << len << ": " << r.status().name();
      EXPECT_EQ(*r, 2u);
      EXPECT_EQ(std::memcmp(mem_.addr, data.data(), len), 0) << len;
    }
  }
}

TEST_F(ShmGuard, AnAtomicIsDoneOnlyWhenTheWordMatches) {
  for (bool view : {false, true}) {
    through_view_ = view;
    uint64_t start = 5;
    std::memcpy(mem_.addr + 64, &start, 8);
    uint64_t old = 77, word = 0;
    auto r = guarded(kWord + 1, atomic_wr(Op::kFetchAdd, &old, 64, mem_.rkey, 0, 3), &word);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), Code::kBadHandle);
    EXPECT_EQ(old, 77u);  // not done: the old value never came
    r = guarded(kWord, atomic_wr(Op::kFetchAdd, &old, 64, mem_.rkey, 0, 3), &word);
    ASSERT_TRUE(r.is_ok()) << r.status().name();
    EXPECT_EQ(old, 5u);
    r = guarded(kWord + 1, atomic_wr(Op::kCmpSwap, &old, 64, mem_.rkey, 8, 100), &word);
    ASSERT_FALSE(r.is_ok());
    r = guarded(kWord, atomic_wr(Op::kCmpSwap, &old, 64, mem_.rkey, 8, 100), &word);
    ASSERT_TRUE(r.is_ok()) << r.status().name();
    EXPECT_EQ(old, 8u);
    uint64_t now = 0;
    std::memcpy(&now, mem_.addr + 64, 8);
    EXPECT_EQ(now, 100u);
    // A misaligned atomic behind a matching guard fails the post as it would
    // fail alone.
    r = guarded(kWord, atomic_wr(Op::kFetchAdd, &old, 60, mem_.rkey, 0, 1), &word);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), Code::kAlign);
    EXPECT_TRUE(ab_->alive());
  }
}

TEST_F(ShmGuard, AGuardOfAnotherSizeOrOutsideTheRegionIsRefused) {
  std::vector<std::byte> back(64, std::byte{0xab});
  uint64_t word[2] = {0, 0};
  for (int pass = 0; pass < 3; ++pass) {
    through_view_ = pass == 2;
    std::vector<WorkRequest> wrs{
        rdma_wr(Op::kRead, 1, reinterpret_cast<std::byte*>(word), 16, kWordAt - 8, mem_.rkey),
        rdma_wr(Op::kRead, 2, back.data(), back.size(), 0, mem_.rkey)};
    wrs[0].flags = kWrGuard;
    wrs[0].compare = kWord;
    auto r = submit(wrs);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), Code::kInvalidArg);
    EXPECT_EQ(back, std::vector<std::byte>(64, std::byte{0xab}));
    expect_guard_outside_refused();
  }
}

}  // namespace
}  // namespace lt::transport::test
