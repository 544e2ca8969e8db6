// shm's views (Endpoint::view, Caps::views): a peer's alloc_memory region
// mapped here, on which MappedRegion::apply does what a post would (the
// same rights, bounds and guard checks), and which turns not live() when
// the transport lets go of it: evicted from the connection's cache, the
// connection closed, the transport gone. Views of what is not a region are
// refused; a transport without views gives none.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "guard_harness.h"
#include "transport/mapped_region.h"

namespace lt::transport::test {
namespace {

class ShmView : public GuardHarness {
 protected:
  ShmView() : GuardHarness(&make_shm, &shm_peer, 64u << 10) {}

  std::shared_ptr<const MappedRegion> view_of_mem() {
    auto v = ab_->view(mem_.rkey);
    EXPECT_NE(v, nullptr);
    return v;
  }
};

TEST_F(ShmView, TheViewMapsTheRegionWithItsRightsAndLength) {
  EXPECT_TRUE(a_->t->caps().views);
  auto v = view_of_mem();
  ASSERT_NE(v, nullptr);
  EXPECT_TRUE(v->live());
  EXPECT_GE(v->len(), kLen);
  EXPECT_NE(v->base(), mem_.addr) << "mapped again in the peer's name, not the owner's pointer";
  EXPECT_EQ(std::memcmp(v->base(), mem_.addr, kLen), 0);
  // The same bytes: a store at the owner is seen through the view.
  mem_.addr[100] = std::byte{0x5c};
  EXPECT_EQ(v->base()[100], std::byte{0x5c});
  EXPECT_EQ(ab_->view(mem_.rkey), v) << "the connection's own mapping, not a second one";
}

TEST_F(ShmView, ApplyDoesTheGuardedOpsAsAPostDoes) {
  auto v = view_of_mem();
  ASSERT_NE(v, nullptr);
  auto data = pattern(24, 9);
  uint64_t word = 0;
  std::vector<WorkRequest> wrs{guard(kWord, &word),
                               rdma_wr(Op::kWrite, 2, data.data(), data.size(), 16, mem_.rkey)};
  auto r = v->apply(wrs);
  ASSERT_TRUE(r.is_ok()) << r.status().name();
  EXPECT_EQ(*r, 2u);
  EXPECT_EQ(word, kWord);
  EXPECT_EQ(std::memcmp(mem_.addr + 16, data.data(), data.size()), 0);

  std::vector<std::byte> back(24, std::byte{0xab});
  wrs = {guard(kWord + 1, &word), rdma_wr(Op::kRead, 3, back.data(), back.size(), 16, mem_.rkey)};
  r = v->apply(wrs);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Code::kBadHandle);
  EXPECT_EQ(back, std::vector<std::byte>(24, std::byte{0xab})) << "read behind a mismatch";

