// The host board: engines see each other's classes, a quiet or crashed
// engine stops counting within kFreshNs, and a dead process's slots are
// taken back. Two Schedulers in one process stand for two processes; fork()
// makes a process that really dies.
#include "qos/host_board.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "qos/scheduler.h"
#include "sim_clock.h"

namespace lt::qos {
namespace {

// A board name of this test alone, removed after it.
class BoardName {
 public:
  BoardName() : name_("ltier-qos-test-" + std::to_string(getpid()) + "-" + std::to_string(n_++)) {}
  ~BoardName() { shm_unlink(("/" + name_).c_str()); }
  const std::string& str() const { return name_; }

 private:
  static inline int n_ = 0;
  std::string name_;
};

TEST(HostBoard, EnginesSeeEachOthersFreshSlotsOnly) {
  BoardName n;
  HostBoard a, b;
  ASSERT_TRUE(a.open(n.str(), 2).is_ok());
  ASSERT_TRUE(b.open(n.str(), 1).is_ok());
  const uint64_t t = 5'000'000'000;
  CongestedPeers at_two, at_host;
  at_two.add(7);
  at_two.add(9);
  at_host.add(0);  // a completion without a peer: the host's
  a.publish(0, 0, true, at_two, t);
  a.publish(1, 1, false, at_host, t);
  std::vector<BoardEntry> seen;
  b.scan(t + 100, &seen);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].priority, 0u);
  EXPECT_TRUE(seen[0].active);
  EXPECT_EQ(seen[0].congested.n, 2u);
  EXPECT_TRUE(seen[0].congested.has(7));
  EXPECT_TRUE(seen[0].congested.has(9));
  EXPECT_FALSE(seen[0].congested.host);
  EXPECT_FALSE(seen[1].active);
  EXPECT_TRUE(seen[1].congested.host);
  EXPECT_EQ(seen[1].congested.n, 0u);
  a.publish(0, 0, true, CongestedPeers{}, t);
  b.scan(t + 100, &seen);
  EXPECT_FALSE(seen[0].congested.any());
  a.scan(t + 100, &seen);
  EXPECT_TRUE(seen.empty());  // b never published: not counted
  b.scan(t + HostBoard::kFreshNs + 1, &seen);
  EXPECT_TRUE(seen.empty());  // a went quiet (or crashed): forgotten
  a.close();
  b.scan(t + 100, &seen);
  EXPECT_TRUE(seen.empty());  // closed: its slots are free
}

