// ud's QP in error, on a real device: verbs.ud_fault_after moves each
// side's UD QP to the error state at its Nth post, in the middle of a
// two-way stream of messages of one to nine datagrams. Each side must find
// its QP in error, reset it once and send again what went with it: every
// message arrives whole and in order, and neither side loses the other.
// Run again with verbs.ud_fault_stuck: sends the device holds and never
// completes (as Soft-RoCE on Linux 6.1 can leave them) must not keep the
// QP out of service until the peer is declared lost, nor keep their send
// slots.
#include "transport_harness.h"

namespace lt::transport::test {
namespace {

constexpr int kMessages = 300;  // each way
constexpr uint32_t kFaultAfter = 40;

constexpr uint32_t kStuck = 3;

Result<std::unique_ptr<Transport>> make_ud_faulty(uint32_t stuck) {
  Config c;
  c.verbs.max_msg_bytes = kTestMaxMsg;
  c.verbs.ud_peer_timeout_ms = 5000;
  c.verbs.ud_fault_after = kFaultAfter;
  c.verbs.ud_fault_stuck = stuck;
  return make_ud_transport(c);
}

size_t msg_bytes(int i) { return 1 + static_cast<size_t>(i % 9) * 1000; }  // 1 B to 8 KiB

class UdRecoveryTest : public TransportHarness {
 protected:
  explicit UdRecoveryTest(Factory make) : TransportHarness(make, &ud_peer) {}
  void two_way_stream_survives_the_error();
};

class UdRecovery : public UdRecoveryTest {
 protected:
  UdRecovery() : UdRecoveryTest([] { return make_ud_faulty(0); }) {}
};

class UdRecoveryStuck : public UdRecoveryTest {
 protected:
  UdRecoveryStuck() : UdRecoveryTest([] { return make_ud_faulty(kStuck); }) {}
};

void UdRecoveryTest::two_way_stream_survives_the_error() {
  Side* a = add_side(1);
  Side* b = add_side(2);
  ASSERT_TRUE(a && b);
  auto ab = connect(a, b);
  auto ba = connect(b, a);
  ASSERT_TRUE(ab && ba);
  Side* sides[2] = {a, b};
  int next[2] = {0, 0};  // messages each side took, in order
  std::vector<std::string> bad;
  for (int s = 0; s < 2; ++s) {
    sides[s]->on_rx = [&, s](const Completion& c) {
      const int i = next[s]++;
      const uint64_t seed = static_cast<uint64_t>(1 - s) * 100000 + static_cast<uint64_t>(i);
      if (c.len != msg_bytes(i) || check_pattern(c.rx, c.len, seed) != SIZE_MAX) {
        bad.push_back("side " + std::to_string(s) + " message " + std::to_string(i) + " differs");
      }
    };
  }
  std::vector<std::vector<std::byte>> msgs[2];
  for (int s = 0; s < 2; ++s) {
    for (int i = 0; i < kMessages; ++i) {
      msgs[s].push_back(pattern(msg_bytes(i), static_cast<uint64_t>(s) * 100000 + i));
    }
  }
  Endpoint* eps[2] = {ab.get(), ba.get()};
  for (int i = 0; i < kMessages; i += 5) {
    for (int s = 0; s < 2; ++s) {
      std::vector<WorkRequest> wrs;
      for (int k = i; k < i + 5; ++k) wrs.push_back(send_wr(0, msgs[s][k].data(), msg_bytes(k)));
      ASSERT_TRUE(post_all(eps[s], wrs).is_ok()) << "side " << s << " at " << i;
    }
    pump_once();
  }
  EXPECT_TRUE(pump_until([&] { return next[0] >= kMessages && next[1] >= kMessages; },
                         Deadline::after_ms(3 * kWaitMs)))
      << "received " << next[0] << " and " << next[1] << " of " << kMessages;
  for (int i = 0; i < 20; ++i) pump_once();  // nothing more may come
  EXPECT_EQ(next[0], kMessages);
  EXPECT_EQ(next[1], kMessages);
  for (size_t k = 0; k < bad.size() && k < 10; ++k) ADD_FAILURE() << bad[k];
  EXPECT_TRUE(bad.empty()) << bad.size() << " bad";
  // Every send slot comes back once the peers have acknowledged what they
  // hold: the posts that went with the error, and with verbs.ud_fault_stuck
  // the ones the device never completes, are not left holding theirs.
  auto slots_back = [&] {
    for (Side* s : sides) {
      const TransportStats st = s->t->stats();
      if (st.send_slots_free != st.send_slots) return false;
    }
    return true;
  };
  EXPECT_TRUE(pump_until(slots_back, Deadline::after_ms(kWaitMs)));
  for (Side* s : sides) {
    const TransportStats st = s->t->stats();
    EXPECT_GT(st.send_slots, 0u);
    EXPECT_EQ(st.send_slots_free, st.send_slots) << "node " << s->node << " holds slots";
    EXPECT_TRUE(s->lost.empty()) << "node " << s->node << " lost its peer";
    EXPECT_EQ(st.qp_resets, 1u) << "node " << s->node;
    EXPECT_GT(st.retransmits, 0u) << "node " << s->node << " sent nothing again";
    EXPECT_EQ(st.connections, 1u);
    s->on_rx = nullptr;
  }
}

TEST_F(UdRecovery, AQpInErrorIsResetAndNothingIsLost) { two_way_stream_survives_the_error(); }

TEST_F(UdRecoveryStuck, SendsTheDeviceNeverCompletesDoNotHoldTheResetBack) {
  two_way_stream_survives_the_error();
}

}  // namespace
}  // namespace lt::transport::test
