// ud's congestion window on a real device: three senders stream into one
// receiver that has only 16 receive buffers, so a full flow window from
// each (128 datagrams) overruns it and the device drops what finds no
// buffer. Every message must arrive whole and in order; with the window
// adaptive (verbs.ud_congestion: 1) the senders must have cut it, and with
// it fixed (0) they must not have. bench/ud_incast measures the difference.
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
Result<std::unique_ptr<Transport>> make_ud_adaptive() { return make_ud_transport(incast_config()); }
Result<std::unique_ptr<Transport>> make_ud_fixed() {
  Config c = incast_config();
  c.verbs.ud_congestion = 0;
  return make_ud_transport(c);
}

class UdIncast : public TransportHarness, public ::testing::WithParamInterface<bool> {
 protected:
  UdIncast() : TransportHarness(GetParam() ? &make_ud_adaptive : &make_ud_fixed, &ud_peer) {}

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
    TransportStats sum;
    for (Side* s : tx) {
      EXPECT_TRUE(s->lost.empty()) << "sender " << s->node << " lost the receiver";
      const TransportStats st = s->t->stats();
      sum.retransmits += st.retransmits;
      sum.window_cuts += st.window_cuts;
    }
    rx->on_rx = nullptr;
    return sum;
  }
};

TEST_P(UdIncast, EveryMessageArrivesAndTheWindowFollowsTheLoss) {
  const TransportStats st = run_incast();
  const uint64_t datagrams = uint64_t{kSenders} * kMessages * 17;
  std::printf("ud %s window: %llu datagrams sent again for %llu, %llu window cuts\n",
              GetParam() ? "adaptive" : "fixed", static_cast<unsigned long long>(st.retransmits),
              static_cast<unsigned long long>(datagrams),
              static_cast<unsigned long long>(st.window_cuts));
  // The overrun drops datagrams either way: the senders resend them.
  EXPECT_GT(st.retransmits, 0u);
  if (GetParam()) {
    EXPECT_GT(st.window_cuts, 0u);
  } else {
    EXPECT_EQ(st.window_cuts, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Window, UdIncast, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? std::string("adaptive") : std::string("fixed");
                         });

}  // namespace
}  // namespace lt::transport::test
