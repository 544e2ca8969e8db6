// Transport conformance suite (docs/STYLE.md section 6): every transport runs the
// same tests through the Transport interface, made by a factory function, and
// skips what its Caps rule out with GTEST_SKIP() << why. A new transport adds
// one TransportKind to the INSTANTIATE_TEST_SUITE_P list (after the TEST_Ps).
// Tests of one transport's own wire format live beside it (tcp_wire_test.cc).
#include "transport_harness.h"

namespace lt::transport::test {
namespace {

class TransportConformance : public TransportHarness,
                             public ::testing::WithParamInterface<TransportKind> {
 protected:
  TransportConformance() : TransportHarness(GetParam().make, GetParam().peer) {}

  // Two joined transports, 1 connected to 2.
  void SetUp() override { set_up_pair(); }

  void TearDown() override {
    for (auto& [side, mr] : regions_) {
      if (side->t) side->t->free_memory(mr);
    }
  }

  const Caps& caps() const { return a_->t->caps(); }

  void concurrent_posters(bool corked, bool large = false);

  // Node `node` at `address` is not there: connect fails with kPeerDown, or
  // (Caps::lazy_connect) a message posted to it ends in kPeerLost.
  void expect_unreachable(NodeId node, const std::string& address) {
    auto ep = a_->t->connect(peer_info(node, address), Deadline::after_ms(kWaitMs));
    if (!caps().lazy_connect || !ep.is_ok()) {
      ASSERT_FALSE(ep.is_ok());
      EXPECT_EQ(ep.status().code(), Code::kPeerDown);
      return;
    }
    auto msg = pattern(100, 17);
    const auto before = std::count(a_->lost.begin(), a_->lost.end(), node);
    auto r = (*ep)->post(std::vector<WorkRequest>{send_wr(1, msg.data(), msg.size())});
    if (!r.is_ok()) {
      EXPECT_EQ(r.status().code(), Code::kPeerDown);
      return;
    }
    EXPECT_TRUE(
        pump_until([&] { return std::count(a_->lost.begin(), a_->lost.end(), node) > before; },
                   Deadline::after_ms(2 * kWaitMs)))
        << "no kPeerLost for node " << node;
    EXPECT_FALSE((*ep)->alive());
  }

  // Memory of `owner` that peers reach with one-sided ops; freed at TearDown.
  MemRegion alloc_on(Side* owner, size_t len, Access a = kRemoteAll) {
    auto mr = owner->t->alloc_memory(len, a);
    EXPECT_TRUE(mr.is_ok()) << mr.status().name();
    if (!mr.is_ok()) return MemRegion{};
    EXPECT_GE(mr->len, len);
    regions_.emplace_back(owner, *mr);
    return *mr;
  }

  std::vector<std::pair<Side*, MemRegion>> regions_;
};

TEST_P(TransportConformance, CapsAreSane) {
  EXPECT_STRNE(a_->t->name(), "");
  EXPECT_TRUE(caps().reliable) << "the suite below assumes a reliable transport";
  EXPECT_GT(caps().max_msg, 0u);
  EXPECT_GT(caps().max_batch, 0u);
  EXPECT_FALSE(a_->t->local_address().empty());
  EXPECT_GE(a_->t->wait_fd(), 0);
  EXPECT_TRUE(ab_->alive());
}

TEST_P(TransportConformance, SendOneSge) {
  auto msg = pattern(1000, 1);
  ASSERT_TRUE(post_one(ab_.get(), send_wr(1, msg.data(), msg.size())).is_ok());
  ASSERT_TRUE(pump_until([&] { return !b_->rx.empty(); }));
  ASSERT_EQ(b_->rx.size(), 1u);
  EXPECT_EQ(b_->rx[0].peer, 1u);
  EXPECT_EQ(b_->rx[0].imm, 0u);
  EXPECT_EQ(b_->rx[0].data, msg);
}

TEST_P(TransportConformance, SendTwoSgesGathersInOrder) {
  auto msg = pattern(3000, 2);
  ASSERT_TRUE(post_one(ab_.get(), send_wr(1, msg.data(), msg.size(), 2)).is_ok());
  ASSERT_TRUE(pump_until([&] { return !b_->rx.empty(); }));
  EXPECT_EQ(b_->rx[0].peer, 1u);
  EXPECT_EQ(b_->rx[0].data, msg);
}

TEST_P(TransportConformance, EmptyMessages) {
  WorkRequest none;
  none.op = Op::kSend;  // no sge at all
  WorkRequest zero = send_wr(2, nullptr, 0);
  ASSERT_TRUE(post_one(ab_.get(), none).is_ok());
  ASSERT_TRUE(post_one(ab_.get(), zero).is_ok());
  ASSERT_TRUE(pump_until([&] { return b_->rx.size() == 2; }));
  EXPECT_TRUE(b_->rx[0].data.empty());
  EXPECT_TRUE(b_->rx[1].data.empty());
  EXPECT_EQ(b_->rx[1].peer, 1u);
}

TEST_P(TransportConformance, EmptyPostAcceptsNothing) {
  auto r = ab_->post({});
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(*r, 0u);
}

TEST_P(TransportConformance, ThousandMessagesKeepBytesAndOrder) {
  constexpr int kCount = 1000;
  constexpr size_t kMiB = 1u << 20;
  std::mt19937_64 rng(0xc0ffee);
  std::vector<size_t> sizes(kCount);
  for (int i = 0; i < kCount; ++i) {
    if (i == 0) {
      sizes[i] = 0;
    } else if (i == 1 || i % 97 == 0) {
      sizes[i] = kMiB;
    } else if (i % 10 == 3) {
      sizes[i] = rng() % (kMiB + 1);
    } else {
      sizes[i] = rng() % 4097;
    }
  }
  int got = 0;
  std::vector<std::string> bad;
  b_->on_rx = [&](const Completion& c) {
    int i = got++;
    if (i >= kCount) {
      bad.push_back("extra message " + std::to_string(i));
      return;
    }
    if (c.peer != 1 || c.imm != 0 || c.len != sizes[i]) {
      bad.push_back("message " + std::to_string(i) + ": peer " + std::to_string(c.peer) + " imm " +
                    std::to_string(c.imm) + " len " + std::to_string(c.len) + ", want len " +
                    std::to_string(sizes[i]));
      return;
    }
    size_t at = check_pattern(c.rx, c.len, static_cast<uint64_t>(i));
    if (at != SIZE_MAX) {
      bad.push_back("message " + std::to_string(i) + " differs at byte " + std::to_string(at));
    }
  };
  // One buffer for every message: an accepted post must not need it any more.
  std::vector<std::byte> buf(kMiB);
  for (int i = 0; i < kCount; ++i) {
    fill_pattern(buf.data(), sizes[i], static_cast<uint64_t>(i));
    WorkRequest wr = send_wr(static_cast<uint64_t>(i), buf.data(), sizes[i], 1 + i % 2);
    ASSERT_TRUE(post_one(ab_.get(), wr).is_ok()) << i;
    std::memset(buf.data(), 0xee, sizes[i]);
    pump_once();
  }
  ASSERT_TRUE(pump_until([&] { return got >= kCount; }, Deadline::after_ms(4 * kWaitMs)))
      << "received " << got << " of " << kCount;
  pump_once();  // nothing extra may follow
  EXPECT_EQ(got, kCount);
  for (size_t k = 0; k < bad.size() && k < 10; ++k) ADD_FAILURE() << bad[k];
  EXPECT_TRUE(bad.empty()) << bad.size() << " bad messages";
}

TEST_P(TransportConformance, BatchPostKeepsOrder) {
  const size_t n = std::min<size_t>(caps().max_batch, 16);
  std::vector<std::vector<std::byte>> msgs;
  std::vector<WorkRequest> wrs;
  for (size_t i = 0; i < n; ++i) msgs.push_back(pattern(10 + i * 100, 100 + i));
  for (size_t i = 0; i < n; ++i) wrs.push_back(send_wr(i, msgs[i].data(), msgs[i].size()));
  ASSERT_TRUE(post_all(ab_.get(), wrs).is_ok());
  ASSERT_TRUE(pump_until([&] { return b_->rx.size() >= n; }));
  ASSERT_EQ(b_->rx.size(), n);
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(b_->rx[i].data, msgs[i]) << i;
}

TEST_P(TransportConformance, WriteImmCarriesImm) {
  if (!caps().write_imm) GTEST_SKIP() << GetParam().name << " has no write-with-immediate";
  if (caps().one_sided) {
    GTEST_SKIP() << GetParam().name
                 << " writes one-sided: see OneSidedWriteImmDeliversImmAfterTheData";
  }
  auto msg = pattern(200, 3);
  WorkRequest wr = send_wr(7, msg.data(), msg.size());
  wr.op = Op::kWriteImm;
  wr.imm = 0xabcdef01;
  WorkRequest zero_imm = send_wr(8, msg.data(), 0);
  zero_imm.op = Op::kWriteImm;
  zero_imm.imm = 0;
  ASSERT_TRUE(post_one(ab_.get(), wr).is_ok());
  ASSERT_TRUE(post_one(ab_.get(), zero_imm).is_ok());
  ASSERT_TRUE(pump_until([&] { return b_->rx.size() == 2; }));
  EXPECT_EQ(b_->rx[0].peer, 1u);
  EXPECT_EQ(b_->rx[0].imm, 0xabcdef01u);
  EXPECT_EQ(b_->rx[0].data, msg);
  EXPECT_EQ(b_->rx[1].imm, 0u);
  EXPECT_TRUE(b_->rx[1].data.empty());
}

TEST_P(TransportConformance, SendDoesNotCarryImm) {
  auto msg = pattern(10, 4);
  WorkRequest wr = send_wr(1, msg.data(), msg.size());
  wr.imm = 55;  // ignored for kSend
  ASSERT_TRUE(post_one(ab_.get(), wr).is_ok());
  ASSERT_TRUE(pump_until([&] { return !b_->rx.empty(); }));
  EXPECT_EQ(b_->rx[0].imm, 0u);
}

TEST_P(TransportConformance, ReplyPathToConnector) {
  auto hello = pattern(16, 5);
  ASSERT_TRUE(post_one(ab_.get(), send_wr(1, hello.data(), hello.size())).is_ok());
  ASSERT_TRUE(pump_until([&] { return !b_->rx.empty(); }));
  auto ba = connect(b_, a_);
  ASSERT_NE(ba, nullptr);
  auto reply = pattern(5000, 6);
  ASSERT_TRUE(post_one(ba.get(), send_wr(2, reply.data(), reply.size(), 2)).is_ok());
  ASSERT_TRUE(pump_until([&] { return !a_->rx.empty(); }));
  EXPECT_EQ(a_->rx[0].peer, 2u);
  EXPECT_EQ(a_->rx[0].data, reply);
}

TEST_P(TransportConformance, ConnectReusesInboundConnection) {
  // Once 2 has heard from 1, connecting back needs no address at all: an
  // address that cannot be dialled proves the inbound connection is reused.
  auto hello = pattern(16, 7);
  ASSERT_TRUE(post_one(ab_.get(), send_wr(1, hello.data(), hello.size())).is_ok());
  ASSERT_TRUE(pump_until([&] { return !b_->rx.empty(); }));
  auto ba = b_->t->connect(peer_info(1, ""), Deadline::after_ms(kWaitMs));
  ASSERT_TRUE(ba.is_ok()) << ba.status().name();
  EXPECT_EQ((*ba)->peer(), 1u);
  auto reply = pattern(64, 8);
  ASSERT_TRUE(post_one(ba->get(), send_wr(2, reply.data(), reply.size())).is_ok());
  ASSERT_TRUE(pump_until([&] { return !a_->rx.empty(); }));
  EXPECT_EQ(a_->rx[0].peer, 2u);
  EXPECT_EQ(a_->rx[0].data, reply);
}

TEST_P(TransportConformance, ConnectAgainReusesConnection) {
  auto again = a_->t->connect(peer_info(2, ""), Deadline::after_ms(kWaitMs));
  ASSERT_TRUE(again.is_ok()) << again.status().name();
  EXPECT_EQ((*again)->peer(), 2u);
}

TEST_P(TransportConformance, UnsupportedOpsAreRefused) {
  std::vector<Op> ops;
  ops.reserve(4);  // (GCC 12 warns about the growth of a vector of bytes)
  if (!caps().one_sided) ops.push_back(Op::kRead);
  if (!caps().one_sided && !caps().placement) ops.push_back(Op::kWrite);
  if (!caps().atomics64) ops.insert(ops.end(), {Op::kFetchAdd, Op::kCmpSwap});
  if (ops.empty()) GTEST_SKIP() << GetParam().name << " supports every op";
  std::byte buf[8] = {};
  for (Op op : ops) {
    WorkRequest wr = send_wr(1, buf, sizeof(buf));
    wr.op = op;
    auto r = ab_->post(std::span<const WorkRequest>(&wr, 1));
    ASSERT_FALSE(r.is_ok()) << "op " << static_cast<int>(op);
    EXPECT_EQ(r.status().code(), Code::kUnsupported) << "op " << static_cast<int>(op);
  }
  EXPECT_TRUE(ab_->alive());
}

TEST_P(TransportConformance, UnsupportedOpEndsAcceptedPrefix) {
  if (caps().one_sided) GTEST_SKIP() << GetParam().name << " supports kRead";
  auto msg = pattern(32, 9);
  WorkRequest wrs[2] = {send_wr(1, msg.data(), msg.size()), send_wr(2, msg.data(), msg.size())};
  wrs[1].op = Op::kRead;
  auto r = ab_->post(wrs);
  ASSERT_TRUE(r.is_ok()) << r.status().name();
  EXPECT_EQ(*r, 1u);
  ASSERT_TRUE(pump_until([&] { return !b_->rx.empty(); }));
  EXPECT_EQ(b_->rx[0].data, msg);
}

TEST_P(TransportConformance, PayloadAboveMaxMsgIsInvalid) {
  const size_t max = caps().max_msg;
  std::vector<std::byte> big(max / 2 + 1);
  // Two sges that each fit but together exceed max_msg.
  WorkRequest two;
  two.op = Op::kSend;
  two.num_sge = 2;
  two.sge[0] = Sge{big.data(), static_cast<uint32_t>(big.size()), 0};
  two.sge[1] = Sge{big.data(), static_cast<uint32_t>(big.size()), 0};
  auto r = ab_->post(std::span<const WorkRequest>(&two, 1));
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArg);
  EXPECT_TRUE(ab_->alive());
}

TEST_P(TransportConformance, PayloadOfMaxMsgIsDelivered) {
  const size_t max = caps().max_msg;
  if (max > (64u << 20)) GTEST_SKIP() << "max_msg " << max << " is too large for a unit test";
  auto msg = pattern(max, 10);
  ASSERT_TRUE(post_one(ab_.get(), send_wr(1, msg.data(), msg.size(), 2)).is_ok());
  ASSERT_TRUE(pump_until([&] { return !b_->rx.empty(); }));
  EXPECT_EQ(b_->rx[0].data.size(), max);
  EXPECT_TRUE(b_->rx[0].data == msg);
  std::vector<std::byte> over(max + 1);
  auto r = ab_->post(std::vector<WorkRequest>{send_wr(2, over.data(), over.size())});
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArg);
}