  uint64_t old = 0;
  std::memcpy(mem_.addr + 64, &kWord, 8);
  wrs = {guard(kWord, &word), atomic_wr(Op::kFetchAdd, &old, 64, mem_.rkey, 0, 2)};
  r = v->apply(wrs);
  ASSERT_TRUE(r.is_ok()) << r.status().name();
  EXPECT_EQ(old, kWord);
  uint64_t now = 0;
  std::memcpy(&now, mem_.addr + 64, 8);
  EXPECT_EQ(now, kWord + 2);
}

TEST_F(ShmView, ApplyRefusesWhatAPostRefuses) {
  auto v = view_of_mem();
  ASSERT_NE(v, nullptr);
  std::vector<std::byte> back(16, std::byte{0xab});
  uint64_t word = 0, old = 0;
  // Past the end, misaligned atomics, a malformed guard, ops that are not
  // plain one-sided ones: refused, nothing done.
  std::vector<WorkRequest> wrs{rdma_wr(Op::kRead, 1, back.data(), 16, kLen - 8, mem_.rkey)};
  EXPECT_EQ(v->apply(wrs).status().code(), Code::kOutOfBounds);
  wrs = {atomic_wr(Op::kFetchAdd, &old, 12, mem_.rkey, 0, 1)};
  EXPECT_EQ(v->apply(wrs).status().code(), Code::kAlign);
  WorkRequest g = guard(kWord, &word);
  g.sge[0].len = 4;
  wrs = {g, rdma_wr(Op::kRead, 1, back.data(), 16, 0, mem_.rkey)};
  EXPECT_EQ(v->apply(wrs).status().code(), Code::kInvalidArg);
  wrs = {send_wr(1, back.data(), 16)};
  EXPECT_EQ(v->apply(wrs).status().code(), Code::kInvalidArg);
  wrs = {rdma_wr(Op::kWriteImm, 1, back.data(), 16, 0, mem_.rkey)};
  EXPECT_EQ(v->apply(wrs).status().code(), Code::kInvalidArg);
  EXPECT_EQ(back, std::vector<std::byte>(16, std::byte{0xab}));
  // An op after one that was done: the post's count says where it stopped.
  wrs = {rdma_wr(Op::kRead, 1, back.data(), 8, 0, mem_.rkey),
         rdma_wr(Op::kRead, 2, back.data() + 8, 8, kLen, mem_.rkey)};
  auto r = v->apply(wrs);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(*r, 1u);
}

TEST_F(ShmView, ARegionMadeReadOnlyRefusesWritesAndAtomics) {
  auto ro = b_->t->alloc_memory(4096, Access::kRemoteRead);
  ASSERT_TRUE(ro.is_ok()) << ro.status().name();
  auto v = ab_->view(ro->rkey);
  ASSERT_NE(v, nullptr);
  std::vector<std::byte> data(8, std::byte{1});
  uint64_t old = 0;
  std::vector<WorkRequest> wrs{rdma_wr(Op::kWrite, 1, data.data(), 8, 0, ro->rkey)};
  EXPECT_EQ(v->apply(wrs).status().code(), Code::kPerm);
  wrs = {atomic_wr(Op::kFetchAdd, &old, 0, ro->rkey, 0, 1)};
  EXPECT_EQ(v->apply(wrs).status().code(), Code::kPerm);
  EXPECT_EQ(ro->addr[0], std::byte{0});
  wrs = {rdma_wr(Op::kRead, 1, data.data(), 8, 0, ro->rkey)};
  EXPECT_TRUE(v->apply(wrs).is_ok());
  EXPECT_EQ(data, std::vector<std::byte>(8, std::byte{0}));
  b_->t->free_memory(*ro);
}

TEST_F(ShmView, NoViewOfWhatIsNotARegion) {
  EXPECT_EQ(ab_->view(mem_.rkey ^ (uint64_t{1} << 40)), nullptr) << "another inode";
  EXPECT_EQ(ab_->view(mem_.rkey + 1), nullptr) << "another descriptor";
  Target* t = register_target(b_, 4096, Access::kRemoteWrite);
  ASSERT_TRUE(t->registered);
  EXPECT_EQ(ab_->view(t->mr.rkey), nullptr) << "registered memory is placed, not mapped";
  EXPECT_TRUE(ab_->alive());
}

TEST_F(ShmView, AViewEvictedFromTheConnectionsCacheIsRetired) {
  auto first = view_of_mem();
  ASSERT_NE(first, nullptr);
  // kMaxRemoteMaps regions more push the first out of the connection's cache.
  std::vector<MemRegion> more;
  for (int i = 0; i < 64; ++i) {
    auto m = b_->t->alloc_memory(4096, kRemoteAll);
    ASSERT_TRUE(m.is_ok()) << m.status().name();
    more.push_back(*m);
    auto v = ab_->view(m->rkey);
    ASSERT_NE(v, nullptr) << i;
    EXPECT_TRUE(v->live());
  }
  EXPECT_FALSE(first->live());
  // Still mapped for its holder, and the bytes it read stay readable.
  EXPECT_EQ(std::memcmp(first->base(), mem_.addr, kLen), 0);
  auto again = ab_->view(mem_.rkey);
  ASSERT_NE(again, nullptr);
  EXPECT_TRUE(again->live());
  EXPECT_NE(again, first);
  for (auto& m : more) b_->t->free_memory(m);
}

TEST_F(ShmView, AViewOfAPeerThatClosedIsRetired) {
  auto v = view_of_mem();
  ASSERT_NE(v, nullptr);
  b_->t->free_memory(mem_);
  mem_ = {};
  b_->t.reset();  // the peer goes: a's poller reads the closed socket
  ASSERT_TRUE(pump_until([&] { return !v->live(); })) << "view still live after the peer left";
  EXPECT_EQ(ab_->view(1), nullptr);
  EXPECT_FALSE(ab_->alive());
}

TEST_F(ShmView, ViewsOfATransportThatIsGoneAreRetired) {
  auto v = view_of_mem();
  ASSERT_NE(v, nullptr);
  ab_.reset();
  a_->t.reset();
  EXPECT_FALSE(v->live());
}

class TcpView : public TransportHarness {
 protected:
  TcpView() : TransportHarness(&make_tcp) {}
};

TEST_F(TcpView, AnEndpointWithoutViewsGivesNone) {
  set_up_pair();
  EXPECT_FALSE(a_->t->caps().views);
  auto m = b_->t->alloc_memory(4096, kRemoteAll);
  if (m.is_ok()) {
    EXPECT_EQ(ab_->view(m->rkey), nullptr);
    b_->t->free_memory(*m);
  }
  EXPECT_EQ(ab_->view(1), nullptr);
}

}  // namespace
}  // namespace lt::transport::test
