// The progress thread's alarm while it is parked for busy callers (see
// progress_loop): it sleeps until the alarm, and callers that keep calling
// push the alarm further out, at most one timerfd_settime per kRearmNs
// each. So a caller in a tight loop of operations costs the parked thread
// no wake-up at all (a timer wake-up lands on a core a spinner is using,
// and preempts it), and one that stops calling leaves it parked at most
// kWindowNs: how long a peer's request may then wait for this engine.
//
// Thread contract: any thread; two extends at once both set the timer.
#pragma once

#include <sys/timerfd.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

#include "common/net.h"

namespace lt::proto {

class ParkTimer {
 public:
  static constexpr uint64_t kWindowNs = 1'000'000;
  static constexpr uint64_t kRearmNs = 250'000;

  ParkTimer() : fd_(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)) {}
  ~ParkTimer() {
    if (fd_ >= 0) close(fd_);
  }
  ParkTimer(const ParkTimer&) = delete;
  ParkTimer& operator=(const ParkTimer&) = delete;

  /// Readable once the alarm went off; -1 when the system refused a timer
  /// (then the progress thread parks for kWindowNs at a time instead).
  int fd() const { return fd_; }
  /// Sets the alarm kWindowNs from `now` (now_ns()) and forgets one that
  /// went off.
  void arm(uint64_t now) {
    armed_at_.store(now, std::memory_order_relaxed);
    itimerspec t{};
    t.it_value.tv_sec = static_cast<time_t>(kWindowNs / 1'000'000'000ull);
    t.it_value.tv_nsec = static_cast<long>(kWindowNs % 1'000'000'000ull);
    if (fd_ >= 0) timerfd_settime(fd_, 0, &t, nullptr);
  }
  /// A caller's call ended at `now`: pushes the alarm out if it was set
  /// kRearmNs ago or more.
  void extend(uint64_t now) {
    if (now - armed_at_.load(std::memory_order_relaxed) >= kRearmNs) arm(now);
  }
  /// No alarm: the thread parks until woken (a caller polls in its place).
  void disarm() {
    armed_at_.store(0, std::memory_order_relaxed);
    itimerspec t{};
    if (fd_ >= 0) timerfd_settime(fd_, 0, &t, nullptr);
  }
  void drain() {
    if (fd_ >= 0) net::drain_eventfd(fd_);
  }

 private:
  const int fd_;
  std::atomic<uint64_t> armed_at_{0};
};

}  // namespace lt::proto
