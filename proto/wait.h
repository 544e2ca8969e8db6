// The primitives every waiter in the engine is built from: a futex on a
// 32-bit counter (sleep until it moves, wake everyone) and the pause a
// spinning thread takes between polls. A waiter spins first (engine.spin_us,
// polling for everyone), then counts itself a sleeper and sleeps on the
// counter; a completer bumps the counter and wakes only when a sleeper is
// counted, so a completion nobody sleeps on costs no system call.
#pragma once

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <ctime>

#include "common/time.h"

namespace lt::proto {

/// Sleeps while *a == expected, at most timeout_ns (a missed wake-up costs
/// at most that).
inline void futex_wait(std::atomic<uint32_t>* a, uint32_t expected, uint64_t timeout_ns) {
  timespec ts{static_cast<time_t>(timeout_ns / 1000000000ull),
              static_cast<long>(timeout_ns % 1000000000ull)};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(a), FUTEX_WAIT_PRIVATE, expected, &ts, nullptr, 0);
}

inline void futex_wake_all(std::atomic<uint32_t>* a) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(a), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr,
          0);
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

/// When a spinning thread yields its core. A yield that comes back at once
/// found no other thread wanting the core: the next comes after twice the
/// gap, up to `max_gap_ns`, so a thread alone on its core pays a system call
/// only that often. A yield that took longer than kHandedNs gave the core to
/// another thread, so the core is shared (two processes' spinners on one
/// core while a CPU hog holds the other, or a progress thread): the thread
/// we wait for may be that one and need the core again soon, so the next
/// yield comes at the next look. A ping-pong of two threads on one core then
/// costs about one switch per hop instead of a whole gap.
class YieldPacer {
 public:
  explicit YieldPacer(uint64_t max_gap_ns) : max_gap_ns_(max_gap_ns) {}
  /// Called as the spinner reads the clock: yields when due. `now` moves
  /// past the yield when one was made.
  void maybe_yield(uint64_t* now) {
    if (*now < next_ns_) return;
    sched_yield();
    const uint64_t back = now_ns();
    if (back - *now > kHandedNs) {
      gap_ns_ = 0;
    } else {
      gap_ns_ = gap_ns_ == 0 ? kMinGapNs : std::min(2 * gap_ns_, max_gap_ns_);
    }
    *now = back;
    next_ns_ = back + gap_ns_;
  }
  /// A new spin: the first yield after one gap.
  void start(uint64_t now) { next_ns_ = now + gap_ns_; }

 private:
  static constexpr uint64_t kHandedNs = 1500;
  static constexpr uint64_t kMinGapNs = 250;
  const uint64_t max_gap_ns_;
  uint64_t gap_ns_ = kMinGapNs;
  uint64_t next_ns_ = 0;
};

/// The longest single futex sleep of a waiter: bounds what a missed wake-up
/// costs, not how long a wait lasts.
inline constexpr uint64_t kMaxSleepNs = 50000000;

}  // namespace lt::proto