TEST_P(TransportConformance, OversizedWorkRequestEndsAcceptedPrefix) {
  std::vector<std::byte> over(caps().max_msg + size_t{1});
  auto msg = pattern(32, 11);
  WorkRequest wrs[2] = {send_wr(1, msg.data(), msg.size()), send_wr(2, over.data(), over.size())};
  auto r = ab_->post(wrs);
  ASSERT_TRUE(r.is_ok()) << r.status().name();
  EXPECT_EQ(*r, 1u);
  ASSERT_TRUE(pump_until([&] { return !b_->rx.empty(); }));
  EXPECT_EQ(b_->rx[0].data, msg);
}

TEST_P(TransportConformance, WrongTokenIsDropped) {
  Side* c = add_side(3, kToken ^ 1);
  ASSERT_NE(c, nullptr);
  auto cb = c->t->connect(peer_info(2, b_->t->local_address()), Deadline::after_ms(kWaitMs));
  if (cb.is_ok()) {
    auto msg = pattern(100, 12);
    WorkRequest wr = send_wr(1, msg.data(), msg.size());
    bool post_down = false;
    bool refused = pump_until([&] {
      if (!post_down) {
        auto r = (*cb)->post(std::span<const WorkRequest>(&wr, 1));
        if (!r.is_ok()) {
          EXPECT_EQ(r.status().code(), Code::kPeerDown);
          post_down = true;
        }
      }
      return post_down || has(c->lost, 2);
    });
    EXPECT_TRUE(refused) << "a peer with another cluster token was never dropped";
  } else {
    EXPECT_EQ(cb.status().code(), Code::kPeerDown);
  }
  pump_once();
  for (const auto& m : b_->rx) EXPECT_NE(m.peer, 3u) << "delivered a message from a stranger";
  EXPECT_TRUE(b_->rx.empty());
  EXPECT_FALSE(has(b_->lost, 3)) << "an unidentified peer was reported lost";
  // The legitimate peer is unaffected.
  auto msg = pattern(100, 13);
  ASSERT_TRUE(post_one(ab_.get(), send_wr(1, msg.data(), msg.size())).is_ok());
  ASSERT_TRUE(pump_until([&] { return !b_->rx.empty(); }));
  EXPECT_EQ(b_->rx[0].peer, 1u);
  EXPECT_EQ(b_->rx[0].data, msg);
}

