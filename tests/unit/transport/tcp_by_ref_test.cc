// tcp posts by reference (kWrByRef, Caps::send_by_ref): what the socket
// cannot take at once is sent later from the poster's memory, and the
// post's kSendDone comes only when its last byte left, or when the
// connection broke.
#include "transport/tcp/tcp_transport.h"
#include "transport_harness.h"

namespace lt::transport::test {
namespace {

constexpr size_t kBig = 2u << 20;  // far more than both 64 KiB sockets hold
constexpr size_t kTail = 64u << 10;

class TcpByRefTest : public TransportHarness {
 protected:
  TcpByRefTest() : TransportHarness(&make_tcp_small_sockets) {}
  void SetUp() override {
    set_up_pair();
    ASSERT_TRUE(a_->t->caps().send_by_ref);
    src_ = pattern(kBig, 7);
    target_ = register_target(b_, kBig);
  }
  // A kWrite of src_ into the target, by reference, then a kSend marker,
  // in one post as proto's placement posts them.
  Status post_write(uint64_t wr_id) {
    WorkRequest wrs[2];
    wrs[0] = write_wr(*target_, wr_id, src_.data(), kBig, target_->at);
    wrs[0].flags = kWrSignaled | kWrByRef | kWrMustQueue;
    wrs[1] = send_wr(wr_id + 1, marker_.data(), marker_.size());
    wrs[1].flags = kWrMustQueue;
    return post_all(ab_.get(), wrs);
  }
  // Polls only the sender for a while: its socket stays full.
  void pump_sender_only() {
    for (int i = 0; i < 200; ++i) pump_side(a_);
  }
  std::vector<std::byte> src_;
  std::vector<std::byte> marker_ = pattern(32, 99);
  Target* target_ = nullptr;
};

// The write is reported only once it is all sent, its queued part is sent
// from the poster's memory (bytes changed after the post arrive changed),
// and the marker posted with it arrives after the written bytes.
TEST_F(TcpByRefTest, QueuedWriteIsSentFromThePostersMemoryAndReportedWhenSent) {
  ASSERT_TRUE(post_write(1).is_ok());
  pump_sender_only();
  EXPECT_FALSE(has_done(1)) << "reported while most of the write was still queued";
  // Not copied: the last kTail bytes, surely still queued, are sent from
  // here, so what we write now is what arrives.
  fill_pattern(src_.data() + kBig - kTail, kTail, 8);
  bool marker = false, placed_first = false;
  b_->on_rx = [&](const Completion& c) {
    marker = c.len == marker_.size() && std::memcmp(c.rx, marker_.data(), c.len) == 0;
    placed_first = check_pattern(target_->at + kBig - kTail, kTail, 8) == SIZE_MAX;
  };
  ASSERT_TRUE(pump_until([&] { return marker && has_done(1); }))
      << "marker " << marker << ", reported " << has_done(1);
  EXPECT_TRUE(placed_first) << "the marker came before the written bytes";
  EXPECT_EQ(check_pattern(target_->at, kBig - kTail, 7), SIZE_MAX);
  EXPECT_EQ(check_pattern(target_->at + kBig - kTail, kTail, 8), SIZE_MAX);
  EXPECT_EQ(check_guards(*target_), SIZE_MAX);
  EXPECT_FALSE(has_done(2)) << "an unsignaled request was reported";
}

// Behind frames another post left queued, a post by reference queues too
// (no copy), and everything arrives in order.
TEST_F(TcpByRefTest, WriteQueuedBehindAnotherPostArrivesInOrder) {
  std::vector<std::byte> first = pattern(kBig / 2, 3);
  ASSERT_TRUE(post_one(ab_.get(), send_wr(10, first.data(), first.size())).is_ok());
  ASSERT_TRUE(post_write(1).is_ok());
  pump_sender_only();
  EXPECT_FALSE(has_done(1));
  int got = 0;
  bool in_order = true;
  b_->on_rx = [&](const Completion& c) {
    if (got == 0) in_order = c.len == first.size() && check_pattern(c.rx, c.len, 3) == SIZE_MAX;
    if (got == 1) {
      in_order =
          in_order && c.len == marker_.size() && check_pattern(target_->at, kBig, 7) == SIZE_MAX;
    }
    ++got;
  };
  ASSERT_TRUE(pump_until([&] { return got == 2 && has_done(1); }));
  EXPECT_TRUE(in_order);
}

// A small write by reference that the socket takes at once is reported
// as any signaled post is.
TEST_F(TcpByRefTest, WriteTheSocketTakesIsReportedAtOnce) {
  WorkRequest wr = write_wr(*target_, 5, src_.data(), 8192, target_->at);
  wr.flags = kWrSignaled | kWrByRef;
  ASSERT_TRUE(post_one(ab_.get(), wr).is_ok());
  pump_sender_only();
  EXPECT_TRUE(has_done(5));
  ASSERT_TRUE(pump_until([&] { return check_pattern(target_->at, 8192, 7) == SIZE_MAX; }));
}

// The receiver goes away while the write is queued: the sender hears of the
// lost peer and the write is reported (failed) too, so nobody waits for it.
TEST_F(TcpByRefTest, QueuedWriteIsReportedWhenTheConnectionBreaks) {
  ASSERT_TRUE(post_write(1).is_ok());
  pump_sender_only();
  ASSERT_FALSE(has_done(1));
  deregister(target_);
  b_->t.reset();
  ASSERT_TRUE(pump_until([&] { return has(a_->lost, b_->node) && has_done(1); }))
      << "lost " << has(a_->lost, b_->node) << ", reported " << has_done(1);
}

}  // namespace
}  // namespace lt::transport::test
