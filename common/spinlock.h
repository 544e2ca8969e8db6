// A test-and-set lock for the short critical sections of hot paths (no
// system call, no allocation held under it). Spins with pause, then yields:
// on 2 cores the holder may be descheduled.
#pragma once

#include <sched.h>

#include <atomic>

namespace lt {

class SpinLock {
 public:
  void lock() {
    for (int spins = 0; flag_.exchange(true, std::memory_order_acquire);) {
      while (flag_.load(std::memory_order_relaxed)) relax(&spins);
    }
  }
  bool try_lock() {
    return !flag_.load(std::memory_order_relaxed) &&
           !flag_.exchange(true, std::memory_order_acquire);
  }
  void unlock() { flag_.store(false, std::memory_order_release); }

 private:
  static void relax(int* spins) {
    if (++*spins < 256) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#elif defined(__aarch64__)
      asm volatile("yield");
#endif
      return;
    }
    *spins = 0;
    sched_yield();
  }
  std::atomic<bool> flag_{false};
};

}  // namespace lt
