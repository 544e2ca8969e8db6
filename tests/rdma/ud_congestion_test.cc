// ud's congestion window on a real device: three senders stream into one
// receiver that has only 16 receive buffers, so a full flow window from
// each (128 datagrams) overruns it and the device drops what finds no
// buffer. Every message must arrive whole and in order; with the window
// adaptive (verbs.ud_congestion: 1, losses and marks; 2, marks only) the
// receiver must have marked acknowledgements and the senders cut their
// windows for them, and with it fixed (0) nobody may have. A single
// sender through random loss into a receiver that keeps up gets no marks.
// bench/ud_incast measures the difference.
#include "transport_harness.h"

namespace lt::transport::test {
namespace {

constexpr int kSenders = 3;
constexpr int kMessages = 48;        // per sender
constexpr size_t kMsgBytes = 16384;  // 17 datagrams at rxe's MTU of 1024

Config incast_config() {
  Config c;
  c.verbs.max_msg_bytes = kTestMaxMsg;
  c.verbs.ud_recv_buffers = 16;
  c.verbs.ud_peer_timeout_ms = 5000;
  return c;
}
Result<std::unique_ptr<Transport>> make_ud_mode(uint32_t mode) {
  Config c = incast_config();
  c.verbs.ud_congestion = mode;
  return make_ud_transport(c);
}
Result<std::unique_ptr<Transport>> make_ud_fixed() { return make_ud_mode(0); }
Result<std::unique_ptr<Transport>> make_ud_adaptive() { return make_ud_mode(1); }
Result<std::unique_ptr<Transport>> make_ud_marks() { return make_ud_mode(2); }

Factory factory_for(uint32_t mode) {
  return mode == 0 ? &make_ud_fixed : mode == 1 ? &make_ud_adaptive : &make_ud_marks;
}

class UdIncast : public TransportHarness, public ::testing::WithParamInterface<uint32_t> {
 protected:
  UdIncast() : TransportHarness(factory_for(GetParam()), &ud_peer) {}

  // Streams kMessages from each sender to the receiver (node 1), pumping
  // every transport from this thread, and checks each message's bytes and
  // its place in its sender's order. Returns the senders' stats, summed.
  TransportStats run_incast() {
    Side* rx = add_side(1);
    EXPECT_NE(rx, nullptr);
    std::vector<Side*> tx;
    std::vector<std::unique_ptr<Endpoint>> eps;
    for (int i = 0; i < kSenders; ++i) {
      tx.push_back(add_side(static_cast<NodeId>(2 + i)));
      eps.push_back(connect(tx.back(), rx));
      if (eps.back() == nullptr) return {};
    }
    std::vector<int> next(kSenders, 0);
    std::vector<std::string> bad;
    int got = 0;
    rx->on_rx = [&](const Completion& c) {
      const int s = static_cast<int>(c.peer) - 2;
      if (s < 0 || s >= kSenders) {
        bad.push_back("a message from node " + std::to_string(c.peer));
        return;
      }
      const uint64_t seed = static_cast<uint64_t>(s) * 1000 + next[s];
      if (c.len != kMsgBytes || check_pattern(c.rx, c.len, seed) != SIZE_MAX) {
        bad.push_back("sender " + std::to_string(s) + " message " + std::to_string(next[s]) +
                      " differs");
      }
      ++next[s];
      ++got;
    };
    std::vector<std::vector<std::byte>> msgs;
    for (int s = 0; s < kSenders; ++s) {
      for (int m = 0; m < kMessages; ++m) msgs.push_back(pattern(kMsgBytes, s * 1000 + m));
    }
    // Round robin over the senders, a few messages each per turn, so the
    // three flows overlap at the receiver.
    for (int m = 0; m < kMessages; m += 4) {
      for (int s = 0; s < kSenders; ++s) {
        std::vector<WorkRequest> wrs;
        for (int k = m; k < m + 4 && k < kMessages; ++k) {
          wrs.push_back(send_wr(0, msgs[s * kMessages + k].data(), kMsgBytes));
        }
        EXPECT_TRUE(post_all(eps[s].get(), wrs).is_ok()) << "sender " << s << " at " << m;
      }
      pump_once();
    }
    EXPECT_TRUE(
        pump_until([&] { return got >= kSenders * kMessages; }, Deadline::after_ms(6 * kWaitMs)))
        << "received " << got << " of " << kSenders * kMessages;
    for (int i = 0; i < 20; ++i) pump_once();  // nothing more may come
    EXPECT_EQ(got, kSenders * kMessages);
    for (size_t k = 0; k < bad.size() && k < 10; ++k) ADD_FAILURE() << bad[k];
    EXPECT_TRUE(bad.empty()) << bad.size() << " bad";
    EXPECT_TRUE(rx->lost.empty());
    marks_sent_ = rx->t->stats().marks_sent;
    TransportStats sum;
    for (Side* s : tx) {
      EXPECT_TRUE(s->lost.empty()) << "sender " << s->node << " lost the receiver";
      const TransportStats st = s->t->stats();
      sum.retransmits += st.retransmits;
      sum.window_cuts += st.window_cuts;
      sum.mark_cuts += st.mark_cuts;
    }
    rx->on_rx = nullptr;
    return sum;
  }

