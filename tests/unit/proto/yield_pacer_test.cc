// YieldPacer, PeerCpu and move_to_another_cpu on real threads and the real
// scheduler. The tests that move a thread need two CPUs the process may run
// on and skip otherwise.
#include "proto/yield_pacer.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "common/time.h"
#include "proto/wait.h"

namespace lt::proto {
namespace {

// The CPUs of the process's mask.
std::vector<int> allowed_cpus() {
  cpu_set_t mask;
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(mask), &mask) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &mask)) cpus.push_back(c);
  }
  return cpus;
}

cpu_set_t cpus_of(std::initializer_list<int> cpus) {
  cpu_set_t s;
  CPU_ZERO(&s);
  for (int c : cpus) CPU_SET(c, &s);
  return s;
}

bool set_mask(const cpu_set_t& s) { return sched_setaffinity(0, sizeof(s), &s) == 0; }

bool mask_is(const cpu_set_t& want) {
  cpu_set_t now;
  return sched_getaffinity(0, sizeof(now), &now) == 0 && CPU_EQUAL(&now, &want);
}

TEST(PeerCpu, KeepsTheLastPeersCpu) {
  PeerCpu p;
  EXPECT_EQ(p.of(transport::kNoNode), kCpuUnknown);
  EXPECT_EQ(p.of(3), kCpuUnknown);
  p.note(3, 5);
  EXPECT_EQ(p.of(3), 5);
  EXPECT_EQ(p.of(transport::kNoNode), 5);
  EXPECT_EQ(p.of(4), kCpuUnknown);  // the hint says nothing about another peer
  p.note(4, 2);
  EXPECT_EQ(p.of(3), kCpuUnknown);
  EXPECT_EQ(p.of(4), 2);
}

TEST(MoveToAnotherCpu, LeavesTheCpuAndGivesTheMaskBack) {
  const std::vector<int> cpus = allowed_cpus();
  if (cpus.size() < 2) GTEST_SKIP() << "needs two CPUs";
  const int a = cpus[0], b = cpus[1];
  bool moved = false, off_a = false, same_mask = false;
  std::thread t([&] {
    const cpu_set_t both = cpus_of({a, b});
    if (!set_mask(cpus_of({a})) || sched_getcpu() != a || !set_mask(both)) return;
    moved = move_to_another_cpu();
    off_a = sched_getcpu() == b;
    same_mask = mask_is(both);
  });
  t.join();
  EXPECT_TRUE(moved);
  EXPECT_TRUE(off_a);
  EXPECT_TRUE(same_mask);
}

TEST(MoveToAnotherCpu, RefusedWithOneCpuInTheMask) {
  const std::vector<int> cpus = allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  bool moved = true, still = false;
  std::thread t([&] {
    if (!set_mask(cpus_of({cpus[0]}))) return;
    moved = move_to_another_cpu();
    still = sched_getcpu() == cpus[0] && mask_is(cpus_of({cpus[0]}));
  });
  t.join();
  EXPECT_FALSE(moved);
  EXPECT_TRUE(still);
}

// A peer known to run on another CPU: a due yield is skipped (the spinner
// keeps its core), and the next look comes a whole gap later.
TEST(YieldPacer, NoYieldWhileThePeerRunsElsewhere) {
  PeerCpu peers;
  const CpuHint here = this_cpu_hint();
  ASSERT_NE(here, kCpuUnknown);
  peers.note(7, here == 1 ? 2 : 1);  // any CPU but this one
  YieldPacer pacer(4000, &peers, 7);
  uint64_t now = now_ns();
  pacer.start(now);
  EXPECT_EQ(pacer.maybe_yield(&now), YieldPacer::Did::kNotDue);
  now += 1000;
  EXPECT_EQ(pacer.maybe_yield(&now), YieldPacer::Did::kSkipped);
  now += 1000;
  EXPECT_EQ(pacer.maybe_yield(&now), YieldPacer::Did::kNotDue);
  now += 4000;
  EXPECT_EQ(pacer.maybe_yield(&now), YieldPacer::Did::kSkipped);
  // A hint from another peer tells nothing about this wait's: it yields.
  peers.note(8, here == 1 ? 2 : 1);
  now += 4000;
  const YieldPacer::Did d = pacer.maybe_yield(&now);
  EXPECT_TRUE(d == YieldPacer::Did::kAlone || d == YieldPacer::Did::kHanded);
}

