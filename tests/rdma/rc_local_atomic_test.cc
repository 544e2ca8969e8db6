// Atomics on an owner's own memory through its device (local_atomic, the
// loopback QP pair) and a peer's rc atomics on the same word, from several
// threads at both ends at once, add up exactly: both are the responder
// device's. (CPU atomics by the owner would not: a Soft-RoCE responder adds
// under a kernel lock, not with a locked instruction, so increments are
// lost.) Compare-and-swap through the loopback returns the old value and
// swaps only on a match; bad requests are refused before anything is posted.
#include <thread>

#include "transport_harness.h"

namespace lt::transport::test {
namespace {

class RcLocalAtomic : public TransportHarness {
 protected:
  RcLocalAtomic() : TransportHarness(&make_rc, &rc_peer) {}
  void SetUp() override {
    set_up_pair();
    auto m = b_->t->alloc_memory(4096, kRemoteAll);
    ASSERT_TRUE(m.is_ok()) << m.status().name();
    mem_ = *m;
  }
  void TearDown() override {
    if (mem_.addr != nullptr) b_->t->free_memory(mem_);
  }
  WorkRequest atomic(Op op, uint64_t* old, uint64_t off, uint64_t operand, uint64_t compare = 0) {
    WorkRequest wr = rdma_wr(op, 1, reinterpret_cast<std::byte*>(old), 8, off, mem_.rkey);
    wr.operand = operand;
    wr.compare = compare;
    return wr;
  }
  MemRegion mem_{};
};

TEST_F(RcLocalAtomic, OwnersAndPeersAtomicsAddUpExactly) {
  ASSERT_TRUE(b_->t->caps().device_atomics);
  constexpr int kThreads = 3, kEach = 300;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&] {  // the owner's own, through its device
      for (int k = 0; k < kEach; ++k) {
        uint64_t old = 0;
        if (!b_->t->local_atomic(atomic(Op::kFetchAdd, &old, 8, 1)).is_ok()) failures++;
      }
    });
    threads.emplace_back([&] {  // a peer's
      for (int k = 0; k < kEach; ++k) {
        uint64_t old = 0;
        std::vector<WorkRequest> wrs{atomic(Op::kFetchAdd, &old, 8, 1)};
        auto r = ab_->post(wrs);
        if (!r.is_ok() || *r != 1) failures++;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  uint64_t word = 0;
  std::memcpy(&word, mem_.addr + 8, 8);
  EXPECT_EQ(word, uint64_t{2 * kThreads * kEach});
  EXPECT_EQ(mem_.addr[0], std::byte{0});
  EXPECT_EQ(mem_.addr[16], std::byte{0});
}

TEST_F(RcLocalAtomic, CompareSwapAndRefusals) {
  uint64_t old = 1;
  ASSERT_TRUE(b_->t->local_atomic(atomic(Op::kCmpSwap, &old, 24, 7, 0)).is_ok());
  EXPECT_EQ(old, 0u);
  ASSERT_TRUE(b_->t->local_atomic(atomic(Op::kCmpSwap, &old, 24, 9, 0)).is_ok());
  EXPECT_EQ(old, 7u);  // no match: the old value, nothing swapped
  uint64_t word = 0;
  std::memcpy(&word, mem_.addr + 24, 8);
  EXPECT_EQ(word, 7u);
  EXPECT_EQ(b_->t->local_atomic(atomic(Op::kFetchAdd, &old, 4, 1)).code(), Code::kAlign);
  EXPECT_EQ(b_->t->local_atomic(atomic(Op::kFetchAdd, &old, 4096, 1)).code(), Code::kOutOfBounds);
  EXPECT_EQ(b_->t->local_atomic(atomic(Op::kRead, &old, 0, 0)).code(), Code::kInvalidArg);
  // The pair still works after the refusals.
  ASSERT_TRUE(b_->t->local_atomic(atomic(Op::kFetchAdd, &old, 24, 1)).is_ok());
  EXPECT_EQ(old, 7u);
}

}  // namespace
}  // namespace lt::transport::test