TEST_P(TransportConformance, InboundRefusedBeforeJoin) {
  Side* c = add_side(kNoNode);  // listening, but has not joined
  ASSERT_NE(c, nullptr);
  c->node = 3;
  auto ac = a_->t->connect(peer_info(3, c->t->local_address()), Deadline::after_ms(kWaitMs));
  if (!ac.is_ok()) {
    EXPECT_EQ(ac.status().code(), Code::kPeerDown);
    return;
  }
  auto msg = pattern(10, 14);
  WorkRequest wr = send_wr(1, msg.data(), msg.size());
  bool post_down = false;
  bool refused = pump_until([&] {
    if (!post_down) {
      auto r = (*ac)->post(std::span<const WorkRequest>(&wr, 1));
      post_down = !r.is_ok();
    }
    return post_down || has(a_->lost, 3);
  });
  EXPECT_TRUE(refused);
  EXPECT_TRUE(c->rx.empty());
}

TEST_P(TransportConformance, DestroyedPeerIsLost) {
  auto msg = pattern(100, 15);
  ASSERT_TRUE(post_one(ab_.get(), send_wr(1, msg.data(), msg.size())).is_ok());
  ASSERT_TRUE(pump_until([&] { return !b_->rx.empty(); }));
  std::string b_address = b_->t->local_address();
  b_->t.reset();
  ASSERT_TRUE(pump_until([&] { return has(a_->lost, 2); })) << "no kPeerLost for node 2";
  for (size_t i = 0; i < a_->lost.size(); ++i) {
    EXPECT_EQ(a_->lost[i], 2u);
    EXPECT_FALSE(a_->lost_status[i].is_ok());
  }
  EXPECT_FALSE(ab_->alive());
  auto r = ab_->post(std::vector<WorkRequest>{send_wr(2, msg.data(), msg.size())});
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Code::kPeerDown);
  // Nothing listens there any more.
  expect_unreachable(2, b_address);
}

TEST_P(TransportConformance, LostPeerIsReportedOnce) {
  auto msg = pattern(100, 16);
  ASSERT_TRUE(post_one(ab_.get(), send_wr(1, msg.data(), msg.size())).is_ok());
  ASSERT_TRUE(pump_until([&] { return !b_->rx.empty(); }));
  b_->t.reset();
  ASSERT_TRUE(pump_until([&] { return has(a_->lost, 2); }));
  for (int i = 0; i < 20; ++i) {
    pump_once();
    wait_any(Deadline::after_ms(1));
  }
  EXPECT_EQ(std::count(a_->lost.begin(), a_->lost.end(), 2u), 1);
}

TEST_P(TransportConformance, ConnectToClosedAddressIsPeerDown) {
  Side* c = add_side(3);
  ASSERT_NE(c, nullptr);
  std::string address = c->t->local_address();
  c->t.reset();
  expect_unreachable(3, address);
}

TEST_P(TransportConformance, ConnectToBadAddressFails) {
  for (const char* address : {"", "not an address", "127.0.0.1:", "127.0.0.1:99999",
                              "shm:", "shm::x", "shm:12:", "shm:1:no-such-listener"}) {
    auto ep = a_->t->connect(peer_info(9, address), Deadline::after_ms(kWaitMs));
    EXPECT_FALSE(ep.is_ok()) << "'" << address << "'";
  }
}

TEST_P(TransportConformance, ConnectBeforeJoinIsNotJoined) {
  Side* c = add_side(kNoNode);
  ASSERT_NE(c, nullptr);
  auto ep = c->t->connect(peer_info(2, b_->t->local_address()), Deadline::after_ms(kWaitMs));
  ASSERT_FALSE(ep.is_ok());
  EXPECT_EQ(ep.status().code(), Code::kNotJoined);
}

TEST_P(TransportConformance, RegisterMemoryCoversRange) {
  std::vector<std::byte> mem(4096);
  auto mr = a_->t->register_memory(mem, Access::kLocal);
  ASSERT_TRUE(mr.is_ok()) << mr.status().name();
  EXPECT_EQ(mr->addr, mem.data());
  EXPECT_EQ(mr->len, mem.size());
}

// A signaled work request reports kSendDone with its wr_id (transport.h,
// kWrSignaled). Disabled: the tcp transport ignores kWrSignaled and never
// produces kSendDone.
TEST_P(TransportConformance, SignaledSendReportsSendDone) {
  auto msg = pattern(100, 17);
  WorkRequest wr = send_wr(0x77, msg.data(), msg.size());
  wr.flags = kWrSignaled;
  ASSERT_TRUE(post_one(ab_.get(), wr).is_ok());
  EXPECT_TRUE(pump_until([&] { return !a_->send_done.empty(); })) << "no kSendDone";
  ASSERT_EQ(a_->send_done.size(), 1u);
  EXPECT_EQ(a_->send_done[0], 0x77u);
}

// --- One-sided ops (transports with native ones) ---

TEST_P(TransportConformance, OneSidedWriteThenReadBack) {
  if (!caps().one_sided) GTEST_SKIP() << GetParam().name << " has no native one-sided ops";
  MemRegion mr = alloc_on(b_, 64 * 1024);
  ASSERT_NE(mr.rkey, 0u);
  auto data = pattern(5000, 30);
  WorkRequest w = rdma_wr(Op::kWrite, 0x51, data.data(), data.size(), 100, mr.rkey);
  w.flags = kWrSignaled;
  ASSERT_TRUE(post_one(ab_.get(), w).is_ok());
  // Done at post: the bytes are in the owner's memory, and nothing else moved.
  EXPECT_EQ(std::memcmp(mr.addr + 100, data.data(), data.size()), 0);
  for (size_t i : {size_t{0}, size_t{99}, size_t{5100}, mr.len - 1}) {
    EXPECT_EQ(mr.addr[i], std::byte{0}) << i;
  }
  // Read it back through two sges; the owner's own store is seen too.
  mr.addr[5099] = std::byte{0x7e};
  data[4999] = std::byte{0x7e};
  std::vector<std::byte> back(5000);
  WorkRequest r = rdma_wr(Op::kRead, 0x52, back.data(), 1000, 100, mr.rkey);
  r.num_sge = 2;
  r.sge[1] = Sge{back.data() + 1000, 4000, 0};
  r.flags = kWrSignaled;
  ASSERT_TRUE(post_one(ab_.get(), r).is_ok());
  EXPECT_EQ(back, data);
  ASSERT_TRUE(pump_until([&] { return a_->send_done.size() == 2; }));
  EXPECT_EQ(a_->send_done[0], 0x51u);
  EXPECT_EQ(a_->send_done[1], 0x52u);
  EXPECT_TRUE(b_->rx.empty()) << "a one-sided write must not be a message";
}

