// SpinLock's waiting side (spinlock.h): spin and yield behind a holder that
// runs, sleep on the lock word behind one that may stay preempted.
#include "common/spinlock.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>

namespace lt {

LT_TLS_FAST constinit thread_local bool tl_may_stall = false;

namespace {

constexpr int kSpinsBeforeYield = 256;
constexpr int kYieldsBeforeStarving = 2;

// True when it yielded.
bool relax(int* spins) {
  if (++*spins < kSpinsBeforeYield) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
    return false;
  }
  *spins = 0;
  sched_yield();
  return true;
}

long futex(std::atomic<uint32_t>* word, int op, uint32_t val) {
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op | FUTEX_PRIVATE_FLAG, val,
                   nullptr, nullptr, 0);
}

}  // namespace

void SpinLock::lock_slow() {
  bool starving = false;
  int yields = 0;
  for (int spins = 0;;) {
    uint32_t v = word_.load(std::memory_order_relaxed);
    // Free, and no other waiter starves (or this one does): take it.
    if (v == kFree && (starving || starving_.load(std::memory_order_relaxed) == 0)) {
      if (word_.compare_exchange_weak(v, mine(), std::memory_order_acquire,
                                      std::memory_order_relaxed)) {
        if (starving) starving_.fetch_sub(1, std::memory_order_relaxed);
        return;
      }
      continue;
    }
    if (v == kFree || v == kHeld) {  // held, or left free for a starving waiter
      if (relax(&spins) && !starving && !tl_may_stall && ++yields >= kYieldsBeforeStarving) {
        starving = true;
        starving_.fetch_add(1, std::memory_order_relaxed);
      }
      continue;
    }
    // Held by a thread that may stay preempted: mark the word, then sleep
    // while it still says so (the holder's unlock changes it, then wakes).
    if (v == kHeldMayStall && !word_.compare_exchange_weak(v, kSleepers, std::memory_order_relaxed,
                                                           std::memory_order_relaxed)) {
      continue;
    }
    futex(&word_, FUTEX_WAIT, kSleepers);
  }
}

// Every sleeper wakes: each either takes the lock or, finding it held
// again, waits as above (the waiters of one lock are a few threads).
void SpinLock::wake_sleepers() { futex(&word_, FUTEX_WAKE, INT_MAX); }

}  // namespace lt
