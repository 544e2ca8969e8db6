// QoS policy as configured: priority classes and the tenants that may use
// them (the `qos.classes` and `qos.tenants` lists of the YAML file; see
// docs/CONFIG.md). Plain data, read at join. qos/ turns it into the
// scheduler's tables; an empty policy (no classes) means QoS is off and every
// operation goes straight to its transport.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace lt {

/// How the kernel schedules a class's threads against other threads
/// (qos.classes[].cpu_policy). kUnset leaves them as they are.
enum class QosCpuPolicy : uint8_t {
  kUnset,   // not configured: a thread keeps the policy it had
  kNormal,  // SCHED_OTHER
  kBatch,   // SCHED_BATCH: never preempts another thread when it wakes
  kIdle,    // SCHED_IDLE: runs on CPU time no normal thread wants
};

/// One priority class. Priority 0 is the highest; classes of one priority
/// are peers (never throttled for each other).
struct QosClass {
  std::string name;
  uint32_t priority = 0;
  uint32_t weight = 1;           // share among the classes throttled together
  uint64_t max_ops_per_s = 0;    // hard cap; 0: none
  uint64_t max_bytes_per_s = 0;  // hard cap; 0: none
  uint64_t target_rtt_ns = 0;    // 0: derived from the measured unloaded RTT
  uint32_t floor_percent = 5;    // a throttled class keeps at least this share
  std::vector<uint32_t> cpus;    // CPUs its threads run on, ascending; empty: not placed
  QosCpuPolicy cpu_policy = QosCpuPolicy::kUnset;
  int line = 0;  // where it was defined (1-based; 0: not from a file)
};

/// One tenant: which classes its processes may use, and its quotas.
struct QosTenant {
  std::string name;
  std::vector<std::string> classes;  // allowed, by name
  std::string default_class;         // one of `classes`; the first when not given
  uint32_t max_ops_in_flight = 0;    // 0: qos.max_outstanding_ops
  uint64_t max_lmr_bytes = 0;        // LMR memory it may own; 0: no limit
  uint32_t max_lmrs = 0;             // LMRs it may own; 0: no limit
  uint32_t max_msg_credits = 0;      // messages unconsumed at all receivers; 0: no limit
  uint32_t max_rpc_credits = 0;      // calls outstanding at all servers; 0: no limit
  int line = 0;
};

struct QosPolicy {
  std::vector<QosClass> classes;
  std::vector<QosTenant> tenants;
  bool enabled() const { return !classes.empty(); }
  const QosClass* find_class(const std::string& name) const;
  const QosTenant* find_tenant(const std::string& name) const;
};

/// The policy's own consistency (names unique and well formed, every class
/// a tenant names defined, default classes allowed): kInvalidArg with
/// `*error` naming the key and its line.
Status validate_qos_policy(const QosPolicy& p, std::string* error);

/// Whether `tenant` may join under `p`: with tenants configured it must be
/// one of them. kInvalidArg with `*error` saying which tenants there are.
Status check_qos_tenant(const QosPolicy& p, const std::string& tenant, std::string* error);

/// "64KiB", "2 GiB", "1.5M", "4096" -> bytes (or a count with k/M/G).
bool parse_size(const std::string& s, uint64_t* out);
/// "200us", "1.5ms", "2s", "500ns" -> nanoseconds.
bool parse_duration_ns(const std::string& s, uint64_t* out);
/// "3", "0-3", "0,2-3,8" -> the CPUs named, ascending, each once, every one
/// below kMaxCpu.
constexpr uint32_t kMaxCpu = 1024;
bool parse_cpu_list(const std::string& s, std::vector<uint32_t>* out);

}  // namespace lt
