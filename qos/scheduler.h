// QoS scheduler: the only way proto/ reaches a transport endpoint.
//
// Status today: a pass-through that enforces the tenant's quota on operations
// in flight (LT_ERR_QUOTA) and counts back-pressure. Priority classes, token
// buckets and RTT feedback (planned: docs/ARCHITECTURE.md, "What exists, what is
// planned") are not built yet; they slot in behind post() without changing its
// callers.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>

#include "common/config.h"
#include "transport/transport.h"

namespace lt::qos {

struct SchedulerStats {
  uint64_t posted = 0;
  uint64_t backpressured = 0;
  uint64_t quota_refused = 0;
};

/// Thread-safe.
class Scheduler {
 public:
  explicit Scheduler(const QosConfig& config) : config_(config) {}

  /// Reserves room for one operation of this tenant; kQuota when the tenant
  /// already has qos.max_outstanding_ops in flight. Pair with retire().
  Status admit() {
    uint32_t n = in_flight_.fetch_add(1, std::memory_order_relaxed);
    if (n >= config_.max_outstanding_ops) {
      in_flight_.fetch_sub(1, std::memory_order_relaxed);
      quota_refused_.fetch_add(1, std::memory_order_relaxed);
      return Code::kQuota;
    }
    return Status::ok();
  }
  void retire() { in_flight_.fetch_sub(1, std::memory_order_relaxed); }

  /// Posts to `ep`; a short count is back-pressure (counted, never logged).
  Result<size_t> post(transport::Endpoint& ep, std::span<const transport::WorkRequest> wrs) {
    auto r = ep.post(wrs);
    if (r.is_ok()) {
      posted_.fetch_add(*r, std::memory_order_relaxed);
      if (*r < wrs.size()) backpressured_.fetch_add(1, std::memory_order_relaxed);
    }
    return r;
  }

  SchedulerStats stats() const {
    return {posted_.load(std::memory_order_relaxed), backpressured_.load(std::memory_order_relaxed),
            quota_refused_.load(std::memory_order_relaxed)};
  }
  const std::string& tenant() const { return config_.tenant; }

 private:
  QosConfig config_;
  std::atomic<uint32_t> in_flight_{0};
  std::atomic<uint64_t> posted_{0}, backpressured_{0}, quota_refused_{0};
};

}  // namespace lt::qos
