// Whether a sender may leave a small message held back in its transport
// (kWrMore: a stream transport gathers held frames into one system call)
// until the next progress pass, and the progress thread's side of that
// promise.
//
// Every progress pass starts by flushing what senders held. So a held frame
// waits at most until the next pass, and the engine promises one within
// ParkTimer::kWindowNs + kSlackNs: the progress thread never waits without a
// deadline while a frame may be held. The two sides meet here:
//   - a sender posts with kWrMore, then asks held_back(); false means the
//     progress thread is in (or entering) a wait without a deadline, and
//     the sender flushes the frame itself;
//   - the progress thread, before such a wait, asks begin_untimed(); false
//     means a sender held frames since it last looked, and it waits at most
//     kWindowNs instead (and looks again then, after a pass that flushed).
// Both sides write their own word and read the other's, each with a full
// barrier in between (a locked add and a sequentially consistent exchange),
// so at least one of them sees the other: a frame is never held while the
// thread sleeps without a deadline.
//
// Cost per held frame: one locked add and one load of a word the progress
// thread writes around its waits (a few times per batch).
//
// Thread contract: held_back() from any thread; begin_untimed() and
// end_untimed() from the progress thread only.
#pragma once

#include <atomic>
#include <cstdint>

namespace lt::proto {

class CorkWatch {
 public:
  /// After a post with kWrMore: true while the frame may stay held.
  bool held_back() {
    holds_.fetch_add(1, std::memory_order_seq_cst);
    return !untimed_.load(std::memory_order_seq_cst);
  }
  /// Before a wait without a deadline: true when it may be one (then call
  /// end_untimed() after it); false when it must end within kWindowNs.
  bool begin_untimed() {
    untimed_.store(true, std::memory_order_seq_cst);
    const uint64_t h = holds_.load(std::memory_order_seq_cst);
    if (h == seen_) return true;
    seen_ = h;
    untimed_.store(false, std::memory_order_relaxed);
    return false;
  }
  void end_untimed() { untimed_.store(false, std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> holds_{0};
  std::atomic<bool> untimed_{false};
  uint64_t seen_ = 0;  // progress thread only
};

}  // namespace lt::proto
