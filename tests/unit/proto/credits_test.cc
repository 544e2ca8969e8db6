#include "proto/msg/credits.h"

#include <gtest/gtest.h>

#include <thread>

namespace lt::proto {
namespace {

constexpr NodeId kMax = 16;

// Credits whose slots 1..kMax-1 are held by the nodes of the same ids.
struct Held : Credits {
  Held(uint32_t msg, uint32_t rpc) : Credits(msg, rpc, kMax) {
    for (NodeId n = 1; n < kMax; ++n) rekey(n);
  }
  // A message credit towards `n` for an 8-byte (small) or a `len`-byte
  // message, whatever the reason it is refused.
  bool take(NodeId n, uint64_t len = 8) {
    bool now = false;
    return take_msg(n, len, &now) == Code::kOk;
  }
};

TEST(Credits, MessageCreditsRunOutAndComeBack) {
  Held c(4, 2);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(c.take(3)) << i;
  EXPECT_FALSE(c.take(3)) << "the fifth message has no credit";
  EXPECT_TRUE(c.take(4)) << "credits are per destination";
  c.apply_msg(3, 2);
  EXPECT_TRUE(c.take(3));
  EXPECT_TRUE(c.take(3));
  EXPECT_FALSE(c.take(3));
  c.untake_msg(3);
  EXPECT_TRUE(c.take(3)) << "a credit taken for a message that did not go is back";
}

TEST(Credits, ReturnedCreditsNeverGoBelowZero) {
  Held c(4, 2);
  ASSERT_TRUE(c.take(3));
  c.apply_msg(3, 100);  // late credits after a reconnect: no extra ones minted
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(c.take(3)) << i;
  EXPECT_FALSE(c.take(3));
  ASSERT_EQ(c.take_rpc(5), 0);
  c.return_rpc(5);
  c.return_rpc(5);  // a reply for a call already failed by a peer loss
  EXPECT_EQ(c.take_rpc(5), 0);
  EXPECT_EQ(c.take_rpc(5), 1);
  EXPECT_EQ(c.take_rpc(5), -1) << "two ring slots";
}

// A node that does not hold its slot (slot 0, an older or newer node of the
// same slot) changes nothing, and its takes are refused.
TEST(Credits, NodesThatDoNotHoldTheirSlotAreIgnored) {
  Held c(4, 2);
  const NodeId newer = kMax + 3;  // slot 3's next generation
  c.apply_msg(0, 1);
  c.apply_msg(newer, 1);
  c.return_rpc(newer);
  EXPECT_FALSE(c.count_consumed(newer, false));
  EXPECT_EQ(c.take_owed(0), 0u);
  EXPECT_FALSE(c.take(newer));
  EXPECT_EQ(c.take_rpc(newer), -1);
  c.reset(newer);
  ASSERT_TRUE(c.take(3));  // node 3's count is untouched by all that
  ASSERT_TRUE(c.count_consumed(3, true));
  // The newer node takes the slot over: it starts from zero, and node 3's
  // late calls change nothing.
  c.rekey(newer);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(c.take(newer)) << i;
  EXPECT_FALSE(c.take(newer));
  c.apply_msg(3, 4);
  EXPECT_FALSE(c.take(newer));
  EXPECT_FALSE(c.take(3));
}

// Small messages may use every credit; a larger one goes only while fewer
// than a quarter of them are in use, whatever size their messages were.
TEST(Credits, LargeMessagesUseAQuarterOfTheCredits) {
  Held c(16, 2);
  const uint64_t small = Credits::kSmallMsgBytes, large = small + 1;
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(c.take(3, large)) << i;
  EXPECT_FALSE(c.take(3, large)) << "a fifth large message";
  for (int i = 0; i < 12; ++i) ASSERT_TRUE(c.take(3, small)) << i;
  EXPECT_FALSE(c.take(3, small)) << "all sixteen in use";
  c.apply_msg(3, 13);
  EXPECT_TRUE(c.take(3, large)) << "three in use: room for one more large";
  EXPECT_FALSE(c.take(3, large));
  EXPECT_TRUE(c.take(3, small)) << "small ones still fit";
  // Below four credits a large message still has one.
  Held d(2, 1);
  EXPECT_TRUE(d.take(3, large));
  EXPECT_FALSE(d.take(3, large));
  EXPECT_TRUE(d.take(3, small));
  EXPECT_FALSE(d.take(3, small));
}

TEST(Credits, ConsumedMessagesAreOwedInBatchesOfASixteenth) {
  Held c(32, 2);  // 8 for large messages, so a batch of 2
  EXPECT_FALSE(c.count_consumed(3, false));
  EXPECT_TRUE(c.count_consumed(3, false)) << "a quarter of the large messages' credits is owed";
  EXPECT_EQ(c.take_owed(3), 2u);
  EXPECT_EQ(c.take_owed(3), 0u) << "taken once";
  EXPECT_TRUE(c.count_consumed(3, true)) << "to this node itself: at once";
  EXPECT_EQ(c.take_owed(3), 1u);
}

TEST(Credits, OwedCreditsTakenForAFailedSendAreOwedAgain) {
  Held c(4, 2);
  c.count_consumed(3, false);
  uint32_t n = c.take_owed(3);
  ASSERT_EQ(n, 1u);
  c.give_back_owed(3, n);
  EXPECT_EQ(c.take_owed(3), 1u);
}

TEST(Credits, ResetAfterALostConnectionStartsAfresh) {
  Held c(2, 1);
  ASSERT_TRUE(c.take(3));
  ASSERT_TRUE(c.take(3));
  ASSERT_EQ(c.take_rpc(3), 0);
  c.count_consumed(3, false);
  c.reset(3);
  EXPECT_TRUE(c.take(3)) << "in-flight counts back to zero";
  EXPECT_EQ(c.take_rpc(3), 0);
  EXPECT_EQ(c.take_owed(3), 0u) << "owed credits forgotten";
}

TEST(Credits, GuardGivesBackUnlessSent) {
  Held c(1, 1);
  c.count_consumed(3, true);  // one credit owed to node 3
  {
    ASSERT_TRUE(c.take(3));
    MsgCreditGuard g(c, 3);
    EXPECT_EQ(g.take_owed(), 1u);
  }  // failed send: both back
  EXPECT_EQ(c.take_owed(3), 1u);
  c.give_back_owed(3, 1);
  {
    ASSERT_TRUE(c.take(3));
    MsgCreditGuard g(c, 3);
    EXPECT_EQ(g.take_owed(), 1u);
    g.sent();
  }
  EXPECT_FALSE(c.take(3)) << "the sent message keeps its credit";
  EXPECT_EQ(c.take_owed(3), 0u) << "and the owed credits rode on it";
}

TEST(Credits, EpochMovesOnlyWhileWatchedAndWakesASleeper) {
  Held c(1, 1);
  ASSERT_TRUE(c.take(3));
  uint32_t e0 = c.epoch();
  c.apply_msg(3, 1);
  EXPECT_EQ(c.epoch(), e0) << "no watcher: no locked instruction, no epoch move";
  ASSERT_TRUE(c.take(3));
  Credits::Watch w(c);
  uint32_t seen = c.epoch();
  std::thread t([&] { c.apply_msg(3, 1); });
  EXPECT_TRUE(c.sleep_while(seen, Deadline::after_ms(10000)).is_ok());
  t.join();
  EXPECT_NE(c.epoch(), seen);
  EXPECT_EQ(c.sleep_while(c.epoch(), Deadline::after_ms(1)).code(), Code::kTimedOut);
}

// A tenant cap on message credits over all receivers: refused with kQuota
// beyond it, and past half of it every message asks for its credit at once.
TEST(Credits, TenantCapOnMessageCreditsOverAllPeers) {
  Held c(64, 4);
  c.set_quotas(4, 0);
  bool now = true;
  ASSERT_EQ(c.take_msg(3, 8, &now), Code::kOk);
  EXPECT_FALSE(now);
  ASSERT_EQ(c.take_msg(4, 8, &now), Code::kOk);
  EXPECT_FALSE(now) << "two of four: not past half";
  ASSERT_EQ(c.take_msg(5, 8, &now), Code::kOk);
  EXPECT_TRUE(now);
  EXPECT_TRUE(c.msg_credit_now());
  ASSERT_EQ(c.take_msg(3, 8, &now), Code::kOk);
  EXPECT_EQ(c.take_msg(6, 8, &now), Code::kQuota) << "a fifth, to any peer";
  EXPECT_EQ(c.msg_held(), 4);
  c.untake_msg(3);  // a message that did not go
  EXPECT_EQ(c.msg_held(), 3);
  c.apply_msg(3, 100);  // node 3 returns its one (more is never minted)
  EXPECT_EQ(c.msg_held(), 2);
  EXPECT_FALSE(c.msg_credit_now());
  c.reset(4);  // a lost connection forgets what went over it
  EXPECT_EQ(c.msg_held(), 1);
  c.rekey(5);  // so does a new node in the slot
  EXPECT_EQ(c.msg_held(), 0);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(c.take_msg(7, 8, &now), Code::kOk) << i;
  EXPECT_EQ(c.take_msg(7, 8, &now), Code::kQuota);
  // The per-peer limit still applies below the cap, and refuses without
  // holding anything against the cap.
  Held d(2, 4);
  d.set_quotas(10, 0);
  ASSERT_EQ(d.take_msg(3, 8, &now), Code::kOk);
  ASSERT_EQ(d.take_msg(3, 8, &now), Code::kOk);
  EXPECT_EQ(d.take_msg(3, 8, &now), Code::kNoResource);
  EXPECT_EQ(d.msg_held(), 2);
}

TEST(Credits, TenantCapOnCallsOutstandingOverAllServers) {
  Held c(4, 8);
  c.set_quotas(0, 3);
  EXPECT_EQ(c.take_rpc(3), 0);
  EXPECT_EQ(c.take_rpc(4), 0);
  EXPECT_EQ(c.take_rpc(3), 1);
  EXPECT_EQ(c.take_rpc(5), Credits::kRpcQuota);
  c.return_rpc(3);
  EXPECT_EQ(c.take_rpc(5), 0);
  c.untake_rpc(5);
  c.return_rpc(4);
  c.return_rpc(4);  // a late reply: never below zero, and not off the cap
  EXPECT_EQ(c.rpc_held(), 1);
  c.reset(3);
  EXPECT_EQ(c.rpc_held(), 0);
  // No cap: nothing counted.
  Held d(4, 8);
  EXPECT_EQ(d.take_rpc(3), 0);
  EXPECT_EQ(d.rpc_held(), 0);
}

}  // namespace
}  // namespace lt::proto