TEST_P(TransportConformance, OneSidedAtomics) {
  if (!caps().atomics64) GTEST_SKIP() << GetParam().name << " has no native atomics";
  MemRegion mr = alloc_on(b_, 4096);
  auto word = [&] {
    uint64_t v;
    std::memcpy(&v, mr.addr + 8, 8);
    return v;
  };
  uint64_t init = 40;
  std::memcpy(mr.addr + 8, &init, 8);
  uint64_t old = 0;
  ASSERT_TRUE(post_one(ab_.get(), atomic_wr(Op::kFetchAdd, &old, 8, mr.rkey, 0, 2)).is_ok());
  EXPECT_EQ(old, 40u);
  EXPECT_EQ(word(), 42u);
  // A compare that fails returns the current value and changes nothing.
  ASSERT_TRUE(post_one(ab_.get(), atomic_wr(Op::kCmpSwap, &old, 8, mr.rkey, 41, 7)).is_ok());
  EXPECT_EQ(old, 42u);
  EXPECT_EQ(word(), 42u);
  ASSERT_TRUE(post_one(ab_.get(), atomic_wr(Op::kCmpSwap, &old, 8, mr.rkey, 42, 7)).is_ok());
  EXPECT_EQ(old, 42u);
  EXPECT_EQ(word(), 7u);
  // Wrapping add.
  ASSERT_TRUE(
      post_one(ab_.get(), atomic_wr(Op::kFetchAdd, &old, 8, mr.rkey, 0, ~uint64_t{0})).is_ok());
  EXPECT_EQ(old, 7u);
  EXPECT_EQ(word(), 6u);
  // Misaligned words and short result buffers are refused.
  auto r = ab_->post(std::vector<WorkRequest>{atomic_wr(Op::kFetchAdd, &old, 12, mr.rkey, 0, 1)});
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Code::kAlign);
  WorkRequest shortbuf = atomic_wr(Op::kFetchAdd, &old, 8, mr.rkey, 0, 1);
  shortbuf.sge[0].len = 4;
  r = ab_->post(std::span<const WorkRequest>(&shortbuf, 1));
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArg);
  EXPECT_EQ(word(), 6u);
  EXPECT_TRUE(ab_->alive());
}

TEST_P(TransportConformance, OneSidedOutOfBoundsTouchesNothing) {
  if (!caps().one_sided) GTEST_SKIP() << GetParam().name << " has no native one-sided ops";
  MemRegion mr = alloc_on(b_, 4096);
  fill_pattern(mr.addr, mr.len, 31);
  auto src = pattern(64, 32);
  std::vector<std::byte> dst(64, std::byte{0x11});
  uint64_t old = 0x1234;
  const uint64_t len = mr.len;
  struct Case {
    const char* what;
    WorkRequest wr;
  };
  Case cases[] = {
      {"write across the end", rdma_wr(Op::kWrite, 1, src.data(), 64, len - 10, mr.rkey)},
      {"write past the end", rdma_wr(Op::kWrite, 1, src.data(), 1, len, mr.rkey)},
      {"write at a huge offset", rdma_wr(Op::kWrite, 1, src.data(), 8, UINT64_MAX - 3, mr.rkey)},
      {"write-imm across the end", rdma_wr(Op::kWriteImm, 1, src.data(), 64, len - 8, mr.rkey)},
      {"read across the end", rdma_wr(Op::kRead, 1, dst.data(), 2, len - 1, mr.rkey)},
      {"fetch-add past the end", atomic_wr(Op::kFetchAdd, &old, len, mr.rkey, 0, 1)},
      {"cmp-swap across the end", atomic_wr(Op::kCmpSwap, &old, len - 4, mr.rkey, 0, 1)},
  };
  for (const auto& c : cases) {
    auto r = ab_->post(std::span<const WorkRequest>(&c.wr, 1));
    ASSERT_FALSE(r.is_ok()) << c.what;
    EXPECT_EQ(r.status().code(), Code::kOutOfBounds) << c.what;
  }
  EXPECT_EQ(check_pattern(mr.addr, mr.len, 31), SIZE_MAX) << "remote memory changed";
  EXPECT_EQ(dst, std::vector<std::byte>(64, std::byte{0x11})) << "local buffer changed";
  EXPECT_EQ(old, 0x1234u);
  EXPECT_TRUE(ab_->alive());
  pump_once();
  EXPECT_TRUE(b_->rx.empty()) << "a refused write-imm delivered its imm";
  // The last byte is still reachable.
  ASSERT_TRUE(post_one(ab_.get(), rdma_wr(Op::kWrite, 1, src.data(), 1, len - 1, mr.rkey)).is_ok());
  EXPECT_EQ(mr.addr[len - 1], src[0]);
}

TEST_P(TransportConformance, OneSidedBadRkeyIsRefused) {
  if (!caps().one_sided) GTEST_SKIP() << GetParam().name << " has no native one-sided ops";
  if (!caps().rkey_checked) {
    GTEST_SKIP() << GetParam().name << " checks rkeys at the owner: see OneSidedBadRkeyBreaks";
  }
  MemRegion mr = alloc_on(b_, 4096);
  std::vector<std::byte> plain(4096);
  auto reg = b_->t->register_memory(plain, Access::kLocal);
  ASSERT_TRUE(reg.is_ok());
  EXPECT_EQ(reg->rkey, 0u) << "memory without remote rights must get no usable rkey";
  auto freed = b_->t->alloc_memory(4096, kRemoteAll);
  ASSERT_TRUE(freed.is_ok());
  uint64_t freed_rkey = freed->rkey;
  b_->t->free_memory(*freed);
  auto src = pattern(8, 33);
  for (uint64_t rkey : {uint64_t{0}, reg->rkey, mr.rkey ^ (uint64_t{1} << 40), freed_rkey,
                        uint64_t{0x0123456789abcdefull}}) {
    for (Op op : {Op::kWrite, Op::kRead}) {
      std::vector<std::byte> buf = src;
      auto r = ab_->post(std::vector<WorkRequest>{rdma_wr(op, 1, buf.data(), 8, 0, rkey)});
      ASSERT_FALSE(r.is_ok()) << std::hex << rkey;
      EXPECT_EQ(r.status().code(), Code::kBadHandle) << std::hex << rkey;
    }
  }
  EXPECT_TRUE(ab_->alive());
  // The region the rkey belongs to is still fine.
  ASSERT_TRUE(post_one(ab_.get(), rdma_wr(Op::kWrite, 1, src.data(), 8, 0, mr.rkey)).is_ok());
  EXPECT_EQ(std::memcmp(mr.addr, src.data(), 8), 0);
}

// Without Caps::rkey_checked (rc), a bad rkey is a remote access error: the
// op fails, both ends lose the connection, and a new one works.
TEST_P(TransportConformance, OneSidedBadRkeyBreaks) {
  if (!caps().one_sided || caps().rkey_checked) {
    GTEST_SKIP() << GetParam().name << " refuses bad rkeys at post";
  }
  MemRegion mr = alloc_on(b_, 4096);
  auto src = pattern(8, 36);
  const uint64_t bad = mr.rkey ^ 0xff00;  // another MR key, same slice bounds
  auto r = ab_->post(std::vector<WorkRequest>{rdma_wr(Op::kWrite, 1, src.data(), 8, 0, bad)});
  ASSERT_FALSE(r.is_ok());
  EXPECT_TRUE(r.status().code() == Code::kPerm || r.status().code() == Code::kPeerDown)
      << r.status().name();
  ASSERT_TRUE(pump_until([&] { return !a_->lost.empty() && !b_->lost.empty(); }));
  EXPECT_FALSE(ab_->alive());
  auto again = connect(a_, b_);
  ASSERT_NE(again, nullptr);
  ASSERT_TRUE(post_one(again.get(), rdma_wr(Op::kWrite, 1, src.data(), 8, 0, mr.rkey)).is_ok());
  EXPECT_EQ(std::memcmp(mr.addr, src.data(), 8), 0);
}

