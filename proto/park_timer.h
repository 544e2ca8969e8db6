// How long the progress thread stays parked for busy callers (see
// progress_loop), and the alarm another thread can set for it.
//
// Parked while callers are busy, the thread wakes after kWindowNs (its own
// timed park, an epoll timeout), looks whether callers are still busy, and
// parks again if so; so a caller that stops calling leaves peers' requests
// waiting at most kWindowNs + kSlackNs. Callers never set a timer on their
// own path: setting one reprograms the CPU's timer hardware when it is the
// next to expire, which under a hypervisor is a VM exit (14 us on the
// 2-vCPU VMs ltier is measured on). The thread's timer slack (kSlackNs)
// lets the kernel fold its wake-up into a timer interrupt that comes anyway
// rather than program one: at 3 ms the window and its slack span a whole
// tick at 250 Hz (4 ms), the usual kernel's slowest, so the scheduler tick
// of a busy CPU always ends the park (a 1 ms slack left three parks in four
// to program their own interrupt: ~290 more timer interrupts a second in an
// 8 B tcp ping-pong). A wake-up while a caller spins makes no poll: the
// caller's core loses only the switch.
//
// The timerfd is for the hand-over (Engine::poll_asleep): a caller that
// slept on the transports in the thread's place, parked untimed, gives the
// polling back and arms it, so the thread wakes within kWindowNs.
//
// Thread contract: any thread; two arms at once both set the timer.
#pragma once

#include <sys/timerfd.h>
#include <unistd.h>

#include <cstdint>

#include "common/net.h"

namespace lt::proto {

class ParkTimer {
 public:
  static constexpr uint64_t kWindowNs = 1'000'000;
  static constexpr int kWindowMs = static_cast<int>(kWindowNs / 1'000'000);  // for epoll_wait
  static constexpr uint64_t kSlackNs = 3'000'000;

  ParkTimer() : fd_(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)) {}
  ~ParkTimer() {
    if (fd_ >= 0) close(fd_);
  }
  ParkTimer(const ParkTimer&) = delete;
  ParkTimer& operator=(const ParkTimer&) = delete;

  /// Readable once the alarm went off; -1 when the system refused a timer
  /// (then the thread's untimed parks last kWindowNs at a time).
  int fd() const { return fd_; }
  /// Sets the alarm kWindowNs from now and forgets one that went off.
  void arm() {
    itimerspec t{};
    t.it_value.tv_sec = static_cast<time_t>(kWindowNs / 1'000'000'000ull);
    t.it_value.tv_nsec = static_cast<long>(kWindowNs % 1'000'000'000ull);
    if (fd_ >= 0) timerfd_settime(fd_, 0, &t, nullptr);
  }
  void drain() {
    if (fd_ >= 0) net::drain_eventfd(fd_);
  }

 private:
  const int fd_;
};

}  // namespace lt::proto