  uint64_t marks_sent_ = 0;  // the receiver's marked acknowledgements
};

TEST_P(UdIncast, EveryMessageArrivesAndTheWindowFollowsTheOverrun) {
  const TransportStats st = run_incast();
  const uint64_t datagrams = uint64_t{kSenders} * kMessages * 17;
  std::printf(
      "ud window, verbs.ud_congestion %u: %llu datagrams sent again for %llu, %llu window cuts "
      "(%llu for marks), %llu acknowledgements marked\n",
      GetParam(), static_cast<unsigned long long>(st.retransmits),
      static_cast<unsigned long long>(datagrams), static_cast<unsigned long long>(st.window_cuts),
      static_cast<unsigned long long>(st.mark_cuts), static_cast<unsigned long long>(marks_sent_));
  // The first flights overrun the receiver whatever the window: the
  // senders resend what the device dropped.
  EXPECT_GT(st.retransmits, 0u);
  if (GetParam() != 0) {
    EXPECT_GT(marks_sent_, 0u);
    EXPECT_GT(st.mark_cuts, 0u);
    EXPECT_GE(st.window_cuts, st.mark_cuts);
  } else {
    EXPECT_EQ(marks_sent_, 0u);
    EXPECT_EQ(st.window_cuts, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Window, UdIncast, ::testing::Values(1u, 2u, 0u),
                         [](const ::testing::TestParamInfo<uint32_t>& i) {
                           return std::string(i.param == 0   ? "fixed"
                                              : i.param == 1 ? "adaptive"
                                                             : "marks");
                         });

// One sender through 10% random loss (verbs.ud_loss_percent drops datagrams
// and acknowledgements alike) into a receiver with the default buffers:
// holes are resent, the receiver never runs low, so nothing is marked and
// (verbs.ud_congestion: 2) neither a loss nor a timeout cuts the window.
Result<std::unique_ptr<Transport>> make_ud_lossy_marks() {
  Config c;
  c.verbs.max_msg_bytes = kTestMaxMsg;
  c.verbs.ud_peer_timeout_ms = 5000;
  c.verbs.ud_loss_percent = 10;
  c.verbs.ud_congestion = 2;
  return make_ud_transport(c);
}

class UdRandomLoss : public TransportHarness {
 protected:
  UdRandomLoss() : TransportHarness(&make_ud_lossy_marks, &ud_peer) {}
};

TEST_F(UdRandomLoss, IsResentButNotMarked) {
  constexpr int kCount = 32;
  Side* rx = add_side(1);
  Side* tx = add_side(2);
  ASSERT_NE(rx, nullptr);
  ASSERT_NE(tx, nullptr);
  auto ep = connect(tx, rx);
  ASSERT_NE(ep, nullptr);
  int got = 0, bad = 0;
  rx->on_rx = [&](const Completion& c) {
    bad += c.len != kMsgBytes || check_pattern(c.rx, c.len, static_cast<uint64_t>(got)) != SIZE_MAX;
    ++got;
  };
  std::vector<std::vector<std::byte>> msgs;
  for (int m = 0; m < kCount; ++m) msgs.push_back(pattern(kMsgBytes, static_cast<uint64_t>(m)));
  for (int m = 0; m < kCount; m += 8) {
    std::vector<WorkRequest> wrs;
    for (int k = m; k < m + 8; ++k) wrs.push_back(send_wr(0, msgs[k].data(), kMsgBytes));
    ASSERT_TRUE(post_all(ep.get(), wrs).is_ok()) << "at " << m;
    pump_once();
  }
  ASSERT_TRUE(pump_until([&] { return got >= kCount; }, Deadline::after_ms(6 * kWaitMs)))
      << "received " << got << " of " << kCount;
  EXPECT_EQ(bad, 0);
  const TransportStats st = tx->t->stats();
  std::printf("ud, 10%% loss, marks only: %llu datagrams sent again, %llu window cuts\n",
              static_cast<unsigned long long>(st.retransmits),
              static_cast<unsigned long long>(st.window_cuts));
  EXPECT_GT(st.retransmits, 0u);
  EXPECT_EQ(st.window_cuts, 0u);
  EXPECT_EQ(rx->t->stats().marks_sent, 0u);
  rx->on_rx = nullptr;
}

}  // namespace
}  // namespace lt::transport::test