TEST_P(TransportConformance, OneSidedRightsAreChecked) {
  if (!caps().one_sided) GTEST_SKIP() << GetParam().name << " has no native one-sided ops";
  if (!caps().rkey_checked) GTEST_SKIP() << GetParam().name << " leaves rights to proto's handles";
  MemRegion ro = alloc_on(b_, 4096, Access::kRemoteRead);
  fill_pattern(ro.addr, 64, 34);
  auto src = pattern(64, 35);
  uint64_t old = 0;
  for (const WorkRequest& wr : {rdma_wr(Op::kWrite, 1, src.data(), 64, 0, ro.rkey),
                                atomic_wr(Op::kFetchAdd, &old, 0, ro.rkey, 0, 1)}) {
    auto r = ab_->post(std::span<const WorkRequest>(&wr, 1));
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), Code::kPerm);
  }
  EXPECT_EQ(check_pattern(ro.addr, 64, 34), SIZE_MAX);
  std::vector<std::byte> back(64);
  ASSERT_TRUE(post_one(ab_.get(), rdma_wr(Op::kRead, 1, back.data(), 64, 0, ro.rkey)).is_ok());
  EXPECT_EQ(check_pattern(back.data(), 64, 34), SIZE_MAX);
}

TEST_P(TransportConformance, OneSidedWriteImmDeliversImmAfterTheData) {
  if (!caps().one_sided || !caps().write_imm) {
    GTEST_SKIP() << GetParam().name << " has no one-sided write-with-immediate";
  }
  MemRegion mr = alloc_on(b_, 8192);
  auto data = pattern(3000, 36);
  int got = 0;
  bool data_there = false;
  uint32_t imm = 0, len = 99;
  b_->on_rx = [&](const Completion& c) {
    if (got++ == 0) {
      data_there = std::memcmp(mr.addr + 64, data.data(), data.size()) == 0;
      imm = c.imm;
      len = c.len;
    }
  };
  WorkRequest w = rdma_wr(Op::kWriteImm, 1, data.data(), data.size(), 64, mr.rkey);
  w.imm = 0xfeedbeef;
  // Zero bytes need no region: only the immediate travels.
  WorkRequest bare = rdma_wr(Op::kWriteImm, 2, nullptr, 0, 0, 0);
  bare.imm = 5;
  ASSERT_TRUE(post_one(ab_.get(), w).is_ok());
  ASSERT_TRUE(post_one(ab_.get(), bare).is_ok());
  ASSERT_TRUE(pump_until([&] { return got == 2; }));
  EXPECT_TRUE(data_there) << "the immediate arrived before the written bytes";
  EXPECT_EQ(imm, 0xfeedbeefu);
  EXPECT_EQ(len, 0u);
}

