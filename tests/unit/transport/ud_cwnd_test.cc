// The ud congestion window's rules (transport/verbs/ud_cwnd.h) against
// synthetic acknowledgements, marks, losses and timeouts. The transport that uses
// it runs in the Soft-RoCE guest (tests/rdma/ud_congestion_test.cc).
#include "transport/verbs/ud_cwnd.h"

#include <gtest/gtest.h>

namespace lt::transport::verbs {
namespace {

// Acknowledges the whole window `rounds` times, one datagram per ack, as a
// sender that keeps the window full sees it. *una follows the acks.
void ack_rounds(UdCwnd& w, uint32_t* una, int rounds) {
  for (int r = 0; r < rounds; ++r) {
    const uint32_t n = w.window();
    for (uint32_t i = 0; i < n; ++i) w.on_acked(1, ++*una);
  }
}

TEST(UdCwnd, StartsAtTheFlowWindowAndStaysThereWithoutLoss) {
  UdCwnd w(128);
  uint32_t una = 0;
  EXPECT_EQ(w.window(), 128u);
  ack_rounds(w, &una, 4);
  EXPECT_EQ(w.window(), 128u);  // never above the flow window
  EXPECT_EQ(w.cuts(), 0u);
}

TEST(UdCwnd, FixedNeverMoves) {
  UdCwnd w(64, 0, UdCwnd::Mode::kFixed);
  EXPECT_FALSE(w.on_loss(3, 64));
  EXPECT_FALSE(w.on_mark(5, 64));
  EXPECT_FALSE(w.on_timeout(64));
  uint32_t una = 0;
  ack_rounds(w, &una, 2);
  EXPECT_EQ(w.window(), 64u);
  EXPECT_EQ(w.cuts(), 0u);
}

TEST(UdCwnd, ALossHalvesOncePerWindowAndHoldsUntilItsFlightIsAcknowledged) {
  UdCwnd w(128);
  uint32_t una = 0;
  ack_rounds(w, &una, 1);
  ASSERT_EQ(w.window(), 128u);
  const uint32_t nxt = una + 128;  // a full window in flight
  EXPECT_TRUE(w.on_loss(una + 3, nxt));
  EXPECT_EQ(w.window(), 64u);
  EXPECT_EQ(w.threshold(), 64u);
  // More holes of the same flight are the same event.
  EXPECT_FALSE(w.on_loss(una + 7, nxt));
  EXPECT_FALSE(w.on_loss(nxt - 1, nxt + 10));
  EXPECT_EQ(w.window(), 64u);
  EXPECT_EQ(w.cuts(), 1u);
  // Partial acks inside the cut's flight do not grow it.
  w.on_acked(3, una + 3);
  w.on_acked(60, una + 63);
  EXPECT_EQ(w.window(), 64u);
  // Past the flight: additive increase, one datagram per window acknowledged.
  w.on_acked(65, nxt);
  EXPECT_EQ(w.window(), 64u);  // the ack that ended recovery does not count
  una = nxt;
  for (int i = 0; i < 64; ++i) w.on_acked(1, ++una);
  EXPECT_EQ(w.window(), 65u);
  for (int i = 0; i < 64; ++i) w.on_acked(1, ++una);
  EXPECT_EQ(w.window(), 65u);
  w.on_acked(1, ++una);
  EXPECT_EQ(w.window(), 66u);
  // A loss of data sent after the first cut is a new event.
  EXPECT_TRUE(w.on_loss(una + 1, una + 66));
  EXPECT_EQ(w.window(), 33u);
  EXPECT_EQ(w.cuts(), 2u);
}

TEST(UdCwnd, RepeatedLossesStopAtTheFloor) {
  UdCwnd w(128);
  uint32_t seq = 0;
  for (int i = 0; i < 10; ++i) {
    EXPECT_TRUE(w.on_loss(seq, seq + 1));
    w.on_acked(1, ++seq);  // the flight of the cut is acknowledged
  }
  EXPECT_EQ(w.window(), UdCwnd::kFloor);
  EXPECT_EQ(w.threshold(), UdCwnd::kFloor);
  EXPECT_EQ(w.cuts(), 10u);
}

TEST(UdCwnd, ATimeoutRestartsSlowStartFromTheFloor) {
  UdCwnd w(64);
  uint32_t una = 0;
  ack_rounds(w, &una, 1);
  ASSERT_EQ(w.window(), 64u);
  w.on_timeout(una + 64);
  EXPECT_EQ(w.window(), UdCwnd::kFloor);
  EXPECT_EQ(w.threshold(), 32u);
  // A second expiry before the window grew keeps the threshold.
  w.on_timeout(una + 64);
  EXPECT_EQ(w.threshold(), 32u);
  EXPECT_EQ(w.cuts(), 2u);
  // Holes the peer reports in the flight that timed out cut no more.
  EXPECT_FALSE(w.on_loss(una + 5, una + 64));
  // Slow start up to the threshold, then additive.
  ack_rounds(w, &una, 3);  // 4 -> 8 -> 16 -> 32
  EXPECT_EQ(w.window(), 32u);
  ack_rounds(w, &una, 1);
  EXPECT_EQ(w.window(), 33u);
}

TEST(UdCwnd, AMarkHalvesOncePerWindowLikeALoss) {
  UdCwnd w(128);
  uint32_t una = 0;
  ack_rounds(w, &una, 1);
  const uint32_t nxt = una + 128;
  // The marked ack moves the cumulative ack by 5: the cut comes first.
  EXPECT_TRUE(w.on_mark(una + 5, nxt));
  w.on_acked(5, una + 5);
  EXPECT_EQ(w.window(), 64u);
  // Marks and losses about the same flight are the same event.
  EXPECT_FALSE(w.on_mark(una + 40, nxt));
  w.on_acked(35, una + 40);
  EXPECT_FALSE(w.on_loss(una + 50, nxt));
  EXPECT_EQ(w.window(), 64u);
  EXPECT_EQ(w.cuts(), 1u);
  EXPECT_EQ(w.marks(), 1u);
  // Past the flight, a new mark cuts again.
  w.on_acked(88, nxt);
  una = nxt;
  EXPECT_TRUE(w.on_mark(una + 1, una + 64));
  EXPECT_EQ(w.window(), 32u);
  EXPECT_EQ(w.marks(), 2u);
}

TEST(UdCwnd, MarksOnlyIgnoresLossesAndTimeouts) {
  UdCwnd w(128, 0, UdCwnd::Mode::kMarks);
  uint32_t una = 0;
  ack_rounds(w, &una, 1);
  // A link that drops at random: holes are resent, the window stays.
  for (int i = 0; i < 20; ++i) EXPECT_FALSE(w.on_loss(una + 1 + i, una + 128));
  EXPECT_EQ(w.window(), 128u);
  EXPECT_EQ(w.cuts(), 0u);
  // A resend lost too (a timeout) is resent again, the window kept.
  EXPECT_FALSE(w.on_timeout(una + 128));
  EXPECT_EQ(w.window(), 128u);
  // A receiver short of buffers cuts it.
  EXPECT_TRUE(w.on_mark(una + 2, una + 128));
  EXPECT_EQ(w.window(), 64u);
  EXPECT_EQ(w.cuts(), 1u);
  EXPECT_EQ(w.marks(), 1u);
}

TEST(UdCwnd, SequenceNumbersWrap) {
  uint32_t una = 0xffffffa0u;
  UdCwnd w(64, una);
  ack_rounds(w, &una, 1);
  ASSERT_EQ(w.window(), 64u);
  const uint32_t nxt = una + 64;  // past zero
  EXPECT_TRUE(w.on_loss(una + 1, nxt));
  EXPECT_FALSE(w.on_loss(nxt - 2, nxt));  // same flight, across the wrap
  w.on_acked(64, nxt);
  EXPECT_TRUE(w.on_loss(nxt + 1, nxt + 32));
  EXPECT_EQ(w.cuts(), 2u);
}

}  // namespace
}  // namespace lt::transport::verbs
