// A tcp connection in the middle of a large frame: its poller stops trying
// recv() on each connection and asks epoll instead (Conn::mid_frame), so
// the rest of the frame must still be read as its segments come, by a
// poller that sleeps on wait_fd between polls, and the other connections
// must be served meanwhile.
#include "transport/tcp/tcp_transport.h"
#include "transport_harness.h"

namespace lt::transport::test {
namespace {

constexpr size_t kBig = 3u << 20;  // many polls' worth through 64 KiB sockets

class TcpMidFrameTest : public TransportHarness {
 protected:
  TcpMidFrameTest() : TransportHarness(&make_tcp_small_sockets) {}
  void SetUp() override { set_up_pair(); }
};

// Send a 3 MiB message, then a small one, from node 1, while node 3 sends
// small ones / Expect node 3's messages delivered while the large one is
// still arriving, and both of node 1's whole and in order.
TEST_F(TcpMidFrameTest, OthersAreServedWhileALargeFrameArrives) {
  Side* c = add_side(3);
  ASSERT_NE(c, nullptr);
  auto cb = connect(c, b_);
  ASSERT_NE(cb, nullptr);
  auto x = pattern(100, 5), big = pattern(kBig, 6), tail = pattern(300, 7);
  ASSERT_TRUE(post_one(cb.get(), send_wr(0, x.data(), x.size())).is_ok());
  ASSERT_TRUE(pump_until([&] { return b_->rx.size() == 1; }));  // node 3 is known
  b_->rx.clear();
  WorkRequest wrs[2] = {send_wr(1, big.data(), big.size()), send_wr(2, tail.data(), tail.size())};
  ASSERT_TRUE(post_all(ab_.get(), wrs).is_ok());  // the socket takes a part; the rest is queued
  // Node 2 polls (node 1 does not yet: the rest of the large frame waits in
  // its queue), so node 2 sits in the middle of the frame.
  pump_side(b_);
  pump_side(b_);
  ASSERT_TRUE(b_->rx.empty()) << "the large frame arrived whole before node 1 sent its rest";
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(post_one(cb.get(), send_wr(0, x.data(), x.size())).is_ok());
    Deadline d = Deadline::after_ms(kWaitMs);
    size_t want = static_cast<size_t>(i) + 1;
    while (b_->rx.size() < want && !d.expired()) {
      if (pump_side(b_) == 0) wait_any(d);
    }
    ASSERT_EQ(b_->rx.size(), want) << "node 3 waited for node 1's frame";
    EXPECT_EQ(b_->rx.back().peer, 3u);
  }
  b_->rx.clear();
  ASSERT_TRUE(pump_until([&] { return b_->rx.size() == 2; }));
  EXPECT_EQ(b_->rx[0].peer, 1u);
  EXPECT_EQ(b_->rx[0].data, big);
  EXPECT_EQ(b_->rx[1].data, tail);
  EXPECT_TRUE(b_->lost.empty());
}

// Send 3 MiB messages back to back while both sides sleep on wait_fd
// whenever their polls return nothing, as the engine does / Expect every
// message whole, and no 2 s sleep running out: the middle of a frame never
// waits for a readiness edge that does not come.
TEST_F(TcpMidFrameTest, LargeFramesNeedNoSpinning) {
  auto big = pattern(kBig, 8);
  constexpr int kCount = 4;
  std::vector<pollfd> fds = {{a_->t->wait_fd(), POLLIN, 0}, {b_->t->wait_fd(), POLLIN, 0}};
  int posted = 0, timeouts = 0;
  Deadline d = Deadline::after_ms(kWaitMs);
  while (b_->rx.size() < kCount && !d.expired()) {
    if (posted < kCount) {
      auto r = ab_->post(std::span<const WorkRequest>(
          std::array<WorkRequest, 1>{send_wr(1, big.data(), big.size())}));
      ASSERT_TRUE(r.is_ok()) << r.status().name();
      posted += static_cast<int>(*r);
    }
    if (pump_side(a_) + pump_side(b_) > 0) continue;
    a_->t->prepare_sleep();
    b_->t->prepare_sleep();
    if (::poll(fds.data(), fds.size(), 2000) == 0) ++timeouts;
  }
  ASSERT_EQ(b_->rx.size(), static_cast<size_t>(kCount));
  for (const Received& r : b_->rx) EXPECT_EQ(r.data, big);
  EXPECT_EQ(timeouts, 0) << "a 2 s sleep on wait_fd ran out";
}

}  // namespace
}  // namespace lt::transport::test