// Send messages to an owner that takes none (it never polls) until posts
// meet back-pressure that polling the sender does not end, then read, write
// and add on its memory / Expect each
// one-sided op done at once, and every message delivered in order once the
// owner polls. (On rc the owner's receive buffers run out: its device
// answers the next SEND "receiver not ready", and a one-sided op queued on
// the same QP behind that SEND would wait as long as the owner takes
// nothing. A progress thread waiting so inside a handler reposts no buffers
// of its own, so two nodes doing it to each other waited for ever.)
TEST_P(TransportConformance, OneSidedOpsDoNotWaitForTheOwnerToTakeMessages) {
  if (!caps().one_sided || !caps().atomics64) {
    GTEST_SKIP() << GetParam().name << " has no native one-sided ops";
  }
  HangGuard guard(Deadline::after_ms(6 * kWaitMs), "one-sided ops behind refused messages");
  MemRegion mr = alloc_on(b_, 4096);
  fill_pattern(mr.addr, 256, 5);
  constexpr uint64_t kMaxMessages = 1u << 20;
  std::vector<std::byte> msg(64);
  uint64_t accepted = 0;
  for (int refused = 0; accepted < kMaxMessages && refused < 200;) {
    fill_pattern(msg.data(), msg.size(), accepted);
    WorkRequest wr = send_wr(accepted, msg.data(), msg.size());
    auto r = ab_->post(std::span<const WorkRequest>(&wr, 1));
    ASSERT_TRUE(r.is_ok()) << r.status().name();
    if (*r == 1) {
      ++accepted;
      refused = 0;
      continue;
    }
    ++refused;  // the sender's completions may free room: poll it, not the owner
    pump_side(a_);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_LT(accepted, kMaxMessages) << "no back-pressure from an owner that takes nothing";
  // Posted without polling either side: each op is done when post returns.
  std::vector<std::byte> back(256);
  auto r = ab_->post(std::vector<WorkRequest>{rdma_wr(Op::kRead, 1, back.data(), 256, 0, mr.rkey)});
  ASSERT_TRUE(r.is_ok()) << r.status().name();
  EXPECT_EQ(check_pattern(back.data(), back.size(), 5), SIZE_MAX);
  auto data = pattern(100, 9);
  r = ab_->post(std::vector<WorkRequest>{rdma_wr(Op::kWrite, 2, data.data(), 100, 1000, mr.rkey)});
  ASSERT_TRUE(r.is_ok()) << r.status().name();
  EXPECT_EQ(std::memcmp(mr.addr + 1000, data.data(), data.size()), 0);
  uint64_t old = 1;
  r = ab_->post(std::vector<WorkRequest>{atomic_wr(Op::kFetchAdd, &old, 2048, mr.rkey, 0, 3)});
  ASSERT_TRUE(r.is_ok()) << r.status().name();
  EXPECT_EQ(old, 0u);
  // The owner takes its messages now: all of them, in order, once each.
  uint64_t next = 0;
  int bad = 0;
  b_->on_rx = [&](const Completion& c) {
    if (c.len != msg.size() || check_pattern(c.rx, c.len, next) != SIZE_MAX) ++bad;
    ++next;
  };
  ASSERT_TRUE(pump_until([&] { return next >= accepted; })) << next << " of " << accepted;
  pump_once();
  EXPECT_EQ(next, accepted);
  EXPECT_EQ(bad, 0);
  EXPECT_TRUE(ab_->alive());
  b_->on_rx = nullptr;
}

TEST_P(TransportConformance, ConcurrentAtomicsFromTwoPeers) {
  if (!caps().atomics64) GTEST_SKIP() << GetParam().name << " has no native atomics";
  Side* c = add_side(3);
  ASSERT_NE(c, nullptr);
  auto cb = connect(c, b_);
  ASSERT_NE(cb, nullptr);
  MemRegion mr = alloc_on(b_, 4096);
  constexpr int kPerThread = 2000;
  std::vector<std::vector<uint64_t>> olds(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    Endpoint* ep = t % 2 == 0 ? ab_.get() : cb.get();
    threads.emplace_back([ep, &mr, &olds, t] {
      for (int i = 0; i < kPerThread; ++i) {
        uint64_t old = 0;
        WorkRequest wr = atomic_wr(Op::kFetchAdd, &old, 16, mr.rkey, 0, 1);
        auto r = ep->post(std::span<const WorkRequest>(&wr, 1));
        if (!r.is_ok() || *r != 1) return;
        olds[t].push_back(old);
      }
    });
  }
  for (auto& th : threads) th.join();
  std::vector<uint64_t> all;
  for (auto& v : olds) all.insert(all.end(), v.begin(), v.end());
  ASSERT_EQ(all.size(), 4u * kPerThread);
  std::sort(all.begin(), all.end());
  for (size_t i = 0; i < all.size(); ++i) ASSERT_EQ(all[i], i) << "an add was lost or doubled";
  uint64_t final_value;
  std::memcpy(&final_value, mr.addr + 16, 8);
  EXPECT_EQ(final_value, 4u * kPerThread);
}

// --- Messages (every transport) ---

// Both ends dial each other before either has polled: two connections. Both
// directions work, and when one end goes away the other hears it once.
TEST_P(TransportConformance, SimultaneousConnectFromBothSides) {
  Side* c = add_side(3);
  ASSERT_NE(c, nullptr);
  auto bc = connect(b_, c);
  auto cb = connect(c, b_);
  ASSERT_NE(bc, nullptr);
  ASSERT_NE(cb, nullptr);
  auto m1 = pattern(300, 50), m2 = pattern(400, 51);
  for (int round = 0; round < 3; ++round) {
    size_t at_b = b_->rx.size(), at_c = c->rx.size();
    ASSERT_TRUE(post_one(bc.get(), send_wr(1, m1.data(), m1.size())).is_ok());
    ASSERT_TRUE(post_one(cb.get(), send_wr(2, m2.data(), m2.size())).is_ok());
    ASSERT_TRUE(pump_until([&] { return b_->rx.size() > at_b && c->rx.size() > at_c; }));
    EXPECT_EQ(c->rx.back().peer, 2u);
    EXPECT_EQ(c->rx.back().data, m1);
    EXPECT_EQ(b_->rx.back().peer, 3u);
    EXPECT_EQ(b_->rx.back().data, m2);
    // A third endpoint from either side reaches the peer too.
    auto again = b_->t->connect(peer_info(3, ""), Deadline::after_ms(kWaitMs));
    ASSERT_TRUE(again.is_ok()) << again.status().name();
    EXPECT_TRUE((*again)->alive());
  }
  EXPECT_FALSE(has(b_->lost, 3));
  EXPECT_FALSE(has(c->lost, 2));
  c->t.reset();
  ASSERT_TRUE(pump_until([&] { return has(b_->lost, 3); }));
  for (int i = 0; i < 20; ++i) {
    pump_once();
    wait_any(Deadline::after_ms(1));
  }
  EXPECT_EQ(std::count(b_->lost.begin(), b_->lost.end(), 3u), 1);
  EXPECT_FALSE(bc->alive());
}

// Two nodes dial each other on two threads at the same moment, so each one's
// dial may complete while the other's is being identified. Whichever
// connection each side ends up posting on, neither is closed under the
// other: messages flow both ways and no side hears its peer lost.
TEST_P(TransportConformance, ConcurrentDialsKeepThePairUp) {
  for (NodeId round = 0; round < 4; ++round) {
    Side* c = add_side(10 + 2 * round);
    Side* d = add_side(11 + 2 * round);
    ASSERT_NE(c, nullptr);
    ASSERT_NE(d, nullptr);
    std::atomic<int> ready{0};
    std::unique_ptr<Endpoint> dc;
    std::thread other([&] {
      ready.fetch_add(1);
      while (ready.load() < 2) {
      }
      dc = connect(d, c);
    });
    ready.fetch_add(1);
    while (ready.load() < 2) {
    }
    auto cd = connect(c, d);
    other.join();
    ASSERT_NE(cd, nullptr);
    ASSERT_NE(dc, nullptr);
    auto m1 = pattern(200, 60 + round), m2 = pattern(300, 70 + round);
    for (int i = 0; i < 3; ++i) {
      size_t at_c = c->rx.size(), at_d = d->rx.size();
      ASSERT_TRUE(post_one(cd.get(), send_wr(1, m1.data(), m1.size())).is_ok()) << round;
      ASSERT_TRUE(post_one(dc.get(), send_wr(2, m2.data(), m2.size())).is_ok()) << round;
      ASSERT_TRUE(pump_until([&] { return c->rx.size() > at_c && d->rx.size() > at_d; }))
          << "round " << round;
      EXPECT_EQ(d->rx.back().data, m1);
      EXPECT_EQ(c->rx.back().data, m2);
    }
    // Long enough for a closed duplicate's EOF to reach its peer.
    for (int i = 0; i < 20; ++i) {
      pump_once();
      wait_any(Deadline::after_ms(1));
    }
    EXPECT_FALSE(has(c->lost, d->node)) << "round " << round;
    EXPECT_FALSE(has(d->lost, c->node)) << "round " << round;
    EXPECT_TRUE(cd->alive());
    EXPECT_TRUE(dc->alive());
  }
}

TEST_P(TransportConformance, AllocMemoryIsUsableLocally) {
  auto mr = a_->t->alloc_memory(10000, kRemoteAll);
  ASSERT_TRUE(mr.is_ok()) << mr.status().name();
  ASSERT_NE(mr->addr, nullptr);
  EXPECT_GE(mr->len, 10000u);
  for (size_t i = 0; i < mr->len; i += 4096) EXPECT_EQ(mr->addr[i], std::byte{0}) << i;
  fill_pattern(mr->addr, mr->len, 52);
  EXPECT_EQ(check_pattern(mr->addr, mr->len, 52), SIZE_MAX);
  if (caps().one_sided) {
    EXPECT_NE(mr->rkey, 0u);
    // A span inside the region registers with the region's rkey.
    auto sub = a_->t->register_memory(std::span<std::byte>(mr->addr + 4096, 100), kRemoteAll);
    ASSERT_TRUE(sub.is_ok());
    EXPECT_EQ(sub->rkey, mr->rkey);
  }
  EXPECT_FALSE(a_->t->alloc_memory(0, kRemoteAll).is_ok());
  a_->t->free_memory(*mr);
}

// Messages several times the size of a ring (shm) or a socket buffer (tcp),
// between small ones, arrive whole and in order.
TEST_P(TransportConformance, MessagesLargerThanTheRing) {
  const std::vector<size_t> sizes = {kTestMaxMsg - 7, 5, 3 * (1u << 20) + 5, 0, 70000, kTestMaxMsg};
  size_t got = 0;
  std::vector<std::string> bad;
  b_->on_rx = [&](const Completion& c) {
    size_t i = got++;
    if (i >= sizes.size() || c.len != sizes[i] || check_pattern(c.rx, c.len, 40 + i) != SIZE_MAX) {
      bad.push_back("message " + std::to_string(i) + " len " + std::to_string(c.len));
    }
  };
  std::vector<std::byte> buf(kTestMaxMsg);
  for (size_t i = 0; i < sizes.size(); ++i) {
    fill_pattern(buf.data(), sizes[i], 40 + i);
    ASSERT_TRUE(post_one(ab_.get(), send_wr(i, buf.data(), sizes[i], 1 + i % 2)).is_ok()) << i;
    std::memset(buf.data(), 0xee, sizes[i]);  // an accepted post no longer needs it
  }
  ASSERT_TRUE(pump_until([&] { return got >= sizes.size(); }, Deadline::after_ms(4 * kWaitMs)));
  pump_once();
  EXPECT_EQ(got, sizes.size());
  EXPECT_TRUE(bad.empty()) << bad.front();
}

// Enough small messages, posted in batches, to wrap a ring many times.
TEST_P(TransportConformance, ManyBatchedMessagesWrapAroundInOrder) {
  constexpr uint64_t kCount = 20000;
  auto size_of = [](uint64_t i) { return static_cast<size_t>((i * 37) % 1500); };
  uint64_t got = 0;
  uint64_t bad = 0;
  b_->on_rx = [&](const Completion& c) {
    uint64_t i = got++;
    if (c.len != size_of(i) || check_pattern(c.rx, c.len, i) != SIZE_MAX) ++bad;
  };
  std::vector<std::vector<std::byte>> bufs(8);
  for (uint64_t i = 0; i < kCount; i += 8) {
    std::vector<WorkRequest> wrs;
    for (uint64_t j = 0; j < 8; ++j) {
      bufs[j] = pattern(size_of(i + j), i + j);
      wrs.push_back(send_wr(i + j, bufs[j].data(), bufs[j].size(), 1 + j % 2));
    }
    ASSERT_TRUE(post_all(ab_.get(), wrs).is_ok()) << i;
    if (i % 64 == 0) pump_once();
  }
  ASSERT_TRUE(pump_until([&] { return got >= kCount; }, Deadline::after_ms(4 * kWaitMs)))
      << "received " << got << " of " << kCount;
  pump_once();
  EXPECT_EQ(got, kCount);
  EXPECT_EQ(bad, 0u);
}

// Three threads post to one endpoint at once (with kWrMore on two of every
// three posts when `corked`, as rpc_async does) while this thread polls, as
// the engine's progress thread does (and calls flush() after each batch):
// every message arrives exactly once, each thread's in order. `large`:
// messages of 5 to 45 KiB, in several fragments where a transport cuts
// them, so posters and the poller meet on the fragment backlog.
void TransportConformance::concurrent_posters(bool corked, bool large) {
  constexpr uint32_t kThreads = 3;
  const uint32_t kPerThread = large ? 150 : 3000;
  auto body_of = [large](uint32_t i) -> size_t {
    return large ? 5000 + (i * 7919) % 40000 : i % 700;
  };
  // A poller and a poster that wait on each other never return: the test
  // fails here rather than running into the suite's own time limit.
  HangGuard guard(Deadline::after_ms(6 * kWaitMs), "concurrent posters");
  std::vector<uint32_t> next(kThreads, 0);
  uint64_t got = 0, bad = 0;
  b_->on_rx = [&](const Completion& c) {
    ++got;
    uint32_t hdr[2];
    if (c.len < sizeof(hdr)) {
      ++bad;
      return;
    }
    std::memcpy(hdr, c.rx, sizeof(hdr));
    size_t body = c.len - sizeof(hdr);
    if (hdr[0] >= kThreads || hdr[1] != next[hdr[0]] || body != body_of(hdr[1]) ||
        check_pattern(c.rx + sizeof(hdr), body, uint64_t{hdr[0]} << 32 | hdr[1]) != SIZE_MAX) {
      ++bad;
      return;
    }
    ++next[hdr[0]];
  };
  std::atomic<int> failed{0};
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([this, t, corked, kPerThread, &body_of, &failed] {
      std::vector<std::byte> buf(8 + 45000);  // the largest body is 44,999 bytes
      for (uint32_t i = 0; i < kPerThread; ++i) {
        uint32_t hdr[2] = {t, i};
        std::memcpy(buf.data(), hdr, sizeof(hdr));
        size_t body = body_of(i);
        fill_pattern(buf.data() + 8, body, uint64_t{t} << 32 | i);
        WorkRequest wr = send_wr(i, buf.data(), 8 + body, 1 + i % 2);
        if (corked && i % 3 != 0) wr.flags |= kWrMore;
        Deadline d = Deadline::after_ms(kWaitMs);
        for (;;) {
          auto r = ab_->post(std::span<const WorkRequest>(&wr, 1));
          if (!r.is_ok() || d.expired()) {
            failed.fetch_add(1);
            return;
          }
          if (*r == 1) break;
          std::this_thread::yield();  // back-pressure: the main thread polls
        }
      }
    });
  }
  bool all = pump_until(
      [&] {
        a_->t->flush();
        return got >= uint64_t{kThreads} * kPerThread;
      },
      Deadline::after_ms(4 * kWaitMs));
  for (auto& th : threads) th.join();
  EXPECT_EQ(failed.load(), 0);
  ASSERT_TRUE(all) << "received " << got;
  EXPECT_EQ(bad, 0u);
  // Nothing arrives twice: a late duplicate would show up now.
  pump_until([] { return false; }, Deadline::after_ms(50));
  EXPECT_EQ(got, uint64_t{kThreads} * kPerThread);
}

