// The fixture of the guard tests (transport.h kWrGuard) on any transport
// that offers them: a joined pair, and one region of b_'s `len` bytes long,
// made for one-sided ops, holding a pattern up to its last 8-byte word and
// kWord in that word (the guard word).
#pragma once

#include <cstring>
#include <vector>

#include "transport/mapped_region.h"
#include "transport_harness.h"

namespace lt::transport::test {

class GuardHarness : public TransportHarness {
 protected:
  GuardHarness(Factory make, PeerFn peer, size_t len)
      : TransportHarness(make, peer), kLen(len), kWordAt(len - 8) {}
  void SetUp() override {
    set_up_pair();
    auto m = b_->t->alloc_memory(kLen, kRemoteAll);
    ASSERT_TRUE(m.is_ok()) << m.status().name();
    mem_ = *m;
    std::memcpy(mem_.addr + kWordAt, &kWord, 8);
    auto data = pattern(kWordAt, 3);
    std::memcpy(mem_.addr, data.data(), data.size());
  }
  void TearDown() override {
    if (mem_.addr != nullptr) b_->t->free_memory(mem_);
  }
  // The guard word read into *word, expected to equal `expect`.
  WorkRequest guard(uint64_t expect, uint64_t* word) const {
    WorkRequest g =
        rdma_wr(Op::kRead, 1, reinterpret_cast<std::byte*>(word), 8, kWordAt, mem_.rkey);
    g.flags = kWrGuard;
    g.compare = expect;
    return g;
  }
  // Posted, or applied through a view of the region (Endpoint::view,
  // MappedRegion::apply) while through_view_ is set.
  Result<size_t> submit(std::span<const WorkRequest> wrs) {
    if (!through_view_) return ab_->post(wrs);
    auto v = ab_->view(mem_.rkey);
    if (v == nullptr) return Code::kUnsupported;
    return v->apply(wrs);
  }
  // [guard, op]
  Result<size_t> guarded(uint64_t expect, const WorkRequest& op, uint64_t* word) {
    std::vector<WorkRequest> wrs{guard(expect, word), op};
    return submit(wrs);
  }
  // [op, guard]
  Result<size_t> guard_after(const WorkRequest& op, uint64_t expect, uint64_t* word) {
    std::vector<WorkRequest> wrs{op, guard(expect, word)};
    return submit(wrs);
  }

  // A guard just past the region, before a read: refused at post, the
  // read's destination untouched, the connection kept.
  void expect_guard_outside_refused() {
    std::vector<std::byte> back(64, std::byte{0xab});
    uint64_t word = 0;
    WorkRequest g = guard(kWord, &word);
    g.remote.addr = kLen;
    std::vector<WorkRequest> wrs{g, rdma_wr(Op::kRead, 2, back.data(), back.size(), 0, mem_.rkey)};
    auto r = submit(wrs);
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), Code::kOutOfBounds);
    EXPECT_EQ(back, std::vector<std::byte>(64, std::byte{0xab}));
    EXPECT_TRUE(ab_->alive());
  }

  static constexpr uint64_t kWord = 0x5eed5eed12345678ull;
  const size_t kLen;     // the region's bytes
  const size_t kWordAt;  // where the guard word is
  MemRegion mem_{};
  bool through_view_ = false;
};

}  // namespace lt::transport::test
