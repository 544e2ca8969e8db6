// The primitives every waiter in the engine is built from: a futex on a
// 32-bit counter (sleep until it moves, wake everyone) and the pause a
// spinning thread takes between polls. A waiter spins first (engine.spin_us,
// polling for everyone), then counts itself a sleeper and sleeps on the
// counter; a completer bumps the counter and wakes only when a sleeper is
// counted, so a completion nobody sleeps on costs no system call.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <ctime>

#include "common/time.h"
#include "common/tls.h"

namespace lt::proto {

/// Sleeps while *a == expected, at most timeout_ns (a missed wake-up costs
/// at most that).
inline void futex_wait(std::atomic<uint32_t>* a, uint32_t expected, uint64_t timeout_ns) {
  timespec ts{static_cast<time_t>(timeout_ns / 1000000000ull),
              static_cast<long>(timeout_ns % 1000000000ull)};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(a), FUTEX_WAIT_PRIVATE, expected, &ts, nullptr, 0);
}

/// Wake-ups this thread sent to the engine's sleeping threads (futex_wake_all
/// and note_wake): a thread it woke may want its core next, so the progress
/// thread's spin keeps yielding after one (progress.cc).
inline thread_local uint32_t t_wakes LT_TLS_FAST = 0;
inline void note_wake() { ++t_wakes; }

inline void futex_wake_all(std::atomic<uint32_t>* a) {
  note_wake();
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(a), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr,
          0);
}

/// Empty progress() calls (each up to Engine::kEmptyPassesPerCall polls) a
/// spinner makes back to back before it pauses between them: PAUSE takes
/// 25 ns on Zen 5 (about an idle poll of the transports), and a message
/// that arrived during one waited for it, on each side of a round trip. A
/// ping-pong's wait is over within this many; a longer one pauses (the peer
/// may share the core, or be a hyperthread).
inline constexpr uint32_t kPlainPolls = 8;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

/// The longest single futex sleep of a waiter: bounds what a missed wake-up
/// costs, not how long a wait lasts.
inline constexpr uint64_t kMaxSleepNs = 50000000;

}  // namespace lt::proto