TEST_P(TransportConformance, ConcurrentPostersKeepTheirOrder) { concurrent_posters(false); }

TEST_P(TransportConformance, ConcurrentCorkedPostersArriveOnceInOrder) { concurrent_posters(true); }

TEST_P(TransportConformance, ConcurrentLargePostersKeepTheirOrder) {
  concurrent_posters(false, true);
}

// A peer that goes away while this side keeps posting: kPeerLost, then posts
// fail with kPeerDown; nothing hangs.
TEST_P(TransportConformance, PeerDestroyedWhilePosting) {
  std::vector<std::byte> buf = pattern(2048, 37);
  WorkRequest wr = send_wr(1, buf.data(), buf.size());
  for (int i = 0; i < 2000; ++i) {
    auto r = ab_->post(std::span<const WorkRequest>(&wr, 1));
    ASSERT_TRUE(r.is_ok()) << r.status().name();
    if (*r == 0) break;  // b never polls: back-pressure
  }
  b_->t.reset();
  Status last;
  ASSERT_TRUE(pump_until([&] {
    auto r = ab_->post(std::span<const WorkRequest>(&wr, 1));
    if (!r.is_ok()) last = r.status();
    return has(a_->lost, 2);
  })) << "no kPeerLost for node 2";
  EXPECT_FALSE(ab_->alive());
  auto r = ab_->post(std::span<const WorkRequest>(&wr, 1));
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Code::kPeerDown);
  if (!last.is_ok()) {
    EXPECT_EQ(last.code(), Code::kPeerDown);
  }
}

// Back-pressure on kinds with a small queue: a receiver that does not poll
// makes post return a short count; polling both sides lets everything through
// in order, and kWrMustQueue is never refused.
TEST_P(TransportConformance, BackPressureShortCountThenRecovers) {
  if (!GetParam().small_queue) GTEST_SKIP() << GetParam().name << " has a large queue";
  for (size_t msg_bytes : {size_t{1000}, size_t{16 * 1024}}) {
    SCOPED_TRACE(msg_bytes);
    b_->rx.clear();
    uint64_t next = 0;
    int bad = 0;
    b_->on_rx = [&](const Completion& c) {
      if (c.len != msg_bytes || check_pattern(c.rx, c.len, next) != SIZE_MAX) ++bad;
      ++next;
    };
    std::vector<std::byte> buf(msg_bytes);
    uint64_t accepted = 0;
    for (; accepted < 10000; ++accepted) {
      fill_pattern(buf.data(), buf.size(), accepted);
      WorkRequest wr = send_wr(accepted, buf.data(), buf.size());
      auto r = ab_->post(std::span<const WorkRequest>(&wr, 1));
      ASSERT_TRUE(r.is_ok()) << r.status().name();
      if (*r == 0) break;
    }
    ASSERT_GT(accepted, 0u);
    ASSERT_LT(accepted, 10000u) << "no back-pressure";
    // Still refused while nobody polls; an empty post is fine.
    WorkRequest wr = send_wr(accepted, buf.data(), buf.size());
    auto r = ab_->post(std::span<const WorkRequest>(&wr, 1));
    ASSERT_TRUE(r.is_ok());
    EXPECT_EQ(*r, 0u);
    r = ab_->post({});
    ASSERT_TRUE(r.is_ok());
    EXPECT_EQ(*r, 0u);
    // kWrMustQueue goes through anyway.
    for (int i = 0; i < 3; ++i) {
      wr = send_wr(accepted, buf.data(), buf.size());
      wr.flags = kWrMustQueue;
      r = ab_->post(std::span<const WorkRequest>(&wr, 1));
      ASSERT_TRUE(r.is_ok());
      EXPECT_EQ(*r, 1u) << "a kWrMustQueue request was refused";
      fill_pattern(buf.data(), buf.size(), ++accepted);
    }
    EXPECT_TRUE(ab_->alive());
    ASSERT_TRUE(pump_until([&] { return next >= accepted; })) << next << " of " << accepted;
    pump_once();
    EXPECT_EQ(next, accepted);
    EXPECT_EQ(bad, 0);
    b_->on_rx = nullptr;
  }
}

// kWrMore holds a message until a post without it or flush(); every
// sequence delivers each message once, in order. (tcp once sent a message
// posted with kWrMore again and again, until its socket was full, when an
// earlier kWrMore message had gone out with a plain post but flush() had not
// run yet.)
TEST_P(TransportConformance, MoreFlagSequencesDeliverEachMessageOnce) {
  const uint8_t kMore = kWrMore, kNone = 0;
  const std::vector<std::vector<uint8_t>> sequences = {
      {kMore, kNone, kMore},
      {kMore, kNone, kMore, kMore, kNone},
      {kMore, kMore, kNone, kMore},
      {kNone, kMore, kNone, kMore},
  };
  uint64_t seq = 0;
  for (const auto& flags : sequences) {
    for (bool flush_between : {false, true}) {
      b_->rx.clear();
      const uint64_t first = seq;
      for (uint8_t f : flags) {
        auto msg = pattern(100, seq++);
        WorkRequest wr = send_wr(0, msg.data(), msg.size());
        wr.flags = f;
        ASSERT_TRUE(post_one(ab_.get(), wr).is_ok());
        if (flush_between) a_->t->flush();
      }
      a_->t->flush();
      ASSERT_TRUE(pump_until([&] { return b_->rx.size() >= flags.size(); }));
      for (int i = 0; i < 20; ++i) pump_once();  // nothing more may come
      ASSERT_EQ(b_->rx.size(), flags.size());
      for (size_t i = 0; i < flags.size(); ++i) {
        EXPECT_EQ(b_->rx[i].data, pattern(100, first + i)) << i;
      }
    }
  }
}

