// What the scheduler tests share: a policy of three classes and two
// tenants, and a simulated clock with operations that take simulated time.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <string>

#include "qos/scheduler.h"

namespace lt::qos::sim {

// latency (priority 0, target 100 us) above bulk (1) above batch (2); tenant
// kv may use latency and bulk, etl bulk and batch.
inline QosConfig policy(const std::string& tenant) {
  QosConfig q;
  q.tenant = tenant;
  q.board = "none";  // alone: not throttled by other tests' engines on this host
  QosClass hi;
  hi.name = "latency";
  hi.priority = 0;
  hi.target_rtt_ns = 100'000;
  QosClass lo;
  lo.name = "bulk";
  lo.priority = 1;
  QosClass other;
  other.name = "batch";
  other.priority = 2;
  q.policy.classes = {lo, hi, other};  // file order is not priority order
  QosTenant kv;
  kv.name = "kv";
  kv.classes = {"latency", "bulk"};
  kv.default_class = "latency";
  kv.max_ops_in_flight = 3;
  kv.max_lmr_bytes = 1000;
  kv.max_lmrs = 2;
  QosTenant etl;
  etl.name = "etl";
  etl.classes = {"bulk", "batch"};
  etl.default_class = "bulk";
  q.policy.tenants = {kv, etl};
  return q;
}

// A simulated clock: time moves only when a test or a throttled call's
// wait moves it.
inline std::atomic<uint64_t> sim_ns{1'000'000'000};
inline uint64_t sim_now() { return sim_ns.load(); }
inline void sim_sleep(uint64_t ns) { sim_ns.fetch_add(ns); }

// One operation of class `cls` that takes `takes_ns` of simulated time, from
// admit to retire.
inline void sim_op(Scheduler& s, const char* cls, uint64_t bytes, uint64_t takes_ns) {
  ASSERT_TRUE(s.set_thread_class(cls).is_ok());
  Ticket t;
  ASSERT_TRUE(s.admit(bytes, Deadline::never(), &t).is_ok());
  sim_sleep(takes_ns);
  s.complete(t);
  s.retire(t);
}

// The same to `peer`; returns how long admit() made it wait.
inline uint64_t sim_op_to(Scheduler& s, const char* cls, transport::NodeId peer, uint64_t bytes,
                          uint64_t takes_ns) {
  EXPECT_TRUE(s.set_thread_class(cls).is_ok());
  Ticket t;
  t.peer = peer;
  const uint64_t before = sim_now();
  EXPECT_TRUE(s.admit(bytes, Deadline::never(), &t).is_ok());
  const uint64_t waited = sim_now() - before;
  sim_sleep(takes_ns);
  s.complete(t);
  s.retire(t);
  return waited;
}

}  // namespace lt::qos::sim
