// A test-and-set lock for the short critical sections of hot paths (no
// system call, no allocation held under it). A waiter spins with pause, then
// yields: on 2 cores the holder may be descheduled, and a yield lets it run.
//
// Except when the holder runs under SCHED_IDLE (tl_may_stall): the kernel
// then leaves it preempted for as long as any normal thread wants the CPU,
// and a normal waiter's yields hand the core straight back to the waiter.
// Such a holder takes the lock in its own state (kHeldMayStall); a waiter
// that finds it there marks it (kSleepers) and sleeps on the lock word (a
// futex) until that holder's unlock wakes it, which frees the core for the
// holder to finish.
//
// A test-and-set lock is unfair: a thread that unlocks and locks again at
// once (a sender copying message after message under a connection's lock)
// wins against a waiter that spins on another core or has just yielded, and
// a thread posting one call waited 100 ms behind a stream of 16 KiB sends.
// So a waiter that has yielded kYieldsBeforeStarving times says it starves
// (starving_), and until it has had the lock, lockers that do not starve
// leave it free for it. A thread under SCHED_IDLE never says so: the
// others would then wait for a thread the kernel may not run.
//
// The holders the hot paths see pay nothing for all this: a compare-and-swap
// and a load from the line it took to lock, a load and a plain store to
// unlock.
#pragma once

#include <atomic>
#include <cstdint>

#include "common/tls.h"

namespace lt {

/// Set while the calling thread runs under a CPU policy that may leave it
/// preempted for long (qos/cpu_policy.h sets it with SCHED_IDLE). Locks it
/// takes then make their waiters sleep rather than spin.
extern LT_TLS_FAST constinit thread_local bool tl_may_stall;  // constinit: no TLS wrapper call

class SpinLock {
 public:
  // starving_ is read after the compare-and-swap, from the line that now
  // is this core's: read before, it would fetch the line shared and the
  // swap fetch it again. A locker that finds a waiter starving gives the
  // lock back and waits its turn.
  void lock() {
    uint32_t v = kFree;
    if (word_.compare_exchange_strong(v, mine(), std::memory_order_acquire,
                                      std::memory_order_relaxed)) [[likely]] {
      if (starving_.load(std::memory_order_relaxed) == 0) [[likely]]
        return;
      unlock();
    }
    lock_slow();
  }
  bool try_lock() {
    uint32_t v = word_.load(std::memory_order_relaxed);
    if (v != kFree || !word_.compare_exchange_strong(v, mine(), std::memory_order_acquire,
                                                     std::memory_order_relaxed)) {
      return false;
    }
    if (starving_.load(std::memory_order_relaxed) == 0) return true;
    unlock();
    return false;
  }
  // A waiter changes the word only from kHeldMayStall, so a kHeld holder
  // finds it as it left it (whatever tl_may_stall says by now).
  void unlock() {
    if (word_.load(std::memory_order_relaxed) == kHeld) [[likely]] {
      word_.store(kFree, std::memory_order_release);
      return;
    }
    if (word_.exchange(kFree, std::memory_order_release) == kSleepers) wake_sleepers();
  }

 private:
  static constexpr uint32_t kFree = 0;
  static constexpr uint32_t kHeld = 1;          // by a thread that runs when it is runnable
  static constexpr uint32_t kHeldMayStall = 2;  // by a thread under SCHED_IDLE
  static constexpr uint32_t kSleepers = 3;      // kHeldMayStall, and waiters sleep on the word
  static uint32_t mine() { return tl_may_stall ? kHeldMayStall : kHeld; }
  void lock_slow();  // spinlock.cc
  void wake_sleepers();
  std::atomic<uint32_t> word_{kFree};
  std::atomic<uint32_t> starving_{0};  // waiters that starve (lock_slow)
};

}  // namespace lt
