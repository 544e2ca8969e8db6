#include "qos/cpu_policy.h"

#include <sched.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "common/log.h"

namespace lt::qos {

namespace {

struct Saved {
  bool have = false;
  int policy = SCHED_OTHER;
  sched_param param{};
};
thread_local Saved saved;

std::atomic<bool> told_stuck{false};

int kernel_policy(QosCpuPolicy p) {
  switch (p) {
    case QosCpuPolicy::kBatch:
      return SCHED_BATCH;
    case QosCpuPolicy::kIdle:
      return SCHED_IDLE;
    default:
      return SCHED_OTHER;
  }
}

bool change_to(int policy, const sched_param& param) {
  if (sched_setscheduler(0, policy, &param) == 0) {
    tl_may_stall = policy == SCHED_IDLE;
    return true;
  }
  const int err = errno;
  if (err == EPERM && tl_may_stall) {
    if (!told_stuck.exchange(true, std::memory_order_relaxed)) {
      LT_WARN(
          "qos: a thread of an idle class cannot get its CPU priority back (%s): leaving "
          "SCHED_IDLE needs CAP_SYS_NICE or RLIMIT_NICE of at least 20 (ulimit -e); it "
          "stays idle",
          strerror(err));
    }
    return false;
  }
  LT_WARN("qos: cannot change this thread's CPU policy: %s", strerror(err));
  return false;
}

}  // namespace

void set_thread_cpu_policy(QosCpuPolicy p) {
  if (p == QosCpuPolicy::kUnset) {
    if (saved.have && change_to(saved.policy, saved.param)) saved.have = false;
    return;
  }
  if (!saved.have) {
    const int now = sched_getscheduler(0);
    if (now < 0 || sched_getparam(0, &saved.param) != 0) return;
    saved.policy = now;
    saved.have = true;
  }
  sched_param none{};
  change_to(kernel_policy(p), none);
}

}  // namespace lt::qos
