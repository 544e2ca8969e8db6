// The asynchronous events of one RDMA device context (ibv_get_async_event):
// what the device reports outside any completion. A shared receive queue's
// limit event goes to whoever watches that SRQ (ud's receiver signal), and
// a queue pair's error to whoever watches that QP (ud puts its QP back in
// service, ARCHITECTURE §6e); port, device, queue-pair and CQ events are
// logged with the device and port they concern, so a port that went down or
// a device that failed is named in the log rather than found through timeouts.
//
// Thread contract: any thread may call read(); one reads at a time, and a
// caller that finds another reading leaves the events to it. Watchers are
// added and removed under the same lock.
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

struct ibv_context;
struct ibv_qp;
struct ibv_srq;

namespace lt::transport::verbs {

class AsyncEvents {
 public:
  /// Sets the context's async fd non-blocking; `device` names it in logs.
  AsyncEvents(ibv_context* ctx, std::string device);
  AsyncEvents(const AsyncEvents&) = delete;
  AsyncEvents& operator=(const AsyncEvents&) = delete;

  /// Reads (and acknowledges) every event waiting, without blocking.
  /// Returns how many were read (0 also when another thread is reading).
  int read();
  /// `fired` is set when `srq`'s limit event comes (the device's count of
  /// posted receives fell below the limit set with ibv_modify_srq). The
  /// limit then is off until set again.
  void watch_srq(ibv_srq* srq, std::atomic<bool>* fired) { watch(srq, fired); }
  /// `fired` is set when `qp` reports an error (fatal, request or access).
  void watch_qp(ibv_qp* qp, std::atomic<bool>* fired) { watch(qp, fired); }
  /// Stops the watch of an SRQ or QP (before it is destroyed).
  void unwatch(const void* object);
  /// Events read so far (for tests and the log).
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }

 private:
  void watch(const void* object, std::atomic<bool>* fired);
  void fire(const void* object);  // under mu_

  ibv_context* ctx_;
  const std::string device_;
  std::mutex mu_;
  std::vector<std::pair<const void*, std::atomic<bool>*>> watched_;  // mu_: SRQs and QPs
  std::atomic<uint64_t> count_{0};
};

}  // namespace lt::transport::verbs
