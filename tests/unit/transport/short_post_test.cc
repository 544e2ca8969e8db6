// Endpoint::post_short, on every transport of the host build: a message it
// takes arrives as post() would deliver it (header then data, in order with
// posted ones); one it refuses leaves nothing behind, and post() then takes
// it or says why. A transport without a short path refuses every one.
#include <string>

#include "transport_harness.h"

namespace lt::transport::test {
namespace {

class ShortPost : public PairedPaths {
 protected:
  bool has_short_path() const { return is_shm(); }

  // post() of the same bytes, gathered from two sges as post_short's are.
  Status post_gathered(const Msg& m) {
    WorkRequest wr;
    wr.op = Op::kSend;
    wr.num_sge = 2;
    wr.sge[0] = Sge{m.hdr.data(), static_cast<uint32_t>(m.hdr.size()), 0};
    wr.sge[1] = Sge{m.data.data(), static_cast<uint32_t>(m.data.size()), 0};
    return post_one(ab_.get(), wr);
  }
};

TEST_P(ShortPost, TakenMessagesArriveWholeAndInOrderWithPostedOnes) {
  constexpr uint64_t kCount = 400;
  std::vector<Msg> sent;
  size_t shorts = 0;
  for (uint64_t i = 0; i < kCount; ++i) {
    sent.push_back(message(i, i % 300));
    // Every third goes by post(): the two paths share one order.
    if (i % 3 != 2 && post_short(sent.back())) {
      ++shorts;
    } else {
      ASSERT_TRUE(post_gathered(sent.back()).is_ok());
    }
    if (i % 50 == 49) pump_once();  // let a small ring drain now and then
  }
  if (has_short_path()) {
    EXPECT_GT(shorts, 0u);
  } else {
    EXPECT_EQ(shorts, 0u) << GetParam().name << " has no short path";
  }
  ASSERT_TRUE(pump_until([&] { return b_->rx.size() >= kCount; })) << b_->rx.size();
  ASSERT_EQ(b_->rx.size(), kCount);
  for (uint64_t i = 0; i < kCount; ++i) {
    EXPECT_EQ(b_->rx[i].data, sent[i].whole) << "message " << i;
    EXPECT_EQ(b_->rx[i].peer, 1u);
  }
}

TEST_P(ShortPost, EmptyDataIsTheHeaderAlone) {
  Msg m = message(7, 0);
  if (!post_short(m)) {
    ASSERT_TRUE(post_gathered(m).is_ok());
  }
  ASSERT_TRUE(pump_until([&] { return !b_->rx.empty(); }));
  EXPECT_EQ(b_->rx[0].data, m.hdr);
}

// With nobody polling, the ring fills: post_short refuses from then on and
// writes nothing, and post() agrees there is no room. Once the peer polls,
// exactly the accepted messages arrive, in order.
TEST_P(ShortPost, RefusedWhenFullLeavesNothingBehind) {
  if (!GetParam().small_queue || !has_short_path()) {
    GTEST_SKIP() << GetParam().name << ": no small ring with a short path";
  }
  std::vector<Msg> sent;
  for (uint64_t i = 0; i < 10000; ++i) {
    Msg m = message(i, 200);
    if (!post_short(m)) break;
    sent.push_back(std::move(m));
  }
  ASSERT_GT(sent.size(), 0u);
  ASSERT_LT(sent.size(), 10000u) << "no back-pressure";
  Msg refused = message(sent.size(), 200);
  EXPECT_FALSE(post_short(refused));
  WorkRequest wr = send_wr(1, refused.whole.data(), refused.whole.size());
  auto r = ab_->post(std::span<const WorkRequest>(&wr, 1));
  ASSERT_TRUE(r.is_ok()) << r.status().name();
  EXPECT_EQ(*r, 0u);
  ASSERT_TRUE(pump_until([&] { return b_->rx.size() >= sent.size(); }));
  pump_once();
  ASSERT_EQ(b_->rx.size(), sent.size());
  for (size_t i = 0; i < sent.size(); ++i) EXPECT_EQ(b_->rx[i].data, sent[i].whole) << i;
  // Room again: the short path takes the next one.
  EXPECT_TRUE(post_short(refused));
  ASSERT_TRUE(pump_until([&] { return b_->rx.size() > sent.size(); }));
  EXPECT_EQ(b_->rx.back().data, refused.whole);
}

// A message that needs more than one record (a quarter of the small ring)
// is post()'s: fragments or the backlog.
TEST_P(ShortPost, AMessageAboveOneRecordIsRefusedAndPostTakesIt) {
  if (!GetParam().small_queue || !has_short_path()) {
    GTEST_SKIP() << GetParam().name << ": no small ring with a short path";
  }
  Msg big = message(3, kSmallRing / 2);
  EXPECT_FALSE(post_short(big));
  ASSERT_TRUE(post_gathered(big).is_ok());
  ASSERT_TRUE(pump_until([&] { return !b_->rx.empty(); }));
  ASSERT_EQ(b_->rx.size(), 1u);
  EXPECT_EQ(b_->rx[0].data, big.whole);
}

TEST_P(ShortPost, RefusedOnceThePeerIsLost) {
  Msg m = message(1, 40);
  if (!post_short(m)) {
    ASSERT_TRUE(post_gathered(m).is_ok());
  }
  ASSERT_TRUE(pump_until([&] { return !b_->rx.empty(); }));
  b_->t.reset();
  ASSERT_TRUE(pump_until([&] { return has(a_->lost, 2); })) << "no kPeerLost for node 2";
  EXPECT_FALSE(post_short(m));
  auto r = ab_->post(std::vector<WorkRequest>{send_wr(2, m.whole.data(), m.whole.size())});
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Code::kPeerDown);
}

INSTANTIATE_TEST_SUITE_P(Transports, ShortPost, ::testing::ValuesIn(paired_path_kinds()),
                         kind_name);

}  // namespace
}  // namespace lt::transport::test
