// The control law per (class, peer): a lower class is cut towards the peer
// where a higher class is congested, as a whole for congestion that names
// no peer it reaches, and its lanes to one peer share by weight.
#include <gtest/gtest.h>

#include "qos/scheduler.h"
#include "sim_clock.h"

namespace lt::qos {
namespace {

using sim::policy;
using sim::sim_now;
using sim::sim_op_to;
using sim::sim_sleep;

// Two classes of one priority, weights 3 and 1, cut together by a slow
// latency call: once the latency class is back within its target, each
// grows by its weight's share, so the heavier one climbs three times as fast.
// With every call to one peer the same holds for the two classes' lanes to
// it (the congestion names that peer); with none, for the classes.
void recover_by_weight(transport::NodeId peer) {
  QosConfig q;
  q.tenant = "t";
  q.board = "none";
  QosClass hi, heavy, light;
  hi.name = "latency";
  hi.target_rtt_ns = 100'000;
  heavy.name = "heavy";
  heavy.priority = light.priority = 1;
  heavy.weight = 3;
  light.name = "light";
  q.policy.classes = {hi, heavy, light};
  QosTenant t;
  t.name = "t";
  t.classes = {"latency", "heavy", "light"};
  t.default_class = "latency";
  q.policy.tenants = {t};
  Scheduler s(q, Clock{&sim_now, &sim_sleep});
  std::string error;
  ASSERT_TRUE(s.start(&error).is_ok()) << error;
  constexpr uint64_t kT = RateControl::kIntervalNs;
  auto op = [&](const char* cls, uint64_t bytes, uint64_t takes_ns) {
    sim_op_to(s, cls, peer, bytes, takes_ns);
  };
  // The rate that throttles each class: its lane's to `peer`, or its own.
  auto rate_of = [&](const ClassStats& c) {
    if (peer == 0) return c.rate;
    for (const auto& [p, r] : c.peer_rates) {
      if (p == peer) return r;
    }
    return RateControl::kUnlimited;
  };
  auto rates = [&] {
    auto cs = s.class_stats();
    return std::make_pair(rate_of(cs[1]), rate_of(cs[2]));
  };
  for (int i = 0; i < 40; ++i) {  // both alone: the same solo rate
    op("heavy", 1 << 20, kT / 4);
    op("light", 1 << 20, kT / 4);
  }
  // Latency calls of 2 ms, one always in flight while both write.
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(s.set_thread_class("latency").is_ok());
    Ticket slow;
    slow.peer = peer;
    ASSERT_TRUE(s.admit(8, Deadline::never(), &slow).is_ok());
    for (int k = 0; k < 8; ++k) {
      op("heavy", 1 << 20, kT / 4);
      op("light", 1 << 20, kT / 4);
    }
    s.complete(slow);
    s.retire(slow);
  }
  ASSERT_NE(rates().first, RateControl::kUnlimited);
  ASSERT_NE(rates().second, RateControl::kUnlimited);
  // Fast latency calls now; the slow call's signal lasts until their first
  // interval has passed.
  for (int i = 0; i < 3; ++i) {
    op("latency", 8, 20'000);
    sim_sleep(kT);
  }
  uint64_t grew_heavy = 0, grew_light = 0;
  for (int i = 0; i < 200; ++i) {
    auto [h0, l0] = rates();
    op("latency", 8, 20'000);
    op("heavy", 1 << 20, kT / 4);
    op("light", 1 << 20, kT / 4);
    auto [h1, l1] = rates();
    if (h1 == RateControl::kUnlimited || l1 == RateControl::kUnlimited) break;
    ASSERT_GE(h1, h0);
    ASSERT_GE(l1, l0);
    grew_heavy += h1 - h0;
    grew_light += l1 - l0;
  }
  ASSERT_GT(grew_light, 0u);
  EXPECT_NEAR(static_cast<double>(grew_heavy) / static_cast<double>(grew_light), 3.0, 0.5);
  ASSERT_TRUE(s.set_thread_class("").is_ok());
}

TEST(Scheduler, ClassesOfOnePriorityRecoverByWeight) { recover_by_weight(0); }
TEST(Scheduler, LanesToOnePeerRecoverByWeight) { recover_by_weight(7); }

// A two-peer bulk class: writes to peers kA and kB, each 1 MiB taking half
// an interval, and the latency class's calls to kA. Returns the waits, in
// admit(), of the writes to each peer over `rounds` rounds.
struct Waits {
  uint64_t a = 0, b = 0;
};
constexpr transport::NodeId kA = 2, kB = 3;

Waits bulk_rounds(Scheduler& s, int rounds, bool to_a = true) {
  constexpr uint64_t kT = RateControl::kIntervalNs;
  Waits w;
  for (int i = 0; i < rounds; ++i) {
    if (to_a) w.a += sim_op_to(s, "bulk", kA, 1 << 20, kT / 2);
    w.b += sim_op_to(s, "bulk", kB, 1 << 20, kT / 2);
  }
  return w;
}

// One latency call to kA that takes `takes_ns`, the bulk writing meanwhile.
void slow_latency_call(Scheduler& s, uint64_t takes_ns, bool bulk_to_a = true) {
  ASSERT_TRUE(s.set_thread_class("latency").is_ok());
  Ticket lat;
  lat.peer = kA;
  ASSERT_TRUE(s.admit(8, Deadline::never(), &lat).is_ok());
  const uint64_t end = sim_now() + takes_ns;
  while (sim_now() < end) bulk_rounds(s, 1, bulk_to_a);
  s.complete(lat);
  s.retire(lat);
}

// The latency class is congested at kA once (one 2 ms call): only the bulk
// class's writes to kA are cut and wait while their lane recovers; its
// writes to kB never wait, and the class as a whole is not throttled.
TEST(Scheduler, ThrottledOnlyTowardsThePeerWhereTheClassesMeet) {
  Scheduler s(policy("kv"), Clock{&sim_now, &sim_sleep});
  std::string error;
  ASSERT_TRUE(s.start(&error).is_ok()) << error;
  bulk_rounds(s, 20);  // alone: each lane's solo rate
  slow_latency_call(s, 2'000'000);
  Waits w;
  bool seen_throttled = false;
  for (int i = 0; i < 200; ++i) {
    sim_op_to(s, "latency", kA, 8, 20'000);  // fast now
    const Waits r = bulk_rounds(s, 1);
    w.a += r.a;
    w.b += r.b;
    auto cs = s.class_stats();
    if (cs[1].throttled_peers != 0) {
      seen_throttled = true;
      ASSERT_EQ(cs[1].throttled_peers, 1u);
      ASSERT_EQ(cs[1].peer_rates.size(), 1u);
      EXPECT_EQ(cs[1].peer_rates[0].first, kA);
      EXPECT_EQ(cs[1].rate, cs[1].peer_rates[0].second);
    }
  }
  EXPECT_TRUE(seen_throttled);
  EXPECT_GT(w.a, 0u) << "the writes to the congested peer were not cut";
  EXPECT_EQ(w.b, 0u) << "a write to the other peer waited";
  auto cs = s.class_stats();
  EXPECT_EQ(cs[1].throttled_peers, 0u) << "the lane did not recover";
  EXPECT_EQ(cs[1].rate, RateControl::kUnlimited);
  EXPECT_GE(cs[1].throttles, 1u);
  ASSERT_TRUE(s.set_thread_class("").is_ok());
}

// Congestion at a peer the bulk class does not write to is the host's (the
// classes share this node's NIC and CPUs): the whole class is cut.
TEST(Scheduler, CongestionAtAPeerTheClassDoesNotReachCutsTheWholeClass) {
  Scheduler s(policy("kv"), Clock{&sim_now, &sim_sleep});
  std::string error;
  ASSERT_TRUE(s.start(&error).is_ok()) << error;
  bulk_rounds(s, 20, false);
  slow_latency_call(s, 2'000'000, false);
  uint64_t waited = 0;
  bool class_cut = false;
  for (int i = 0; i < 20; ++i) {
    sim_op_to(s, "latency", kA, 8, 20'000);  // fast now: recovery
    waited += bulk_rounds(s, 1, false).b;
    auto cs = s.class_stats();
    EXPECT_EQ(cs[1].throttled_peers, 0u);
    class_cut = class_cut || cs[1].rate != RateControl::kUnlimited;
  }
  EXPECT_GT(waited, 0u) << "the class's writes did not wait";
  EXPECT_TRUE(class_cut) << "the class was not cut";
  ASSERT_TRUE(s.set_thread_class("").is_ok());
}

// While the latency class stays congested at kA, the bulk class's lane to kA
// falls to its floor; cutting that path further cannot help, so the class as
// a whole is cut too, and its writes to kB wait as well.
TEST(Scheduler, ALaneAtItsFloorCutsTheWholeClass) {
  Scheduler s(policy("kv"), Clock{&sim_now, &sim_sleep});
  std::string error;
  ASSERT_TRUE(s.start(&error).is_ok()) << error;
  bulk_rounds(s, 20);
  slow_latency_call(s, 2'000'000);
  const Waits first = bulk_rounds(s, 1);
  EXPECT_EQ(first.b, 0u) << "only the lane to kA is cut at first";
  EXPECT_EQ(s.class_stats()[1].throttled_peers, 1u);
  Waits w;
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(s.set_thread_class("latency").is_ok());
    Ticket lat;
    lat.peer = kA;
    ASSERT_TRUE(s.admit(8, Deadline::never(), &lat).is_ok());
    const Waits r = bulk_rounds(s, 10);
    w.b += r.b;
    s.complete(lat);  // each about 2 ms or more: above target
    s.retire(lat);
  }
  EXPECT_GT(w.b, 0u) << "the class was not cut once the lane was at its floor";
  ASSERT_TRUE(s.set_thread_class("").is_ok());
}

}  // namespace
}  // namespace lt::qos
