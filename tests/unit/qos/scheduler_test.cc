// The scheduler: the tenant and class chosen at start, per-thread classes,
// quotas, and a lower class throttled by a higher class's synthetic RTT.
#include "qos/scheduler.h"

#include <gtest/gtest.h>

#include <thread>

#include "qos/base_rtt.h"
#include "sim_clock.h"

namespace lt::qos {
namespace {

using sim::policy;
using sim::sim_now;
using sim::sim_op;
using sim::sim_sleep;

TEST(Scheduler, OffWithoutClasses) {
  QosConfig q;
  q.max_outstanding_ops = 2;
  Scheduler s(q);
  std::string error;
  ASSERT_TRUE(s.start(&error).is_ok()) << error;
  EXPECT_FALSE(s.enabled());
  EXPECT_EQ(s.set_thread_class("latency").code(), Code::kUnsupported);
  Ticket a, b, c;
  EXPECT_TRUE(s.admit(100, Deadline::never(), &a).is_ok());
  EXPECT_TRUE(s.admit(100, Deadline::never(), &b).is_ok());
  EXPECT_EQ(s.admit(100, Deadline::never(), &c).code(), Code::kQuota);
  EXPECT_EQ(a.cls, Ticket::kNone);
  s.retire(a);
  EXPECT_TRUE(s.admit(100, Deadline::never(), &c).is_ok());
  EXPECT_EQ(s.stats().quota_refused, 1u);
  q.default_class = "latency";
  Scheduler bad(q);
  EXPECT_EQ(bad.start(&error).code(), Code::kInvalidArg);
  EXPECT_NE(error.find("qos.class"), std::string::npos) << error;
}

// With QoS off every admitted operation holds a request slot: a quota at
// or above the slots is the slots' own limit, and admit() counts nothing.
TEST(Scheduler, OffWithAQuotaAtTheSlotsCountsNothing) {
  QosConfig q;
  q.max_outstanding_ops = 64;
  Scheduler s(q);
  std::string error;
  ASSERT_TRUE(s.start(&error).is_ok()) << error;
  s.set_slot_capacity(64);
  Ticket t;
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(s.admit(8, Deadline::never(), &t).is_ok()) << i;
  EXPECT_EQ(s.out_of_slots(), Code::kQuota) << "out of slots is the quota's refusal";
  EXPECT_EQ(s.stats().quota_refused, 1u);

  Scheduler wide(q);
  ASSERT_TRUE(wide.start(&error).is_ok()) << error;
  wide.set_slot_capacity(32);  // fewer slots than the quota: they run out first
  EXPECT_EQ(wide.out_of_slots(), Code::kNoResource);
  EXPECT_EQ(wide.stats().quota_refused, 0u);

  Scheduler narrow(q);
  ASSERT_TRUE(narrow.start(&error).is_ok()) << error;
  narrow.set_slot_capacity(128);  // a quota below the slots is counted
  for (int i = 0; i < 64; ++i) ASSERT_TRUE(narrow.admit(8, Deadline::never(), &t).is_ok()) << i;
  EXPECT_EQ(narrow.admit(8, Deadline::never(), &t).code(), Code::kQuota);
  EXPECT_EQ(narrow.out_of_slots(), Code::kNoResource);
}

TEST(Scheduler, StartRefusesAnUnknownTenantOrClass) {
  std::string error;
  Scheduler nobody(policy("nobody"));
  EXPECT_EQ(nobody.start(&error).code(), Code::kInvalidArg);
  EXPECT_NE(error.find("'nobody' is not a configured tenant"), std::string::npos) << error;
  QosConfig q = policy("kv");
  q.default_class = "nope";
  Scheduler unknown(q);
  EXPECT_EQ(unknown.start(&error).code(), Code::kInvalidArg);
  EXPECT_NE(error.find("'nope' is not in qos.classes"), std::string::npos) << error;
  q.default_class = "batch";
  Scheduler forbidden(q);
  EXPECT_EQ(forbidden.start(&error).code(), Code::kInvalidArg);
  EXPECT_NE(error.find("not one tenant 'kv' may use"), std::string::npos) << error;
}

TEST(Scheduler, ClassesInPriorityOrderAndPerThread) {
  Scheduler s(policy("kv"));
  std::string error;
  ASSERT_TRUE(s.start(&error).is_ok()) << error;
  auto cs = s.class_stats();
  ASSERT_EQ(cs.size(), 2u);  // batch is not one of kv's classes
  EXPECT_EQ(cs[0].name, "latency");
  EXPECT_EQ(cs[1].name, "bulk");
  EXPECT_EQ(s.thread_class(), "latency");  // the tenant's default
  EXPECT_EQ(s.set_thread_class("batch").code(), Code::kPerm);
  EXPECT_EQ(s.set_thread_class("gold").code(), Code::kNotFound);
  ASSERT_TRUE(s.set_thread_class("bulk").is_ok());
  EXPECT_EQ(s.thread_class(), "bulk");
  std::string elsewhere;
  std::thread([&] { elsewhere = s.thread_class(); }).join();
  EXPECT_EQ(elsewhere, "latency");  // other threads keep the process's class
  Ticket t;
  ASSERT_TRUE(s.admit(4096, Deadline::never(), &t).is_ok());
  EXPECT_EQ(s.class_stats()[1].ops, 1u);
  EXPECT_EQ(s.class_stats()[1].bytes, 4096u);
  EXPECT_EQ(s.class_stats()[1].in_flight, 1u);
  s.complete(t, t.start_ns + 50'000);
  s.complete(t, t.start_ns + 90'000'000);  // a second report is ignored
  s.retire(t);
  cs = s.class_stats();
  EXPECT_EQ(cs[1].in_flight, 0u);
  EXPECT_GE(cs[1].rtt_p50_ns, 50'000u);
  EXPECT_LT(cs[1].rtt_p99_ns, 100'000u);
  ASSERT_TRUE(s.set_thread_class("").is_ok());
  EXPECT_EQ(s.thread_class(), "latency");
}

TEST(Scheduler, TenantQuotasRefuseWithQuota) {
  Scheduler s(policy("kv"));
  std::string error;
  ASSERT_TRUE(s.start(&error).is_ok()) << error;
  Ticket t[4];
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(s.admit(8, Deadline::never(), &t[i]).is_ok());
  EXPECT_EQ(s.admit(8, Deadline::never(), &t[3]).code(), Code::kQuota);  // max_ops_in_flight 3
  s.retire(t[0]);
  EXPECT_TRUE(s.admit(8, Deadline::never(), &t[3]).is_ok());
  EXPECT_TRUE(s.take_lmr(600).is_ok());
  EXPECT_EQ(s.take_lmr(600).code(), Code::kQuota);  // max_lmr_bytes 1000
  EXPECT_TRUE(s.take_lmr(400).is_ok());
  EXPECT_EQ(s.take_lmr(1).code(), Code::kQuota);  // max_lmrs 2
  s.give_lmr(400);
  EXPECT_TRUE(s.take_lmr(1).is_ok());
  EXPECT_EQ(s.stats().quota_refused, 3u);
}

// The bulk class is throttled while the latency class is active and above
// its 100 us target, and set free once the latency class goes idle.
TEST(Scheduler, HigherClassAboveTargetThrottlesTheLowerOne) {
  Scheduler s(policy("kv"), Clock{&sim_now, &sim_sleep});
  std::string error;
  ASSERT_TRUE(s.start(&error).is_ok()) << error;
  constexpr uint64_t kT = RateControl::kIntervalNs;
  auto op = [&](const char* cls, uint64_t bytes, uint64_t takes_ns) {
    sim_op(s, cls, bytes, takes_ns);
  };
  // Bulk alone: 1 MiB per 100 us, about 10 GB/s, for a few intervals.
  for (int i = 0; i < 20; ++i) op("bulk", 1 << 20, kT / 2);
  auto cs = s.class_stats();
  EXPECT_EQ(cs[1].rate, RateControl::kUnlimited);
  EXPECT_EQ(cs[1].delayed, 0u);
  // A latency call is always in flight while bulk writes, and each takes
  // about 2 ms, far above its target: bulk is cut to its floor (5% of its
  // solo rate), so its calls wait for tokens.
  auto latency_begin = [&](Ticket* t) {
    ASSERT_TRUE(s.set_thread_class("latency").is_ok());
    ASSERT_TRUE(s.admit(8, Deadline::never(), t).is_ok());
  };
  auto latency_end = [&](Ticket* t) {
    s.complete(*t);
    s.retire(*t);
  };
  Ticket lat;
  latency_begin(&lat);
  for (int i = 0; i < 10; ++i) {
    for (int k = 0; k < 20; ++k) op("bulk", 1 << 20, kT / 2);
    latency_end(&lat);
    latency_begin(&lat);
  }
  cs = s.class_stats();
  EXPECT_EQ(cs[0].rate, RateControl::kUnlimited) << "the highest class is never throttled";
  EXPECT_NE(cs[1].rate, RateControl::kUnlimited) << "bulk not throttled";
  EXPECT_EQ(cs[1].throttles, 1u);
  EXPECT_GE(cs[1].delayed, 1u);  // bulk calls waited for tokens, and got through
  EXPECT_EQ(cs[1].ops, 220u);
  EXPECT_GE(cs[0].rtt_p99_ns, 2'000'000u);
  // The latency call in flight ends, and later ones stay within target:
  // bulk's rate climbs back, and throttling ends.
  latency_end(&lat);
  const uint64_t cut = cs[1].rate;
  for (int i = 0; i < 40 && s.class_stats()[1].rate != RateControl::kUnlimited; ++i) {
    op("latency", 8, 20'000);
    op("bulk", 1 << 20, kT / 2);
    if (s.class_stats()[1].rate != RateControl::kUnlimited) {
      EXPECT_GE(s.class_stats()[1].rate, cut);
    }
  }
  EXPECT_EQ(s.class_stats()[1].rate, RateControl::kUnlimited);
  // Throttled again; then the latency class goes idle (or its process
  // crashed mid-call, leaving nothing in flight here): after its activity
  // window bulk runs free at once.
  latency_begin(&lat);
  for (int i = 0; i < 3; ++i) {
    for (int k = 0; k < 20; ++k) op("bulk", 1 << 20, kT / 2);
    latency_end(&lat);
    latency_begin(&lat);
  }
  ASSERT_NE(s.class_stats()[1].rate, RateControl::kUnlimited);
  latency_end(&lat);
  sim_sleep(2'000'000);
  op("bulk", 1 << 20, kT / 2);
  op("bulk", 1 << 20, kT / 2);
  EXPECT_EQ(s.class_stats()[1].rate, RateControl::kUnlimited);
  ASSERT_TRUE(s.set_thread_class("").is_ok());
}

// The base is the least RTT of this window and the last: a lucky sample is
// forgotten after two windows, and a node new in a peer's slot starts afresh.
TEST(BaseRtt, LeastOfTwoWindowsAndFreshForANewNode) {
  BaseRtt b;
  EXPECT_EQ(b.get(), BaseRtt::kNone);
  b.note(50, 1000, 100);
  b.note(80, 1050, 100);
  EXPECT_EQ(b.get(), 50u);
  b.note(90, 1200, 100);  // a new window: 50 is still in the one before
  EXPECT_EQ(b.get(), 50u);
  b.note(95, 1400, 100);  // and now forgotten
  EXPECT_EQ(b.get(), 90u);
  PeerBases peers;
  EXPECT_EQ(peers.of(5), nullptr);  // no table yet
  ASSERT_TRUE(peers.make());
  peers.of(5)->note(10, 0, 100);
  peers.of(6)->note(20, 0, 100);
  EXPECT_EQ(peers.of(5)->get(), 10u);
  EXPECT_EQ(peers.of(6)->get(), 20u);
  const transport::NodeId later = 5 + transport::kNodeSlots;  // slot 5, a later generation
  EXPECT_EQ(peers.of(later)->get(), BaseRtt::kNone);
}

// A derived (auto) target is each peer's own. Latency calls to a near peer
// (10 us) and a far one (300 us) are each within their peer's target, so
// bulk runs free; judged by the nearest peer's RTT, every far call would
// look congested. When the near peer's calls slow to 200 us (below the far
// peer's RTT, far above its own), bulk is throttled.
TEST(Scheduler, DerivedTargetIsEachPeersOwn) {
  QosConfig q = policy("kv");
  for (QosClass& c : q.policy.classes) {
    if (c.name == "latency") c.target_rtt_ns = 0;  // auto
  }
  Scheduler s(q, Clock{&sim_now, &sim_sleep});
  std::string error;
  ASSERT_TRUE(s.start(&error).is_ok()) << error;
  constexpr uint64_t kT = RateControl::kIntervalNs;
  constexpr transport::NodeId kNear = 2, kFar = 3;
  auto latency = [&](transport::NodeId peer, uint64_t takes_ns) {
    ASSERT_TRUE(s.set_thread_class("latency").is_ok());
    Ticket t;
    ASSERT_TRUE(s.admit(8, Deadline::never(), &t).is_ok());
    sim_sleep(takes_ns);
    t.peer = peer;
    s.complete(t);
    s.retire(t);
  };
  for (int i = 0; i < 20; ++i) sim_op(s, "bulk", 1 << 20, kT / 2);  // bulk's solo rate
  for (int i = 0; i < 60; ++i) {
    latency(kNear, 10'000);
    latency(kFar, 300'000);
    sim_op(s, "bulk", 1 << 20, kT / 2);
  }
  auto cs = s.class_stats();
  EXPECT_EQ(cs[1].throttles, 0u);
  EXPECT_EQ(cs[1].rate, RateControl::kUnlimited);
  for (int i = 0; i < 20; ++i) {
    latency(kNear, 200'000);
    latency(kFar, 300'000);
    sim_op(s, "bulk", 1 << 20, kT / 2);
  }
  cs = s.class_stats();
  EXPECT_GE(cs[1].throttles, 1u);
  EXPECT_NE(cs[1].rate, RateControl::kUnlimited);
  ASSERT_TRUE(s.set_thread_class("").is_ok());
}

// max_ops_per_s and max_bytes_per_s hold whether or not anything else is
// active; calls wait for them and all get through.
TEST(Scheduler, ClassCapsHoldAlways) {
  QosConfig q;
  q.board = "none";
  QosClass ops, bytes;
  ops.name = "ops";
  ops.priority = 0;
  ops.max_ops_per_s = 1000;
  bytes.name = "bytes";
  bytes.priority = 0;
  bytes.max_bytes_per_s = 1'000'000;
  q.policy.classes = {ops, bytes};
  Scheduler s(q, Clock{&sim_now, &sim_sleep});
  std::string error;
  ASSERT_TRUE(s.start(&error).is_ok()) << error;
  auto run = [&](const char* cls, int n, uint64_t size) {
    EXPECT_TRUE(s.set_thread_class(cls).is_ok());
    const uint64_t start = sim_now();
    for (int i = 0; i < n; ++i) {
      Ticket t;
      EXPECT_TRUE(s.admit(size, Deadline::never(), &t).is_ok());
      s.complete(t);
      s.retire(t);
    }
    return static_cast<double>(sim_now() - start) / 1e9;
  };
  EXPECT_NEAR(run("ops", 500, 8), 0.5, 0.01);            // 1000 calls/s
  EXPECT_NEAR(run("bytes", 21, 100'000), 2.0, 0.01);     // 1 MB/s, after one in debt
  EXPECT_EQ(s.chunk_bytes(1 << 20), uint64_t{1} << 20);  // nobody above
  EXPECT_TRUE(s.set_thread_class("").is_ok());
}

// While a higher class is active a lower class's blocking transfers are cut
// into kYieldChunk pieces; with nothing above, not.
TEST(Scheduler, LowerClassTransfersAreCutWhileAHigherOneIsActive) {
  Scheduler s(policy("kv"), Clock{&sim_now, &sim_sleep});
  std::string error;
  ASSERT_TRUE(s.start(&error).is_ok()) << error;
  ASSERT_TRUE(s.set_thread_class("bulk").is_ok());
  s.tick(sim_now());
  EXPECT_EQ(s.chunk_bytes(16 << 20), uint64_t{16} << 20);
  ASSERT_TRUE(s.set_thread_class("latency").is_ok());
  Ticket t;
  ASSERT_TRUE(s.admit(8, Deadline::never(), &t).is_ok());
  s.tick(sim_now());
  EXPECT_EQ(s.chunk_bytes(16 << 20), uint64_t{16} << 20);  // the highest class is never cut
  ASSERT_TRUE(s.set_thread_class("bulk").is_ok());
  EXPECT_EQ(s.chunk_bytes(16 << 20), Scheduler::kYieldChunk);
  EXPECT_EQ(s.chunk_bytes(1000), 1000u);
  s.complete(t);
  s.retire(t);
  sim_sleep(2'000'000);
  s.tick(sim_now());
  EXPECT_EQ(s.chunk_bytes(16 << 20), uint64_t{16} << 20);
  ASSERT_TRUE(s.set_thread_class("").is_ok());
}

}  // namespace
}  // namespace lt::qos
