// How long a waiter spins before it sleeps, learned from how long its waits
// last. Sleeping costs a wake-up when the event comes (a few microseconds on
// a bare machine, tens on a small VM, hundreds under emulation such as
// Soft-RoCE in a TCG guest), so a waiter whose events come a little after a
// fixed spin would pay it every time. The gauge keeps a moving average of
// waits that ended within `cap_ns` and offers twice that as the budget,
// never below `floor_ns` (the configured spin) nor above `cap_ns`. Longer
// waits (a slow handler, a peer held up by a CPU hog, a receive with nothing
// coming) are left out: spinning would not have caught them, and they must
// not make every later wait spin to the cap.
//
// Thread contract: any thread; updates are racy on purpose (one may be
// lost), a gauge is a hint, never a correctness input.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace lt {

class SpinGauge {
 public:
  SpinGauge(uint64_t floor_ns, uint64_t cap_ns) : floor_ns_(floor_ns), cap_ns_(cap_ns) {}

  uint64_t budget_ns() const {
    return std::clamp(2 * avg_ns_.load(std::memory_order_relaxed), floor_ns_,
                      std::max(floor_ns_, cap_ns_));
  }
  /// A wait that ended after `ns`.
  void note(uint64_t ns) {
    if (ns > cap_ns_) return;
    const uint64_t old = avg_ns_.load(std::memory_order_relaxed);
    avg_ns_.store(old == 0 ? ns : old - old / 4 + ns / 4, std::memory_order_relaxed);
  }
  uint64_t average_ns() const { return avg_ns_.load(std::memory_order_relaxed); }

 private:
  const uint64_t floor_ns_, cap_ns_;
  std::atomic<uint64_t> avg_ns_{0};
};

}  // namespace lt
