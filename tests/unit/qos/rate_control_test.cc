// The control law against a simulated clock: throttle, recover, work
// conservation, the floor, the token bucket's rate, and weighted sharing
// within a priority.
#include "qos/rate_control.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace lt::qos {
namespace {

constexpr uint64_t kT = RateControl::kIntervalNs;
constexpr uint64_t kSolo = 1'000'000'000;  // bytes/s the class moves alone
constexpr uint64_t kPerInterval = kSolo / (1'000'000'000 / kT);

// A class that ran alone for a while at kSolo.
RateControl warmed(uint64_t* now, uint32_t floor_percent = 5) {
  RateControl rc(floor_percent);
  for (int i = 0; i < 50; ++i) rc.update(*now += kT, kT, kPerInterval, false, false);
  return rc;
}

TEST(RateControl, NoHigherClassMeansNoThrottling) {
  uint64_t now = 0;
  RateControl rc = warmed(&now);
  EXPECT_FALSE(rc.throttled());
  EXPECT_EQ(rc.rate(), RateControl::kUnlimited);
  EXPECT_NEAR(static_cast<double>(rc.solo_rate()), kSolo, kSolo * 0.01);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(rc.take(1 << 20, now + i), 0u);
  // A higher class that is active but within its target changes nothing.
  rc.update(now += kT, kT, kPerInterval, true, false);
  EXPECT_FALSE(rc.throttled());
  EXPECT_EQ(rc.take(1 << 20, now), 0u);
}

TEST(RateControl, CongestionHalvesTheRateDownToTheFloor) {
  uint64_t now = 0;
  RateControl rc = warmed(&now, 10);
  rc.update(now += kT, kT, kPerInterval, true, true);
  ASSERT_TRUE(rc.throttled());
  EXPECT_EQ(rc.throttles(), 1u);
  uint64_t last = rc.rate();
  EXPECT_LE(last, kSolo / 2 + kSolo / 100);
  for (int i = 0; i < 20; ++i) {
    rc.update(now += kT, kT, 0, true, true);
    EXPECT_LE(rc.rate(), last);
    last = rc.rate();
  }
  // Never below floor_percent of the solo rate: the class is not starved.
  EXPECT_NEAR(static_cast<double>(rc.rate()), kSolo / 10.0, kSolo * 0.01);
}

TEST(RateControl, RecoversAdditivelyThenStopsThrottling) {
  uint64_t now = 0;
  RateControl rc = warmed(&now);
  for (int i = 0; i < 10; ++i) rc.update(now += kT, kT, kPerInterval / 4, true, true);
  ASSERT_TRUE(rc.throttled());
  uint64_t last = rc.rate();
  int steps = 0;
  while (rc.throttled() && steps < 100) {
    rc.update(now += kT, kT, kPerInterval / 4, true, false);
    if (rc.throttled()) {
      EXPECT_GT(rc.rate(), last);  // additive: a fixed step up
      EXPECT_NEAR(static_cast<double>(rc.rate() - last), kSolo / 16.0, kSolo * 0.01);
      last = rc.rate();
    }
    ++steps;
  }
  EXPECT_FALSE(rc.throttled());
  EXPECT_LE(steps, 17);  // floor to solo in at most kIncreaseSteps intervals
  EXPECT_EQ(rc.rate(), RateControl::kUnlimited);
}

// A class that never ran alone (a higher class active from the start, as
// two tenants started together) has no solo rate yet: what it moved
// unthrottled beside the higher class stands in for it. Without that, the
// floor and the additive step were fractions of the throttled rate itself,
// and sustained congestion took the class down to kMinRate for good.
TEST(RateControl, AClassThatNeverRanAloneKeepsItsFloorAndRecovers) {
  uint64_t now = 0;
  RateControl rc(5);
  rc.update(now += kT, kT, kPerInterval, true, false);  // unthrottled, beside the higher class
  EXPECT_FALSE(rc.throttled());
  for (int i = 0; i < 100; ++i) {
    // Congested throughout; the class moves what its bucket lets through.
    const uint64_t moved = rc.throttled() ? rc.rate() / (1'000'000'000 / kT) : kPerInterval;
    rc.update(now += kT, kT, moved, true, true);
    ASSERT_TRUE(rc.throttled());
  }
  EXPECT_NEAR(static_cast<double>(rc.rate()), kSolo / 20.0, kSolo * 0.01);  // 5% of it
  int steps = 0;
  while (rc.throttled() && steps < 100) {
    rc.update(now += kT, kT, rc.rate() / (1'000'000'000 / kT), true, false);
    ++steps;
  }
  EXPECT_FALSE(rc.throttled());
  EXPECT_LE(steps, 17);  // back in at most kIncreaseSteps intervals
}

TEST(RateControl, HigherClassGoingIdleEndsThrottlingAtOnce) {
  uint64_t now = 0;
  RateControl rc = warmed(&now);
  // A class that moves nothing is not cut: there is nothing to cut.
  rc.update(now += kT, kT, 0, true, true);
  EXPECT_FALSE(rc.throttled());
  for (int i = 0; i < 5; ++i) rc.update(now += kT, kT, kPerInterval, true, true);
  ASSERT_TRUE(rc.throttled());
  rc.update(now += kT, kT, 0, false, false);  // work-conserving
  EXPECT_FALSE(rc.throttled());
  EXPECT_EQ(rc.take(64 << 20, now), 0u);
}

TEST(RateControl, TokenBucketHoldsTheRateAndEveryCallerGetsThrough) {
  uint64_t now = 0;
  RateControl rc = warmed(&now);
  for (int i = 0; i < 3; ++i) rc.update(now += kT, kT, kPerInterval, true, true);
  ASSERT_TRUE(rc.throttled());
  const uint64_t rate = rc.rate();
  // One simulated second of 64 KiB operations, each waiting as told.
  const uint64_t op = 64 << 10, start = now;
  uint64_t sent = 0;
  int waits = 0;
  while (now < start + 1'000'000'000ull) {
    uint64_t w = rc.take(op, now);
    if (w == 0) {
      sent += op;
    } else {
      ++waits;
      now += w;
    }
  }
  EXPECT_GT(waits, 0);
  EXPECT_NEAR(static_cast<double>(sent), static_cast<double>(rate), rate * 0.05 + op);
  // A single operation larger than the bucket still passes (into debt).
  EXPECT_EQ(rc.take(0, now += 1'000'000'000ull), 0u);
  EXPECT_EQ(rc.take(1ull << 30, now), 0u);
  EXPECT_GT(rc.take(op, now), 0u);
}

// Two classes of one priority, each wanting the whole link (kSolo), under a
// higher class that finds the link congested whenever they move more than
// 80% of it. An unthrottled class takes what a throttled one leaves; two
// unthrottled ones split it evenly. Returns what A moved over what B moved,
// once the first intervals are past.
double shared_ratio(uint32_t weight_a, uint32_t weight_b) {
  uint64_t now = 0;
  RateControl a, b;
  for (int i = 0; i < 50; ++i) {  // together, unthrottled: half each
    a.update(now += kT, kT, kPerInterval / 2, false, false);
    b.update(now, kT, kPerInterval / 2, false, false);
  }
  const uint32_t weights = weight_a + weight_b;
  double moved_a = 0, moved_b = 0;
  for (int i = 0; i < 5000; ++i) {
    const bool free_a = !a.throttled(), free_b = !b.throttled();
    uint64_t ra = free_a ? 0 : std::min(a.rate(), kSolo);
    uint64_t rb = free_b ? 0 : std::min(b.rate(), kSolo);
    if (!free_a && !free_b && ra + rb > kSolo) {  // the link holds no more
      ra = ra * kSolo / (ra + rb);
      rb = kSolo - ra;
    }
    if (free_a && free_b) ra = rb = kSolo / 2;
    if (free_a && !free_b) ra = kSolo - rb;
    if (free_b && !free_a) rb = kSolo - ra;
    const bool congested = ra + rb > kSolo / 10 * 8;
    const uint64_t group_solo = a.solo_rate() + b.solo_rate();
    const uint64_t ba = ra / (1'000'000'000 / kT), bb = rb / (1'000'000'000 / kT);
    a.update(now += kT, kT, ba, true, congested, {group_solo, weight_a, weights});
    b.update(now, kT, bb, true, congested, {group_solo, weight_b, weights});
    if (i >= 1000) {
      moved_a += static_cast<double>(ba);
      moved_b += static_cast<double>(bb);
    }
  }
  return moved_a / moved_b;
}

TEST(RateControl, ClassesOfOnePriorityShareByWeight) {
  EXPECT_NEAR(shared_ratio(1, 1), 1.0, 0.15);
  EXPECT_NEAR(shared_ratio(3, 1), 3.0, 0.75);
  EXPECT_NEAR(shared_ratio(1, 4), 0.25, 0.08);
}

TEST(RateControl, AClassAloneInItsGroupGrowsByItsOwnSolo) {
  uint64_t now = 0;
  RateControl rc = warmed(&now);
  for (int i = 0; i < 10; ++i) rc.update(now += kT, kT, kPerInterval / 4, true, true);
  const uint64_t cut = rc.rate();
  // Its group's other classes are idle: their weights do not count.
  rc.update(now += kT, kT, kPerInterval / 4, true, false, {kSolo, 5, 5});
  EXPECT_NEAR(static_cast<double>(rc.rate() - cut), kSolo / 16.0, kSolo * 0.01);
}

}  // namespace
}  // namespace lt::qos
