// CorkWatch: a sender may hold a message back only while the progress
// thread is not in a wait without a deadline, and a hold since the thread
// last looked makes its next wait a timed one.
#include "proto/cork_watch.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace lt::proto {
namespace {

TEST(CorkWatch, HoldsAndUntimedWaitsExcludeEachOther) {
  CorkWatch w;
  EXPECT_TRUE(w.begin_untimed());  // nothing held yet
  EXPECT_FALSE(w.held_back());     // the thread sleeps untimed: flush now
  w.end_untimed();
  // The refused hold above still counts: the thread looks once more, timed.
  EXPECT_FALSE(w.begin_untimed());
  EXPECT_TRUE(w.begin_untimed());
  w.end_untimed();
  EXPECT_TRUE(w.held_back());
  EXPECT_TRUE(w.held_back());
  EXPECT_FALSE(w.begin_untimed());  // held since it last looked: a timed wait
  EXPECT_TRUE(w.held_back());       // and holding goes on meanwhile
  EXPECT_FALSE(w.begin_untimed());
  EXPECT_TRUE(w.begin_untimed());  // nothing new: untimed again
  w.end_untimed();
}

// Under contention, the model of the engine: a sender posts a held frame
// (pending), then asks held_back() and flushes it itself when refused; the
// progress thread flushes at each pass (after a timed wait) and, while in a
// wait without a deadline, must never find a frame held once the sender is
// between two posts.
TEST(CorkWatch, NoFrameStaysHeldThroughAnUntimedWait) {
  CorkWatch w;
  std::atomic<bool> stop{false}, busy{false}, pending{false};
  std::atomic<uint64_t> ops{0}, granted{0};
  std::thread sender([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      busy.store(true, std::memory_order_seq_cst);
      pending.store(true, std::memory_order_seq_cst);
      if (w.held_back()) {
        granted.fetch_add(1, std::memory_order_relaxed);
      } else {
        pending.store(false, std::memory_order_seq_cst);
      }
      busy.store(false, std::memory_order_seq_cst);
      ops.fetch_add(1, std::memory_order_seq_cst);
    }
  });
  uint64_t missed = 0, checked = 0;
  for (int i = 0; i < 20000; ++i) {
    if (!w.begin_untimed()) {
      pending.store(false, std::memory_order_seq_cst);  // the pass after the timed wait
      continue;
    }
    // Let the sender finish what it started before the wait began.
    const uint64_t start = ops.load(std::memory_order_seq_cst);
    while (ops.load(std::memory_order_seq_cst) < start + 2) {
    }
    const uint64_t o1 = ops.load(std::memory_order_seq_cst);
    const bool b1 = busy.load(std::memory_order_seq_cst);
    const bool p = pending.load(std::memory_order_seq_cst);
    const bool b2 = busy.load(std::memory_order_seq_cst);
    const uint64_t o2 = ops.load(std::memory_order_seq_cst);
    if (!b1 && !b2 && o1 == o2) {
      ++checked;
      if (p) ++missed;
    }
    w.end_untimed();
  }
  stop.store(true);
  sender.join();
  EXPECT_EQ(missed, 0u) << "of " << checked << " checks";
  EXPECT_GT(granted.load(), 0u);
}

}  // namespace
}  // namespace lt::proto
