// Quiescence: a snapshot waits for exactly the sections in progress when it
// was taken, nested sections count once, and later sections do not hold it.
#include "proto/quiesce.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace lt::proto {
namespace {

// A thread that enters a section when told and leaves when told.
class Holder {
 public:
  Holder() : t_([this] { run(); }) {}
  ~Holder() {
    step_.store(3);
    t_.join();
  }
  void enter() { go(1); }
  void leave() { go(2); }

 private:
  void go(int s) {
    step_.store(s);
    while (done_.load() != s) std::this_thread::yield();
  }
  void run() {
    for (;;) {
      int s = step_.load();
      if (s == 1 && done_.load() != 1) {
        section_ = new Quiescence::Section;
        done_.store(1);
      } else if (s == 2 && done_.load() != 2) {
        delete section_;
        done_.store(2);
      } else if (s == 3) {
        return;
      }
      std::this_thread::yield();
    }
  }
  std::atomic<int> step_{0}, done_{0};
  Quiescence::Section* section_ = nullptr;
  std::thread t_;
};

TEST(Quiescence, SnapshotWaitsForTheSectionsInProgress) {
  Holder a, b;
  a.enter();
  Quiescence::Snapshot s = Quiescence::snapshot();
  EXPECT_FALSE(Quiescence::passed(s));
  b.enter();  // after the snapshot: does not hold it
  a.leave();
  EXPECT_TRUE(Quiescence::passed(s));
  EXPECT_FALSE(Quiescence::passed(Quiescence::snapshot()));  // b is inside
  b.leave();
  EXPECT_TRUE(Quiescence::passed(Quiescence::snapshot()));
}

TEST(Quiescence, NestedSectionsCountOnce) {
  Quiescence::Snapshot s;
  {
    Quiescence::Section outer;
    { Quiescence::Section inner; }
    // Still inside the outer section: a snapshot taken by another thread
    // sees this one.
    std::thread([&] { s = Quiescence::snapshot(); }).join();
    EXPECT_FALSE(Quiescence::passed(s));
  }
  EXPECT_TRUE(Quiescence::passed(s));
}

}  // namespace
}  // namespace lt::proto