// kWrDeferred (an idle-class poster): every transport delivers deferred
// posts, small and large, mixed with plain and kWrMore ones, each once and
// in order, by the flush() after them at the latest.
TEST_P(TransportConformance, DeferredPostsArriveInOrderByTheFlush) {
  const size_t big = std::min<size_t>(caps().max_msg, size_t{1} << 20);
  const std::vector<std::pair<size_t, uint8_t>> posts = {
      {100, kWrDeferred}, {big, kWrDeferred},  {100, 0}, {64, kWrMore}, {big, kWrDeferred},
      {100, kWrDeferred}, {4096, kWrDeferred}, {100, 0}};
  std::vector<std::vector<std::byte>> msgs;
  for (size_t i = 0; i < posts.size(); ++i) {
    msgs.push_back(pattern(posts[i].first, 500 + i));
    WorkRequest wr = send_wr(i, msgs.back().data(), msgs.back().size());
    wr.flags = posts[i].second;
    ASSERT_TRUE(post_one(ab_.get(), wr).is_ok()) << i;
  }
  a_->t->flush();
  ASSERT_TRUE(pump_until([&] { return b_->rx.size() >= posts.size(); }));
  for (int i = 0; i < 20; ++i) pump_once();  // nothing more may come
  ASSERT_EQ(b_->rx.size(), posts.size());
  for (size_t i = 0; i < posts.size(); ++i) EXPECT_EQ(b_->rx[i].data, msgs[i]) << i;
}

// --- Placement: kWrite into memory the peer registered (Caps::placement) ---

// Receive a kWrite of each size, then a kSend on the same endpoint / Expect
// the bytes in place (and nothing around them touched) when the kSend arrives.
TEST_P(TransportConformance, PlacedWriteIsInPlaceWhenTheNextSendArrives) {
  if (!caps().placement) GTEST_SKIP() << GetParam().name << " has no placement";
  for (size_t len :
       {size_t{0}, size_t{1}, size_t{4095}, size_t{64} << 10, size_t{1} << 20, size_t{8} << 20}) {
    SCOPED_TRACE(len);
    Target* t = register_target(b_, len);
    auto src = pattern(len, len + 40);
    const uint64_t seq = len + 1;
    int got = 0;
    size_t placed_at = 0, guards_at = 0;
    uint64_t marker = 0;
    b_->on_rx = [&](const Completion& c) {
      if (got++ > 0 || c.len != sizeof(marker)) return;
      std::memcpy(&marker, c.rx, sizeof(marker));
      placed_at = check_pattern(t->at, len, len + 40);
      guards_at = check_guards(*t);
    };
    WorkRequest wrs[2] = {write_wr(*t, 0x100 + len, src.data(), len, t->at),
                          send_wr(2, reinterpret_cast<const std::byte*>(&seq), sizeof(seq))};
    wrs[0].flags = kWrSignaled;
    ASSERT_TRUE(post_all(ab_.get(), wrs).is_ok());
    std::fill(src.begin(), src.end(), std::byte{0xee});  // the post no longer needs it
    ASSERT_TRUE(pump_until([&] { return got > 0 && has_done(0x100 + len); }));
    pump_once();
    EXPECT_EQ(got, 1) << "a write produced a completion at its target";
    EXPECT_EQ(marker, seq);
    EXPECT_EQ(placed_at, SIZE_MAX) << "not in place when the next message arrived";
    EXPECT_EQ(guards_at, SIZE_MAX) << "a byte outside the target changed";
    EXPECT_TRUE(ab_->alive());
    b_->on_rx = nullptr;
    deregister(t);
  }
}

// Receive kWrites of varying sizes, each followed by a kSend naming it, in
// batches, corked or not, from one or two sges / Expect each kSend to find its
// write's bytes in place. Write i goes to slot i % kSlots: a later write into
// the same slot cannot be placed before the kSend is handed out, since one
// poll of the harness returns at most 32 completions, and each write in
// between is followed by a kSend.
TEST_P(TransportConformance, PlacedWritesInterleavedWithSendsKeepOrder) {
  if (!caps().placement) GTEST_SKIP() << GetParam().name << " has no placement";
  constexpr int kCount = 300;
  constexpr size_t kMax = 1u << 20;
  constexpr int kSlots = 40;
  Target* t = register_target(b_, kSlots * kMax);
  auto slot = [&](uint64_t i) { return t->at + (i % kSlots) * kMax; };
  std::mt19937_64 rng(0x51ace);
  std::vector<size_t> sizes(kCount);
  for (auto& n : sizes) {
    uint64_t r = rng();
    n = r % 13 == 0 ? kMax : r % 5 == 0 ? r % (kMax + 1) : r % 9000;
  }
  int got = 0;
  std::vector<std::string> bad;
  b_->on_rx = [&](const Completion& c) {
    uint64_t i = 0;
    if (c.len == sizeof(i)) std::memcpy(&i, c.rx, sizeof(i));
    if (c.len != sizeof(i) || i != static_cast<uint64_t>(got)) {
      bad.push_back("message " + std::to_string(got) + " out of order");
    } else {
      size_t at = check_pattern(slot(i), sizes[i], 1000 + i);
      if (at != SIZE_MAX) {
        bad.push_back("write " + std::to_string(i) + " not in place at byte " + std::to_string(at));
      }
    }
    ++got;
  };
  std::vector<uint64_t> seqs(kCount);
  for (int i = 0; i < kCount;) {
    // Up to 4 (write, send) pairs per post.
    std::vector<WorkRequest> wrs;
    std::vector<std::vector<std::byte>> keep;
    int batch = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < batch && i < kCount; ++k, ++i) {
      keep.push_back(pattern(sizes[i], 1000 + i));
      seqs[i] = static_cast<uint64_t>(i);
      wrs.push_back(write_wr(*t, 0, keep.back().data(), sizes[i], slot(i), 1 + i % 2));
      wrs.push_back(send_wr(0, reinterpret_cast<const std::byte*>(&seqs[i]), sizeof(uint64_t)));
      if (i % 3 == 0) {
        wrs[wrs.size() - 2].flags = kWrMore;
        wrs.back().flags = kWrMore;
      }
    }
    ASSERT_TRUE(post_all(ab_.get(), wrs).is_ok()) << i;
    if (rng() % 2) a_->t->flush();
    pump_once();
  }
  a_->t->flush();
  ASSERT_TRUE(pump_until([&] { return got >= kCount; }, Deadline::after_ms(4 * kWaitMs)))
      << "received " << got << " of " << kCount;
  for (int i = 0; i < 20; ++i) pump_once();  // nothing more may come
  EXPECT_EQ(got, kCount);
  for (size_t k = 0; k < bad.size() && k < 10; ++k) ADD_FAILURE() << bad[k];
  EXPECT_TRUE(bad.empty()) << bad.size() << " bad";
  EXPECT_EQ(check_guards(*t), SIZE_MAX);
  b_->on_rx = nullptr;
}

#ifdef LTIER_CONFORMANCE_RC
// Built into tests/rdma's binary, which runs where an RDMA device is (the
// Soft-RoCE guest).
INSTANTIATE_TEST_SUITE_P(
    Transports, TransportConformance,
    ::testing::Values(TransportKind{"rc", &make_rc, &rc_peer},
                      TransportKind{"rc_small_ring", &make_rc_small_ring, &rc_peer, true},
                      TransportKind{"ud", &make_ud, &ud_peer},
                      TransportKind{"ud_lossy", &make_ud_lossy, &ud_peer, true}),
#else
INSTANTIATE_TEST_SUITE_P(
    Transports, TransportConformance,
    ::testing::Values(TransportKind{"tcp", &make_tcp}, TransportKind{"shm", &make_shm, &shm_peer},
                      TransportKind{"shm_small_ring", &make_shm_small_ring, &shm_peer, true}),
#endif
    [](const ::testing::TestParamInfo<TransportKind>& info) {
      return std::string(info.param.name);
    });

// tcp only: what arrives on the listening port from something that is not an
// ltier transport. "Receive X / Expect Y": a raw socket writes X; the
// transport must close that socket and keep serving node 1.

}  // namespace
}  // namespace lt::transport::test
