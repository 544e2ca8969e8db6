// Reclaiming objects that threads use through plain pointers, with no
// reference count on the hot path (the endpoint cache: every post loads a
// peer's Endpoint* and uses it). Quiescent-state based, with an asymmetric
// fence:
//  - a thread brackets its use in a Section: two plain stores to a counter
//    of its own (odd while inside), and a compiler barrier;
//  - the reclaimer first unpublishes the object (no new section can find
//    it), then runs AsymFence's heavy side (membarrier), so each thread
//    either is seen inside a section or will see the object unpublished;
//    then it snapshots the counters, and frees the object once every thread
//    that was inside has moved on (its counter changed).
// Until AsymFence is ready (or where the kernel has no membarrier) a
// section's first store is a seq_cst store instead (a locked instruction),
// and the reclaimer's seq_cst unpublish and loads order against it: the
// same rule, paid by the readers. A snapshot waits for the registration
// (readers switch to plain stores once it is done). This is the scheme of
// userspace RCU's membarrier flavour, reduced to what the engine needs.
//
// Thread contract: Section is for any thread; Snapshot and passed() are for
// the reclaimer (any thread, one at a time per snapshot).
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "common/tls.h"
#include "proto/asym_fence.h"

namespace lt::proto {

class Quiescence {
 public:
  struct alignas(64) Slot {
    std::atomic<uint64_t> seq{0};  // odd: inside a section
    bool in_use = false;           // under the registry's lock
  };

  /// Nests: only the outermost section of a thread counts.
  class Section {
   public:
    Section() { enter(); }
    ~Section() { leave(); }
    Section(const Section&) = delete;
    Section& operator=(const Section&) = delete;
  };

  /// Starts the membarrier registration in the background (once per
  /// process; a thread's first section starts it too).
  static void prepare();
  /// The threads inside a section now (after the barrier), with their counters.
  using Snapshot = std::vector<std::pair<const Slot*, uint64_t>>;
  static Snapshot snapshot();
  /// True once every thread of `s` has left the section it was in.
  static bool passed(const Snapshot& s);

 private:
  // The calling thread's slot and nesting depth: plain thread-locals with
  // constant initialization, so the hot path reaches them without a call.
  struct ThreadState {
    Slot* slot;
    uint32_t depth;
  };
  LT_TLS_FAST static constinit thread_local ThreadState t_state;
  static Slot* attach();  // first section of a thread: its slot, and the exit hook

  static void enter() {
    ThreadState& t = t_state;
    if (t.depth++ != 0) return;
    if (t.slot == nullptr) [[unlikely]]
      t.slot = attach();
    const uint64_t v = t.slot->seq.load(std::memory_order_relaxed) + 1;
    if (AsymFence::ready()) {
      t.slot->seq.store(v, std::memory_order_relaxed);
      std::atomic_signal_fence(std::memory_order_seq_cst);  // the kernel's barrier does the rest
    } else {
      t.slot->seq.store(v, std::memory_order_seq_cst);
    }
  }
  static void leave() {
    ThreadState& t = t_state;
    if (--t.depth != 0) return;
    t.slot->seq.store(t.slot->seq.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }
};

}  // namespace lt::proto