std::atomic<int> g_move_calls{0};
bool count_move() {
  g_move_calls.fetch_add(1);
  return true;
}

// Two threads that hand a turn back and forth, waiting as an engine's waiter
// does (spin with the pacer, sleep after the budget), both pinned to one CPU.
// Each tells the other where it runs, as a shared-memory record does. Their
// yields hand the core to each other, so the pacer asks to move the thread
// off that CPU; with `hinted` false (a tcp peer: nothing tells where it runs)
// or `may_move` false (engine.move_spinners 0) it never does. (The mover is a counter here: pinned,
// the threads stay.)
int run_players(bool hinted, bool may_move = true) {
  const std::vector<int> cpus = allowed_cpus();
  if (cpus.empty()) return -1;
  YieldPacer::set_mover(count_move);
  g_move_calls.store(0);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> turn{0};  // even: player 0 holds it, odd: player 1
  std::atomic<uint32_t> word{0};  // moves with turn: what a sleeping player waits on
  std::atomic<uint64_t> hops{0};
  PeerCpu seen_by[2];  // seen_by[me]: where the other player ran
  constexpr uint64_t kSpinNs = 50000;
  auto player = [&](int me) {
    if (!set_mask(cpus_of({cpus[0]}))) return;
    for (uint64_t k = me; !stop.load(std::memory_order_relaxed); k += 2) {
      YieldPacer pacer(4000, hinted ? &seen_by[me] : nullptr, 1 + (1 - me), may_move);
      const uint64_t spin_until = now_ns() + kSpinNs;
      pacer.start(now_ns());
      for (uint32_t i = 1;; ++i) {
        const uint32_t w = word.load(std::memory_order_acquire);
        if (turn.load(std::memory_order_acquire) == k || stop.load(std::memory_order_relaxed)) {
          break;
        }
        cpu_relax();
        if (i % 8 != 0) continue;
        uint64_t now = now_ns();
        if (now >= spin_until) {
          futex_wait(&word, w, 1000000);
          continue;
        }
        pacer.maybe_yield(&now);
      }
      seen_by[1 - me].note(1 + me, this_cpu_hint());
      hops.fetch_add(1, std::memory_order_relaxed);
      turn.store(k + 1, std::memory_order_release);
      word.fetch_add(1, std::memory_order_release);
      futex_wake_all(&word);
    }
  };
  std::thread p0(player, 0), p1(player, 1);
  // Hinted: until the pacer asks for a move (bounded, so a broken pacer
  // fails instead of hanging). Not hinted: a fixed number of hops.
  const uint64_t give_up = now_ns() + 20'000'000'000ull;
  const bool until_moved = hinted && may_move;
  while (now_ns() < give_up &&
         (until_moved ? g_move_calls.load() == 0 : hops.load() < 20 * YieldPacer::kMoveAfter)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  stop.store(true);
  word.fetch_add(1);
  futex_wake_all(&word);
  p0.join();
  p1.join();
  YieldPacer::set_mover(nullptr);
  return g_move_calls.load();
}

TEST(YieldPacer, HandOffsToAPeerOnThisCpuMoveTheThread) {
  EXPECT_GE(run_players(true), 1) << "no move asked for";
}

TEST(YieldPacer, NoMoveWithoutAHint) { EXPECT_EQ(run_players(false), 0); }

TEST(YieldPacer, NoMoveWhenTheEngineSaysSo) { EXPECT_EQ(run_players(true, false), 0); }

}  // namespace
}  // namespace lt::proto
