// Endpoint::post_express, on every transport of the host build: a message it
// takes arrives whole, never ahead of a message the same thread posted
// before it, and nothing is lost or doubled whichever path takes it. On shm
// it takes the connection's lane: past a full main ring, and waking a
// poller asleep on the transport. Elsewhere it is post_short.
#include <poll.h>

#include <string>
#include <thread>

#include "transport_harness.h"

namespace lt::transport::test {
namespace {

constexpr uint32_t kLaneRecords = 512;  // 64-byte records in shm's 32 KiB lane

class ExpressPost : public PairedPaths {
 protected:
  bool has_lane() const { return is_shm(); }
  // Runs `fn` on a thread of its own: a fresh thread has no messages of its
  // own in any connection's main ring, which the lane's order check tracks
  // per thread.
  static void on_fresh_thread(const std::function<void()>& fn) { std::thread(fn).join(); }
};

// Main-ring messages of a thread, then express ones of the same thread,
// with no poll in between: they arrive in the order posted.
TEST_P(ExpressPost, NeverOvertakesTheSameThreadsMessages) {
  std::vector<Msg> sent;
  on_fresh_thread([&] {
    for (uint64_t i = 0; i < 200; ++i) {
      sent.push_back(message(i, i % 90));
      const bool express = (i / 10) % 2 == 1;  // ten of one kind, then ten of the other
      if (express ? post_express(sent.back()) : post_short(sent.back())) continue;
      WorkRequest wr = send_wr(i, sent.back().whole.data(), sent.back().whole.size());
      ASSERT_TRUE(post_all(ab_.get(), std::span<const WorkRequest>(&wr, 1)).is_ok());
    }
  });
  ASSERT_TRUE(pump_until([&] { return b_->rx.size() >= sent.size(); })) << b_->rx.size();
  pump_once();
  ASSERT_EQ(b_->rx.size(), sent.size());
  for (size_t i = 0; i < sent.size(); ++i) EXPECT_EQ(b_->rx[i].data, sent[i].whole) << i;
}

// Express messages with nobody polling fill the lane, then the main ring:
// every one taken arrives once, in order, whatever path took it.
TEST_P(ExpressPost, AFullLaneFallsBackToTheMainRingLosingNothing) {
  if (!GetParam().small_queue) GTEST_SKIP() << GetParam().name << ": no small ring";
  std::vector<Msg> sent;
  on_fresh_thread([&] {
    for (uint64_t i = 0; i < 5000; ++i) {
      Msg m = message(i, 16);  // 24 + 32 bytes: a 64-byte record
      if (!post_express(m)) break;
      sent.push_back(std::move(m));
    }
  });
  ASSERT_GT(sent.size(), 0u);
  ASSERT_LT(sent.size(), 5000u) << "no back-pressure";
  if (has_lane()) {
    // 64-byte records: the lane alone holds 512; the small ring adds its own.
    EXPECT_GT(sent.size(), size_t{kLaneRecords});
  }
  ASSERT_TRUE(pump_until([&] { return b_->rx.size() >= sent.size(); })) << b_->rx.size();
  pump_once();
  ASSERT_EQ(b_->rx.size(), sent.size());
  for (size_t i = 0; i < sent.size(); ++i) EXPECT_EQ(b_->rx[i].data, sent[i].whole) << i;
}

// One thread fills the main ring; another thread's express message still
// goes, by the lane, and is delivered ahead of the queued ones.
TEST_P(ExpressPost, PassesAMainRingAnotherThreadFilled) {
  if (!GetParam().small_queue || !has_lane()) {
    GTEST_SKIP() << GetParam().name << ": no small ring with a lane";
  }
  size_t queued = 0;
  on_fresh_thread([&] {
    for (uint64_t i = 0; i < 10000; ++i) {
      if (!post_short(message(i, 200))) break;
      ++queued;
    }
  });
  ASSERT_GT(queued, 0u);
  ASSERT_LT(queued, 10000u) << "no back-pressure";
  const Msg urgent = message(99999, 8);
  bool taken = false;
  on_fresh_thread([&] {
    EXPECT_FALSE(post_short(urgent)) << "the main ring has room";
    taken = post_express(urgent);
  });
  ASSERT_TRUE(taken);
  ASSERT_TRUE(pump_until([&] { return b_->rx.size() >= queued + 1; })) << b_->rx.size();
  EXPECT_EQ(b_->rx.front().data, urgent.whole);
  for (size_t i = 1; i <= queued; ++i) EXPECT_EQ(b_->rx[i].data, message(i - 1, 200).whole) << i;
}

// A poller asleep on the transport (armed, blocked on wait_fd) wakes for a
// message that comes by the lane alone.
TEST_P(ExpressPost, WakesASleepingPoller) {
  if (!has_lane()) GTEST_SKIP() << GetParam().name << ": no lane (post_express is post_short)";
  const Msg warm = message(1, 8);
  on_fresh_thread([&] { ASSERT_TRUE(post_express(warm)); });
  ASSERT_TRUE(pump_until([&] { return b_->rx.size() == 1; }));
  int armed_rounds = 0;
  for (uint64_t i = 2; i < 40; ++i) {
    while (pump_side(b_) != 0) {
    }
    b_->t->prepare_sleep();
    pollfd p{b_->t->wait_fd(), POLLIN, 0};
    const bool armed = ::poll(&p, 1, 0) == 0;  // else it found work and stays awake
    armed_rounds += armed ? 1 : 0;
    const Msg m = message(i, 8);
    std::thread poster([&] { EXPECT_TRUE(post_express(m)); });
    if (armed) {
      EXPECT_EQ(::poll(&p, 1, kWaitMs), 1) << "no wake-up for express message " << i;
    }
    poster.join();
    b_->t->woken();
    const size_t before = b_->rx.size();
    ASSERT_TRUE(pump_until([&] { return b_->rx.size() > before; })) << i;
  }
  EXPECT_GT(armed_rounds, 0) << "the poller never went to sleep";
}

INSTANTIATE_TEST_SUITE_P(Transports, ExpressPost, ::testing::ValuesIn(paired_path_kinds()),
                         kind_name);

}  // namespace
}  // namespace lt::transport::test