TEST(HostBoard, ADeadProcessesSlotsAreTakenBack) {
  BoardName n;
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    HostBoard mine;
    // Takes every slot, then dies without giving them back.
    _exit(mine.open(n.str(), HostBoard::kSlots).is_ok() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  HostBoard b;
  EXPECT_TRUE(b.open(n.str(), HostBoard::kSlots).is_ok());
  HostBoard c;
  EXPECT_EQ(c.open(n.str(), 1).code(), Code::kNoResource);  // b, alive, holds them all
}

using sim::sim_now;
using sim::sim_sleep;

QosConfig two_classes(const std::string& board) {
  QosConfig q;
  q.board = board;
  QosClass hi, lo;
  hi.name = "latency";
  hi.priority = 0;
  hi.target_rtt_ns = 100'000;
  lo.name = "bulk";
  lo.priority = 1;
  q.policy.classes = {hi, lo};
  return q;
}

// Two engines on one board and the simulated clock: a runs the latency
// class, b the bulk class.
class TwoEngines : public ::testing::Test {
 protected:
  void SetUp() override {
    QosConfig qa = two_classes(n_.str()), qb = two_classes(n_.str());
    qa.default_class = "latency";
    qb.default_class = "bulk";
    a_ = std::make_unique<Scheduler>(qa, Clock{&sim_now, &sim_sleep});
    b_ = std::make_unique<Scheduler>(qb, Clock{&sim_now, &sim_sleep});
    std::string error;
    ASSERT_TRUE(a_->start(&error).is_ok()) << error;
    ASSERT_TRUE(b_->start(&error).is_ok()) << error;
  }
  BoardName n_;
  std::unique_ptr<Scheduler> a_, b_;
};

// A latency class in one engine above its target throttles the bulk class
// of another engine on the host; when the first engine stops (it crashed
// mid-call: nothing is ever completed or retired), the second runs free
// within a millisecond.
TEST_F(TwoEngines, ThrottlingCrossesEnginesAndEndsWhenOneCrashes) {
  Scheduler& a = *a_;
  Scheduler& b = *b_;
  constexpr uint64_t kT = RateControl::kIntervalNs;
  auto bulk = [&] {
    Ticket t;
    ASSERT_TRUE(b.admit(1 << 20, Deadline::never(), &t).is_ok());
    sim_sleep(kT / 2);
    b.complete(t);
    b.retire(t);
  };
  for (int i = 0; i < 20; ++i) bulk();  // alone: its solo rate
  EXPECT_EQ(b.class_stats()[1].rate, RateControl::kUnlimited);
  // Engine a: latency calls of 2 ms, one always in flight; a ticks when it
  // starts and ends calls.
  Ticket lat;
  ASSERT_TRUE(a.admit(8, Deadline::never(), &lat).is_ok());
  for (int i = 0; i < 8; ++i) {
    for (int k = 0; k < 20; ++k) {
      bulk();
      a.tick(sim_now());  // what a's own calls would do every interval
    }
    a.complete(lat);
    a.retire(lat);
    ASSERT_TRUE(a.admit(8, Deadline::never(), &lat).is_ok());
  }
  auto cs = b.class_stats();
  EXPECT_NE(cs[1].rate, RateControl::kUnlimited) << "bulk in b not throttled by a";
  EXPECT_GE(cs[1].delayed, 1u);
  // a crashes with `lat` in flight: it never ticks again.
  sim_sleep(2'000'000);
  bulk();
  bulk();
  EXPECT_EQ(b.class_stats()[1].rate, RateControl::kUnlimited);
}

// The same across engines, per peer: a latency class in engine a above its
// target at node 2 cuts engine b's bulk writes to node 2 only; its writes
// to node 3 never wait.
TEST_F(TwoEngines, ACongestedPeerCrossesEnginesByName) {
  Scheduler& a = *a_;
  Scheduler& b = *b_;
  constexpr uint64_t kT = RateControl::kIntervalNs;
  constexpr transport::NodeId kNear = 2, kOther = 3;
  uint64_t waited[2] = {0, 0};
  auto bulk = [&](transport::NodeId peer) {
    Ticket t;
    t.peer = peer;
    const uint64_t before = sim_now();
    ASSERT_TRUE(b.admit(1 << 20, Deadline::never(), &t).is_ok());
    waited[peer == kNear ? 0 : 1] += sim_now() - before;
    sim_sleep(kT / 2);
    b.complete(t);
    b.retire(t);
    a.tick(sim_now());  // what a's own calls would do every interval
  };
  for (int i = 0; i < 20; ++i) {  // alone: the lanes' solo rates
    bulk(kNear);
    bulk(kOther);
  }
  auto latency = [&](uint64_t takes_ns) {
    Ticket lat;
    lat.peer = kNear;
    ASSERT_TRUE(a.admit(8, Deadline::never(), &lat).is_ok());
    const uint64_t end = sim_now() + takes_ns;
    while (sim_now() < end) {
      bulk(kNear);
      bulk(kOther);
    }
    a.complete(lat);
    a.retire(lat);
  };
  latency(2'000'000);  // above target at node 2, once
  bool seen = false;
  for (int i = 0; i < 100; ++i) {
    latency(20'000);
    const auto cs = b.class_stats();
    if (cs[1].throttled_peers == 0) continue;
    seen = true;
    ASSERT_EQ(cs[1].peer_rates.size(), 1u);
    EXPECT_EQ(cs[1].peer_rates[0].first, kNear);
  }
  EXPECT_TRUE(seen) << "bulk's lane to node 2 in b was not throttled by a";
  EXPECT_GT(waited[0], 0u);
  EXPECT_EQ(waited[1], 0u) << "a write to node 3 waited";
}

}  // namespace
}  // namespace lt::qos
