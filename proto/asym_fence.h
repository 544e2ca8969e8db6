// An asymmetric fence: the two sides of a store-then-load handshake (each
// stores its flag, then loads the other's; at least one must see the other)
// where one side runs on every operation and the other rarely. The hot
// side's fence is a compiler barrier only; the rare side calls
// membarrier(PRIVATE_EXPEDITED), which runs a full memory barrier on every
// CPU running a thread of this process, so the pair orders as two full
// fences would. Userspace RCU's membarrier flavour and asymmetric hazard
// pointers use the same pair.
//
// Registering for membarrier waits for an RCU grace period in the kernel
// (about 10 ms) once the process has a second thread, so then it runs on a
// thread of its own, started by prepare(); a process of one thread
// registers at once (the kernel needs no grace period then).
// Until it is done (or where the kernel has no membarrier, or under
// ThreadSanitizer, which does not model the kernel's barrier) ready() is
// false and both sides use seq_cst operations instead.
//
// The switch happens once per process while threads run. A hot side that
// reads ready() true (acquire) after a rare side read it false still orders
// against that rare side's seq_cst store: the rare side's store came before
// its flag load, and the hot side's loads come after its flag load (loads
// are ordered on x86 and ARMv8). Users that sleep on the handshake also cap
// their sleeps.
#pragma once

#include <atomic>

namespace lt::proto {

class AsymFence {
 public:
  /// Registers (once per process): at once while the process has one
  /// thread, else in the background.
  static void prepare();
  /// Waits until the registration has ended either way (a few ms, once).
  static void wait_ready();
  /// True once the hot side may use a compiler barrier.
  static bool ready() { return ready_.load(std::memory_order_acquire); }
  /// The rare side's fence, after its store and before its load: a
  /// membarrier once ready(), else a seq_cst fence.
  static void heavy();

 private:
  static std::atomic<bool> ready_;
};

}  // namespace lt::proto
