// Reclaiming objects that threads use through plain pointers, with no
// reference count on the hot path (the endpoint cache: every post loads a
// peer's Endpoint* and uses it). Quiescent-state based, with an asymmetric
// fence:
//  - a thread brackets its use in a Section: two plain stores to a counter
//    of its own (odd while inside), and a compiler barrier;
//  - the reclaimer first unpublishes the object (no new section can find
//    it), then calls membarrier(PRIVATE_EXPEDITED), which runs a full memory
//    barrier on every CPU that runs a thread of this process, so each thread
//    either is seen inside a section or will see the object unpublished;
//    then it snapshots the counters, and frees the object once every thread
//    that was inside has moved on (its counter changed).
// Where the kernel has no membarrier, a section's first store is a seq_cst
// store instead (a locked instruction) and the reclaimer uses a fence: the
// same rule, paid by the readers. This is the scheme of userspace RCU's
// membarrier flavour and of asymmetric hazard pointers, reduced to what the
// engine needs.
//
// Thread contract: Section is for any thread; Snapshot and passed() are for
// the reclaimer (any thread, one at a time per snapshot).
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

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

  /// The threads inside a section now (after the barrier), with their counters.
  using Snapshot = std::vector<std::pair<const Slot*, uint64_t>>;
  static Snapshot snapshot();
  /// True once every thread of `s` has left the section it was in.
  static bool passed(const Snapshot& s);

 private:
  static void enter();
  static void leave();
};

}  // namespace lt::proto
