// Transport conformance suite (docs/STYLE.md section 6): every transport runs the
// same tests through the Transport interface, made by a factory function, and
// skips what its Caps rule out with GTEST_SKIP() << why. A new transport adds
// one TransportKind to the INSTANTIATE_TEST_SUITE_P list (after the TEST_Ps).
//
// The tests drive every transport of a test from one thread: each wait pumps
// all of them (poll + release_rx), since a stream transport may need its
// sender polled to flush its backlog. Every wait has a Deadline; no test
// asserts a timing.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/config.h"
#include "common/net.h"
#include "common/time.h"
#include "common/wire.h"
#include "transport/factory.h"
#include "transport/transport.h"

namespace lt::transport {
namespace {

constexpr uint64_t kToken = 0x5eed5eed12345678ull;
constexpr uint64_t kWaitMs = 10000;  // generous: a guard against hangs, never a timing
constexpr uint32_t kTestMaxMsg = 4u << 20;

using Factory = Result<std::unique_ptr<Transport>> (*)();
// The address book entry of `node` with `address` (local_address() of its
// transport) in the field this kind of transport reads.
using PeerFn = PeerInfo (*)(NodeId node, const std::string& address);

PeerInfo tcp_peer(NodeId node, const std::string& address) {
  return PeerInfo{node, "", {{"tcp", address}}};
}
PeerInfo shm_peer(NodeId node, const std::string& address) {
  PeerInfo p;
  p.node = node;
  p.addresses = {{"shm", address}};
  return p;
}

struct TransportKind {
  const char* name;
  Factory make;
  PeerFn peer = &tcp_peer;
  bool small_queue = false;  // back-pressure comes after a few hundred KiB
};

// Names the parameter in test output ("GetParam() = tcp").
void PrintTo(const TransportKind& k, std::ostream* os) { *os << k.name; }

Result<std::unique_ptr<Transport>> make_tcp() {
  TcpConfig c;
  c.listen = "127.0.0.1:0";
  c.max_msg_bytes = kTestMaxMsg;  // keeps the over-max_msg test small
  return make_tcp_transport(c);
}

// Small socket buffers and send backlog, so back-pressure comes quickly.
constexpr uint32_t kSmallQueue = 64 * 1024;
Result<std::unique_ptr<Transport>> make_tcp_small_queue() {
  TcpConfig c;
  c.listen = "127.0.0.1:0";
  c.max_msg_bytes = kTestMaxMsg;
  c.sndbuf_bytes = kSmallQueue;
  c.rcvbuf_bytes = kSmallQueue;
  c.max_queued_bytes = kSmallQueue;
  return make_tcp_transport(c);
}

Result<std::unique_ptr<Transport>> make_shm() {
  ShmConfig c;
  c.max_msg_bytes = kTestMaxMsg;
  return make_shm_transport(c);
}

// A 16 KiB ring: wrap-around, padding, fragmentation (messages above 4 KiB)
// and back-pressure all happen within a few messages.
constexpr uint32_t kSmallRing = 16 * 1024;
Result<std::unique_ptr<Transport>> make_shm_small_ring() {
  ShmConfig c;
  c.max_msg_bytes = kTestMaxMsg;
  c.ring_bytes = kSmallRing;
  return make_shm_transport(c);
}

// Deterministic message contents: byte j of the message with `seed`.
uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

void fill_pattern(std::byte* p, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v = splitmix64(seed * 0x100000001b3ull + i / 8);
    std::memcpy(p + i, &v, std::min<size_t>(8, n - i));
  }
}

std::vector<std::byte> pattern(size_t n, uint64_t seed) {
  std::vector<std::byte> v(n);
  fill_pattern(v.data(), n, seed);
  return v;
}

// Index of the first byte that differs from the pattern, or SIZE_MAX.
size_t check_pattern(const std::byte* p, size_t n, uint64_t seed) {
  std::byte block[8];
  for (size_t i = 0; i < n; i += 8) {
    size_t k = std::min<size_t>(8, n - i);
    uint64_t v = splitmix64(seed * 0x100000001b3ull + i / 8);
    std::memcpy(block, &v, k);
    for (size_t j = 0; j < k; ++j) {
      if (block[j] != p[i + j]) return i + j;
    }
  }
  return SIZE_MAX;
}

// kWrite, kWriteImm or kRead of [local, local + len) at byte `offset` of the
// region `rkey` (transport.h RemoteRef).
WorkRequest rdma_wr(Op op, uint64_t wr_id, const std::byte* local, size_t len, uint64_t offset,
                    uint64_t rkey) {
  WorkRequest wr;
  wr.op = op;
  wr.wr_id = wr_id;
  wr.num_sge = 1;
  wr.sge[0] = Sge{local, static_cast<uint32_t>(len), 0};
  wr.remote = RemoteRef{offset, rkey};
  return wr;
}

// kFetchAdd (operand) or kCmpSwap (compare, operand); the old value lands in *old.
WorkRequest atomic_wr(Op op, uint64_t* old, uint64_t offset, uint64_t rkey, uint64_t compare,
                      uint64_t operand) {
  WorkRequest wr = rdma_wr(op, 0, reinterpret_cast<const std::byte*>(old), 8, offset, rkey);
  wr.compare = compare;
  wr.operand = operand;
  return wr;
}

WorkRequest send_wr(uint64_t wr_id, const std::byte* p, size_t len, int num_sge = 1) {
  WorkRequest wr;
  wr.op = Op::kSend;
  wr.wr_id = wr_id;
  if (num_sge == 1) {
    wr.num_sge = 1;
    wr.sge[0] = Sge{p, static_cast<uint32_t>(len), 0};
  } else {
    size_t first = len / 3;
    wr.num_sge = 2;
    wr.sge[0] = Sge{p, static_cast<uint32_t>(first), 0};
    wr.sge[1] = Sge{p + first, static_cast<uint32_t>(len - first), 0};
  }
  return wr;
}

struct Received {
  NodeId peer;
  uint32_t imm;
  std::vector<std::byte> data;
};

// Memory of one side that peers kWrite into (Caps::placement): `len` bytes at
// `at`. The registration also covers kGuard bytes on each side of the target
// (in bounds, but no write aims there), and kGuard more bytes on each side lie
// outside it; all of them start as kGuardByte.
constexpr size_t kGuard = 64;
constexpr std::byte kGuardByte{0xa5};
struct Side;
struct Target {
  Side* owner = nullptr;
  std::vector<std::byte> buf;
  std::byte* at = nullptr;
  size_t len = 0;
  MemRegion mr;
  bool registered = false;
  std::byte* reg_begin() { return buf.data() + kGuard; }
  std::byte* reg_end() { return at + len + kGuard; }
};

// Index (into buf) of the first guard byte that is not kGuardByte, or SIZE_MAX.
size_t check_guards(const Target& t) {
  size_t after = 2 * kGuard + t.len;
  for (size_t i = 0; i < t.buf.size(); ++i) {
    if ((i < 2 * kGuard || i >= after) && t.buf[i] != kGuardByte) return i;
  }
  return SIZE_MAX;
}

// One engine's transport plus what its polls produced.
struct Side {
  NodeId node = kNoNode;
  std::unique_ptr<Transport> t;
  std::vector<Received> rx;
  std::vector<NodeId> lost;
  std::vector<uint64_t> send_done;
  std::vector<Status> lost_status;
  // When set, called for each kRecv instead of copying it into `rx`.
  std::function<void(const Completion&)> on_rx;
};

class TransportHarness : public ::testing::Test {
 protected:
  explicit TransportHarness(Factory make, PeerFn peer = &tcp_peer) : make_(make), peer_(peer) {}
  ~TransportHarness() override {
    for (auto& t : targets_) deregister(t.get());
  }

  PeerInfo peer_info(NodeId node, const std::string& address) const { return peer_(node, address); }

  // A transport that has joined as `node` with `token` (kNoNode: not joined).
  Side* add_side(NodeId node, uint64_t token = kToken) {
    auto t = make_();
    EXPECT_TRUE(t.is_ok()) << t.status().name();
    if (!t.is_ok()) return nullptr;
    auto s = std::make_unique<Side>();
    s->node = node;
    s->t = std::move(t).value();
    if (node != kNoNode) s->t->set_identity(node, token);
    sides_.push_back(std::move(s));
    return sides_.back().get();
  }

  std::unique_ptr<Endpoint> connect(Side* from, const Side* to) {
    auto ep =
        from->t->connect(peer_info(to->node, to->t->local_address()), Deadline::after_ms(kWaitMs));
    EXPECT_TRUE(ep.is_ok()) << ep.status().name();
    if (!ep.is_ok()) return nullptr;
    EXPECT_EQ((*ep)->peer(), to->node);
    return std::move(ep).value();
  }

  // Polls every live transport once; returns how many completions it saw.
  size_t pump_once() {
    size_t total = 0;
    for (auto& s : sides_) total += pump_side(s.get());
    return total;
  }

  // Polls one side's transport once; returns how many completions it saw.
  size_t pump_side(Side* s) {
    if (!s->t) return 0;
    std::array<Completion, 32> cq;
    size_t n = s->t->poll(cq);
    for (size_t i = 0; i < n; ++i) {
      const Completion& c = cq[i];
      switch (c.kind) {
        case CqKind::kRecv:
          if (s->on_rx) {
            s->on_rx(c);
          } else {
            s->rx.push_back(Received{c.peer, c.imm, std::vector<std::byte>(c.rx, c.rx + c.len)});
          }
          break;
        case CqKind::kPeerLost:
          s->lost.push_back(c.peer);
          s->lost_status.push_back(c.status);
          break;
        case CqKind::kSendDone:
          s->send_done.push_back(c.wr_id);
          break;
      }
    }
    s->t->release_rx(std::span<const Completion>(cq.data(), n));
    return n;
  }

  // Sleeps until some transport's wait_fd is readable, at most a few ms.
  void wait_any(Deadline d) {
    std::vector<pollfd> fds;
    for (auto& s : sides_) {
      if (s->t) fds.push_back(pollfd{s->t->wait_fd(), POLLIN, 0});
    }
    int ms = std::min(d.remaining_ms(), 5);
    if (ms > 0) ::poll(fds.data(), fds.size(), ms);
  }

  // Pumps until `done` holds; false at the deadline.
  bool pump_until(const std::function<bool()>& done, Deadline d = Deadline::after_ms(kWaitMs)) {
    for (;;) {
      if (done()) return true;
      if (d.expired()) return false;
      if (pump_once() == 0 && !done()) wait_any(d);
    }
  }

  // Posts all of `wrs`, pumping on back-pressure (a short count).
  Status post_all(Endpoint* ep, std::span<const WorkRequest> wrs,
                  Deadline d = Deadline::after_ms(kWaitMs)) {
    while (!wrs.empty()) {
      auto r = ep->post(wrs);
      if (!r.is_ok()) return r.status();
      wrs = wrs.subspan(*r);
      if (*r == 0) {
        if (d.expired()) return Code::kTimedOut;
        if (pump_once() == 0) wait_any(d);
      }
    }
    return Status::ok();
  }

  Status post_one(Endpoint* ep, const WorkRequest& wr) {
    return post_all(ep, std::span<const WorkRequest>(&wr, 1));
  }

  // A Target of `len` bytes on `owner`, registered with `a`.
  Target* register_target(Side* owner, size_t len, Access a = Access::kRemoteWrite) {
    auto t = std::make_unique<Target>();
    t->owner = owner;
    t->buf.assign(len + 4 * kGuard, kGuardByte);
    t->at = t->buf.data() + 2 * kGuard;
    t->len = len;
    auto mr = owner->t->register_memory(std::span<std::byte>(t->reg_begin(), t->reg_end()), a);
    EXPECT_TRUE(mr.is_ok()) << mr.status().name();
    if (mr.is_ok()) {
      t->mr = *mr;
      t->registered = true;
    }
    targets_.push_back(std::move(t));
    return targets_.back().get();
  }

  void deregister(Target* t) {
    if (t->registered && t->owner->t) t->owner->t->deregister_memory(t->mr);
    t->registered = false;
  }

  // A kWrite of [src, src + len) to `dst` in the memory of `t`, gathered from
  // `num_sge` sges.
  static WorkRequest write_wr(const Target& t, uint64_t wr_id, const std::byte* src, size_t len,
                              const std::byte* dst, int num_sge = 1) {
    WorkRequest wr = send_wr(wr_id, src, len, num_sge);
    wr.op = Op::kWrite;
    wr.remote = RemoteRef{reinterpret_cast<uintptr_t>(dst), t.mr.rkey};
    return wr;
  }

  bool has_done(uint64_t wr_id) const {
    for (auto& s : sides_) {
      if (std::find(s->send_done.begin(), s->send_done.end(), wr_id) != s->send_done.end()) {
        return true;
      }
    }
    return false;
  }

  static bool has(const std::vector<NodeId>& v, NodeId n) {
    return std::find(v.begin(), v.end(), n) != v.end();
  }

  Factory make_;
  PeerFn peer_;
  std::vector<std::unique_ptr<Side>> sides_;
  std::vector<std::unique_ptr<Target>> targets_;
};

class TransportConformance : public TransportHarness,
                             public ::testing::WithParamInterface<TransportKind> {
 protected:
  TransportConformance() : TransportHarness(GetParam().make, GetParam().peer) {}

  // Two joined transports, 1 connected to 2.
  void SetUp() override {
    a_ = add_side(1);
    b_ = add_side(2);
    ASSERT_NE(a_, nullptr);
    ASSERT_NE(b_, nullptr);
    ab_ = connect(a_, b_);
    ASSERT_NE(ab_, nullptr);
  }

  void TearDown() override {
    for (auto& [side, mr] : regions_) {
      if (side->t) side->t->free_memory(mr);
    }
  }

  const Caps& caps() const { return a_->t->caps(); }

  void concurrent_posters(bool corked);

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
  Side* a_ = nullptr;
  Side* b_ = nullptr;
  std::unique_ptr<Endpoint> ab_;
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
  auto again = a_->t->connect(peer_info(2, b_address), Deadline::after_ms(kWaitMs));
  ASSERT_FALSE(again.is_ok());
  EXPECT_EQ(again.status().code(), Code::kPeerDown);
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
  auto ep = a_->t->connect(peer_info(3, address), Deadline::after_ms(kWaitMs));
  ASSERT_FALSE(ep.is_ok());
  EXPECT_EQ(ep.status().code(), Code::kPeerDown);
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

TEST_P(TransportConformance, OneSidedRightsAreChecked) {
  if (!caps().one_sided) GTEST_SKIP() << GetParam().name << " has no native one-sided ops";
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

// Several threads post to one endpoint while this thread polls: each thread's
// messages arrive whole and in its order.
// Three threads post at once (with kWrMore on two of every three posts when
// `corked`, as rpc_async does; the main thread, the poster's poller, calls
// flush() like the engine after each batch): every message arrives exactly
// once, each thread's in order.
void TransportConformance::concurrent_posters(bool corked) {
  constexpr uint32_t kThreads = 3, kPerThread = 3000;
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
    if (hdr[0] >= kThreads || hdr[1] != next[hdr[0]] || body != hdr[1] % 700 ||
        check_pattern(c.rx + sizeof(hdr), body, uint64_t{hdr[0]} << 32 | hdr[1]) != SIZE_MAX) {
      ++bad;
      return;
    }
    ++next[hdr[0]];
  };
  std::atomic<int> failed{0};
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([this, t, corked, &failed] {
      std::vector<std::byte> buf(8 + 700);
      for (uint32_t i = 0; i < kPerThread; ++i) {
        uint32_t hdr[2] = {t, i};
        std::memcpy(buf.data(), hdr, sizeof(hdr));
        size_t body = i % 700;
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

INSTANTIATE_TEST_SUITE_P(
    Transports, TransportConformance,
    ::testing::Values(TransportKind{"tcp", &make_tcp}, TransportKind{"shm", &make_shm, &shm_peer},
                      TransportKind{"shm_small_ring", &make_shm_small_ring, &shm_peer, true}),
    [](const ::testing::TestParamInfo<TransportKind>& info) {
      return std::string(info.param.name);
    });

// tcp only: what arrives on the listening port from something that is not an
// ltier transport. "Receive X / Expect Y": a raw socket writes X; the
// transport must close that socket and keep serving node 1.
class TcpWireTest : public TransportHarness {
 protected:
  explicit TcpWireTest(Factory make = &make_tcp) : TransportHarness(make) {}

  void SetUp() override {
    a_ = add_side(1);
    b_ = add_side(2);
    ASSERT_NE(a_, nullptr);
    ASSERT_NE(b_, nullptr);
    ab_ = connect(a_, b_);
    ASSERT_NE(ab_, nullptr);
  }

  net::Fd raw_connect() {
    std::string host;
    uint16_t port = 0;
    sockaddr_in addr{};
    EXPECT_TRUE(parse_host_port(b_->t->local_address(), &host, &port).is_ok());
    EXPECT_TRUE(net::resolve(host, port, &addr).is_ok());
    auto fd = net::connect_tcp(addr, Deadline::after_ms(kWaitMs));
    EXPECT_TRUE(fd.is_ok()) << fd.status().name();
    return fd.is_ok() ? std::move(fd).value() : net::Fd();
  }

  // Pumps until the transport closes `fd` (read returns 0).
  bool closed_by_peer(const net::Fd& fd) {
    bool eof = false;
    pump_until([&] {
      char c;
      ssize_t r = ::recv(fd.get(), &c, 1, MSG_DONTWAIT);
      if (r == 0) eof = true;
      if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        ADD_FAILURE() << "read on the raw socket: " << strerror(errno);
        return true;
      }
      return eof;
    });
    return eof;
  }

  void expect_node1_still_served() {
    size_t before = b_->rx.size();
    auto msg = pattern(300, 99);
    ASSERT_TRUE(post_one(ab_.get(), send_wr(1, msg.data(), msg.size())).is_ok());
    ASSERT_TRUE(pump_until([&] { return b_->rx.size() > before; }));
    EXPECT_EQ(b_->rx.back().peer, 1u);
    EXPECT_EQ(b_->rx.back().data, msg);
    EXPECT_TRUE(ab_->alive());
  }

  static std::string frame(wire::FrameKind kind, const std::string& body, uint32_t imm = 0) {
    wire::FrameHeader h = wire::make_frame(kind, static_cast<uint32_t>(body.size()), imm);
    return std::string(reinterpret_cast<const char*>(&h), sizeof(h)) + body;
  }

  // The kHello body, encoded by hand from the wire format: u32 node,
  // u32 reserved, u64 cluster token.
  static std::string hello(uint32_t node, uint64_t token, uint32_t reserved = 0) {
    std::string body;
    wire::Writer w(&body);
    w.u32(node);
    w.u32(reserved);
    w.u64(token);
    return frame(wire::FrameKind::kHello, body);
  }

  Side* a_ = nullptr;
  Side* b_ = nullptr;
  std::unique_ptr<Endpoint> ab_;
};

TEST_F(TcpWireTest, GarbageIsDroppedAndOthersStayServed) {
  net::Fd raw = raw_connect();
  ASSERT_TRUE(raw.valid());
  std::string garbage = "GET / HTTP/1.1\r\nHost: ltier\r\n\r\n" + std::string(64, '\xa5');
  ASSERT_TRUE(net::write_all(raw.get(), garbage.data(), garbage.size(), Deadline::after_ms(kWaitMs))
                  .is_ok());
  EXPECT_TRUE(closed_by_peer(raw)) << "the garbage connection was never closed";
  expect_node1_still_served();
  EXPECT_TRUE(b_->lost.empty());
}

TEST_F(TcpWireTest, RandomGarbageIsDropped) {
  std::mt19937_64 rng(0xbad);
  for (int i = 0; i < 20; ++i) {
    net::Fd raw = raw_connect();
    ASSERT_TRUE(raw.valid());
    std::string garbage(16 + rng() % 200, '\0');
    for (auto& ch : garbage) ch = static_cast<char>(rng());
    ASSERT_TRUE(
        net::write_all(raw.get(), garbage.data(), garbage.size(), Deadline::after_ms(kWaitMs))
            .is_ok());
    EXPECT_TRUE(closed_by_peer(raw)) << "garbage #" << i;
  }
  expect_node1_still_served();
  EXPECT_TRUE(b_->rx.size() == 1);
}

TEST_F(TcpWireTest, BadHellosAreDropped) {
  struct Case {
    const char* what;
    std::string bytes;
  };
  std::string short_body(15, '\0'), long_body(17, '\0');
  Case cases[] = {
      {"data before hello", frame(wire::FrameKind::kData, "abc")},
      {"control before hello", frame(wire::FrameKind::kControl, "\x06")},
      {"wrong token", hello(9, kToken + 1)},
      {"zero token", hello(9, 0)},
      {"node 0", hello(0, kToken)},
      {"own node id", hello(2, kToken)},
      {"reserved set", hello(9, kToken, 1)},
      {"short hello body", frame(wire::FrameKind::kHello, short_body)},
      {"long hello body", frame(wire::FrameKind::kHello, long_body)},
  };
  for (const auto& c : cases) {
    net::Fd raw = raw_connect();
    ASSERT_TRUE(raw.valid());
    // A valid frame after it would be delivered if the hello were accepted.
    std::string bytes = c.bytes + frame(wire::FrameKind::kData, "should not arrive");
    ASSERT_TRUE(
        net::write_all(raw.get(), bytes.data(), bytes.size(), Deadline::after_ms(kWaitMs)).is_ok());
    EXPECT_TRUE(closed_by_peer(raw)) << c.what;
    EXPECT_TRUE(b_->rx.empty()) << c.what;
    EXPECT_TRUE(b_->lost.empty()) << c.what;
  }
  expect_node1_still_served();
}

TEST_F(TcpWireTest, HelloThenDataIsDelivered) {
  net::Fd raw = raw_connect();
  ASSERT_TRUE(raw.valid());
  std::string bytes = hello(9, kToken) + frame(wire::FrameKind::kData, "ping") +
                      frame(wire::FrameKind::kDataImm, "pong", 42);
  ASSERT_TRUE(
      net::write_all(raw.get(), bytes.data(), bytes.size(), Deadline::after_ms(kWaitMs)).is_ok());
  ASSERT_TRUE(pump_until([&] { return b_->rx.size() == 2; }));
  EXPECT_EQ(b_->rx[0].peer, 9u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(b_->rx[0].data.data()), 4), "ping");
  EXPECT_EQ(b_->rx[0].imm, 0u);
  EXPECT_EQ(b_->rx[1].imm, 42u);
  // The reply path reuses the raw connection: node 2 answers node 9 on it.
  auto ep = b_->t->connect(PeerInfo{9, "", {}}, Deadline::after_ms(kWaitMs));
  ASSERT_TRUE(ep.is_ok()) << ep.status().name();
  std::string reply = "ok!";
  ASSERT_TRUE(post_one(ep->get(),
                       send_wr(1, reinterpret_cast<const std::byte*>(reply.data()), reply.size()))
                  .is_ok());
  std::string want = frame(wire::FrameKind::kData, reply);
  std::string got;
  ASSERT_TRUE(pump_until([&] {
    char buf[256];
    ssize_t r = ::recv(raw.get(), buf, sizeof(buf), MSG_DONTWAIT);
    if (r > 0) got.append(buf, static_cast<size_t>(r));
    return got.size() >= want.size() || r == 0;
  })) << "got "
      << got.size() << " bytes";
  EXPECT_EQ(got, want);
}

TEST_F(TcpWireTest, BadFrameAfterHelloLosesThatPeer) {
  struct Case {
    const char* what;
    std::string bytes;
  };
  wire::FrameHeader too_long = wire::make_frame(wire::FrameKind::kData, kTestMaxMsg + 1);
  Case cases[] = {
      {"second hello", hello(9, kToken)},
      {"control frame", frame(wire::FrameKind::kControl, "\x06")},
      {"length above max_msg",
       std::string(reinterpret_cast<const char*>(&too_long), sizeof(too_long))},
      {"garbage header", std::string(16, 'g')},
  };
  for (const auto& c : cases) {
    b_->lost.clear();
    b_->rx.clear();
    net::Fd raw = raw_connect();
    ASSERT_TRUE(raw.valid());
    std::string bytes = hello(9, kToken) + frame(wire::FrameKind::kData, "first") + c.bytes;
    ASSERT_TRUE(
        net::write_all(raw.get(), bytes.data(), bytes.size(), Deadline::after_ms(kWaitMs)).is_ok());
    EXPECT_TRUE(closed_by_peer(raw)) << c.what;
    ASSERT_TRUE(pump_until([&] { return has(b_->lost, 9); })) << c.what;
    ASSERT_EQ(b_->rx.size(), 1u) << c.what;
    EXPECT_EQ(b_->rx[0].peer, 9u) << c.what;
  }
  expect_node1_still_served();
}

TEST_F(TcpWireTest, FrameSplitIntoBytesReassembles) {
  net::Fd raw = raw_connect();
  ASSERT_TRUE(raw.valid());
  auto payload = pattern(1000, 20);
  std::string bytes =
      hello(9, kToken) +
      frame(wire::FrameKind::kData,
            std::string(reinterpret_cast<const char*>(payload.data()), payload.size()));
  for (size_t i = 0; i < bytes.size(); i += 7) {
    std::string piece = bytes.substr(i, 7);
    ASSERT_TRUE(
        net::write_all(raw.get(), piece.data(), piece.size(), Deadline::after_ms(kWaitMs)).is_ok());
    pump_once();
  }
  ASSERT_TRUE(pump_until([&] { return !b_->rx.empty(); }));
  EXPECT_EQ(b_->rx[0].peer, 9u);
  EXPECT_EQ(b_->rx[0].data, payload);
}

// Before its hello a connection is nobody: a header announcing a large frame
// must be refused at the header, not after buffering up to max_msg bytes.
// Disabled: read_conn() grows rx_ to 16 + length before it checks that the
// first frame is a 16-byte kHello, so any unauthenticated socket pins
// max_msg_bytes (64 MiB by default) of zero-filled memory.
TEST_F(TcpWireTest, LargeFrameBeforeHelloIsDroppedAtHeader) {
  net::Fd raw = raw_connect();
  ASSERT_TRUE(raw.valid());
  wire::FrameHeader h = wire::make_frame(wire::FrameKind::kData, kTestMaxMsg);
  ASSERT_TRUE(net::write_all(raw.get(), &h, sizeof(h), Deadline::after_ms(kWaitMs)).is_ok());
  EXPECT_TRUE(closed_by_peer(raw))
      << "an unidentified connection may make the node buffer " << kTestMaxMsg << " bytes";
}

// A second connection from the same node (two threads racing in connect(),
// or both ends dialling at once) closing is not the loss of that node while
// the first connection still works.
TEST_F(TcpWireTest, ClosingDuplicateConnectionIsNotPeerLost) {
  net::Fd first = raw_connect();
  net::Fd second = raw_connect();
  ASSERT_TRUE(first.valid());
  ASSERT_TRUE(second.valid());
  std::string one = hello(9, kToken) + frame(wire::FrameKind::kData, "one");
  std::string two = hello(9, kToken) + frame(wire::FrameKind::kData, "two");
  ASSERT_TRUE(
      net::write_all(first.get(), one.data(), one.size(), Deadline::after_ms(kWaitMs)).is_ok());
  ASSERT_TRUE(pump_until([&] { return b_->rx.size() == 1; }));
  ASSERT_TRUE(
      net::write_all(second.get(), two.data(), two.size(), Deadline::after_ms(kWaitMs)).is_ok());
  ASSERT_TRUE(pump_until([&] { return b_->rx.size() == 2; }));
  second.reset();
  std::string three = frame(wire::FrameKind::kData, "three");
  ASSERT_TRUE(
      net::write_all(first.get(), three.data(), three.size(), Deadline::after_ms(kWaitMs)).is_ok());
  ASSERT_TRUE(pump_until([&] { return b_->rx.size() == 3; }));
  for (int i = 0; i < 20; ++i) {
    pump_once();
    wait_any(Deadline::after_ms(1));
  }
  EXPECT_FALSE(has(b_->lost, 9)) << "node 9 reported lost while its first connection works";
}

// tcp back-pressure: a receiver that does not poll makes the sender's backlog
// pass max_queued_bytes; post then accepts nothing until progress is made.
class TcpBackPressureTest : public TcpWireTest {
 protected:
  TcpBackPressureTest() : TcpWireTest(&make_tcp_small_queue) {}

  static constexpr size_t kMsgBytes = 16 * 1024;

  // Posts numbered messages without polling anyone until post returns a
  // short count; returns how many were accepted (0 on failure).
  int fill_until_back_pressure() {
    std::vector<std::byte> buf(kMsgBytes);
    for (int i = 0; i < 10000; ++i) {
      fill_pattern(buf.data(), buf.size(), static_cast<uint64_t>(i));
      WorkRequest wr = send_wr(static_cast<uint64_t>(i), buf.data(), buf.size());
      auto r = ab_->post(std::span<const WorkRequest>(&wr, 1));
      EXPECT_TRUE(r.is_ok()) << r.status().name();
      if (!r.is_ok()) return 0;
      if (*r == 0) return i;
    }
    ADD_FAILURE() << "no back-pressure after 10000 posts";
    return 0;
  }

  // Checks that messages arrive numbered 0, 1, 2, ... with their contents.
  void expect_in_order() {
    b_->on_rx = [this](const Completion& c) {
      uint64_t i = next_++;
      if (c.len != kMsgBytes || check_pattern(c.rx, c.len, i) != SIZE_MAX) ++bad_;
    };
  }

  uint64_t next_ = 0;
  int bad_ = 0;
};

TEST_F(TcpBackPressureTest, ShortCountThenRecovers) {
  expect_in_order();
  int accepted = fill_until_back_pressure();
  ASSERT_GT(accepted, 0);
  // Still pushing back while nobody polls.
  std::vector<std::byte> buf(kMsgBytes);
  fill_pattern(buf.data(), buf.size(), static_cast<uint64_t>(accepted));
  WorkRequest wr = send_wr(1, buf.data(), buf.size());
  auto r = ab_->post(std::span<const WorkRequest>(&wr, 1));
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(*r, 0u);
  EXPECT_TRUE(ab_->alive());
  // Progress on both sides drains the backlog; the refused message goes through.
  ASSERT_TRUE(post_one(ab_.get(), wr).is_ok());
  ASSERT_TRUE(pump_until([&] { return next_ >= static_cast<uint64_t>(accepted) + 1; }))
      << "received " << next_ << " of " << accepted + 1;
  EXPECT_EQ(next_, static_cast<uint64_t>(accepted) + 1);
  EXPECT_EQ(bad_, 0);
}

TEST_F(TcpBackPressureTest, EmptyPostUnderBackPressure) {
  ASSERT_GT(fill_until_back_pressure(), 0);
  auto r = ab_->post({});
  ASSERT_TRUE(r.is_ok()) << r.status().name();
  EXPECT_EQ(*r, 0u);
}

TEST_F(TcpBackPressureTest, MustQueueIsNeverRefused) {
  expect_in_order();
  int accepted = fill_until_back_pressure();
  ASSERT_GT(accepted, 0);
  std::vector<std::byte> buf(kMsgBytes);
  for (int i = 0; i < 4; ++i) {
    uint64_t n = static_cast<uint64_t>(accepted + i);
    fill_pattern(buf.data(), buf.size(), n);
    WorkRequest wr = send_wr(n, buf.data(), buf.size());
    wr.flags = kWrMustQueue;
    auto r = ab_->post(std::span<const WorkRequest>(&wr, 1));
    ASSERT_TRUE(r.is_ok()) << r.status().name();
    EXPECT_EQ(*r, 1u) << "a kWrMustQueue request was refused for back-pressure";
  }
  ASSERT_TRUE(pump_until([&] { return next_ >= static_cast<uint64_t>(accepted) + 4; }));
  EXPECT_EQ(next_, static_cast<uint64_t>(accepted) + 4);
  EXPECT_EQ(bad_, 0);
}

// tcp placement: the per-poll read bound with a write being placed, kWrite
// frames from a raw socket, and deregistration while a write is placed.
class TcpPlacementTest : public TcpWireTest {
 protected:
  // More than one poll's worth: the tcp poller reads at most 4 MiB (and one
  // more recv) per connection per poll, placed bytes included.
  static constexpr size_t kBig = 8u << 20;
  static constexpr uint64_t kSeed = 61;
  static constexpr uint64_t kMarker = 0x3a3a3a3a;

  // Posts a kWrite of kBig bytes to t->at, then a kSend of kMarker.
  void post_big_write(Target* t) {
    auto src = pattern(kBig, kSeed);
    WorkRequest wrs[2] = {write_wr(*t, 0, src.data(), kBig, t->at),
                          send_wr(0, reinterpret_cast<const std::byte*>(&kMarker), 8)};
    ASSERT_TRUE(post_all(ab_.get(), wrs).is_ok());
  }

  bool marker_arrived() const {
    for (auto& r : b_->rx) {
      if (r.peer == 1 && r.data.size() == 8 && std::memcmp(r.data.data(), &kMarker, 8) == 0) {
        return true;
      }
    }
    return false;
  }

  // Polls node 1 and node 2 only (counting node 2's polls) until t holds the
  // start of the write but not its end.
  bool until_partly_placed(Target* t, int* b_polls) {
    auto head = pattern(8, kSeed);
    Deadline d = Deadline::after_ms(kWaitMs);
    while (!d.expired()) {
      size_t got = pump_side(a_) + pump_side(b_);
      ++*b_polls;
      bool started = std::memcmp(t->at, head.data(), 8) == 0;
      bool ended =
          std::any_of(t->at + kBig - 8, t->at + kBig, [](std::byte b) { return b != kGuardByte; });
      if (started && !ended) return true;
      if (started && ended) return false;
      if (got == 0) wait_any(d);
    }
    return false;
  }

  // The kWrite frame header and descriptor, encoded by hand: u64 addr, u64 rkey.
  static std::string write_frame(const void* addr, uint64_t rkey, const std::string& data,
                                 uint32_t length_delta = 0) {
    std::string desc;
    wire::Writer w(&desc);
    w.u64(reinterpret_cast<uintptr_t>(addr));
    w.u64(rkey);
    wire::FrameHeader h = wire::make_frame(
        wire::FrameKind::kWrite, static_cast<uint32_t>(desc.size() + data.size()) - length_delta);
    return std::string(reinterpret_cast<const char*>(&h), sizeof(h)) + desc + data;
  }

  static std::string str(const std::vector<std::byte>& v) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size());
  }
};

// tcp registrations are a table: each gets its own rkey, never reused (shm's
// placement rkeys name only the rights).
TEST_F(TcpPlacementTest, RegisterMemoryGivesFreshRkeys) {
  std::vector<std::byte> mem(4096);
  auto one = b_->t->register_memory(mem, Access::kRemoteWrite);
  auto two = b_->t->register_memory(mem, Access::kRemoteWrite);
  ASSERT_TRUE(one.is_ok() && two.is_ok());
  EXPECT_NE(one->rkey, 0u);
  EXPECT_NE(two->rkey, 0u);
  EXPECT_NE(one->rkey, two->rkey);
  b_->t->deregister_memory(*one);
  auto three = b_->t->register_memory(mem, Access::kRemoteWrite);
  ASSERT_TRUE(three.is_ok());
  EXPECT_NE(three->rkey, one->rkey) << "an rkey was reused";
  b_->t->deregister_memory(*two);
  b_->t->deregister_memory(*three);
  b_->t->deregister_memory(*three);  // twice: no effect
}

// Receive a kWrite the owner must refuse / Expect (tcp: the owner checks,
// like an RDMA responder; shm refuses at post instead) the connection broken on
// both sides (kPeerLost; later posts kPeerDown), the kSend after it never
// delivered, and no byte of the owner's memory changed.
TEST_F(TcpPlacementTest, RefusedWritesBreakTheConnection) {
  constexpr size_t kLen = 4096;
  Target* rw = register_target(b_, kLen);
  Target* ro = register_target(b_, kLen, Access::kRemoteRead);
  Target* gone = register_target(b_, kLen);
  deregister(gone);
  auto src = pattern(kLen, 50);
  const std::byte* reg_end = rw->reg_end();  // one past the registration
  const uintptr_t reg_begin = reinterpret_cast<uintptr_t>(rw->reg_begin());
  struct Case {
    const char* what;
    WorkRequest wr;
  };
  WorkRequest unknown = write_wr(*rw, 1, src.data(), 8, rw->at);
  unknown.remote.rkey = rw->mr.rkey ^ (uint64_t{1} << 40);
  WorkRequest zero_rkey = write_wr(*rw, 1, src.data(), 8, rw->at);
  zero_rkey.remote.rkey = 0;
  WorkRequest huge = write_wr(*rw, 1, src.data(), 64, rw->at);
  huge.remote.addr = UINT64_MAX - 8;
  Case cases[] = {
      {"unknown rkey", unknown},
      {"rkey 0", zero_rkey},
      {"deregistered rkey", write_wr(*gone, 1, src.data(), 8, gone->at)},
      {"no write right", write_wr(*ro, 1, src.data(), 8, ro->at)},
      {"across the end", write_wr(*rw, 1, src.data(), 64, reg_end - 10)},
      {"past the end", write_wr(*rw, 1, src.data(), 1, reg_end)},
      {"before the start", write_wr(*rw, 1, src.data(), 8, rw->reg_begin() - 4)},
      {"far before the start", write_wr(*rw, 1, src.data(), 8, nullptr)},
      {"wrapping address", huge},
      {"zero bytes past the end", write_wr(*rw, 1, src.data(), 0, reg_end + 1)},
      {"larger than the registration",
       write_wr(*rw, 1, src.data(), kLen, reinterpret_cast<std::byte*>(reg_begin))},
  };
  // The last case would fit if the registration were kLen: it is kLen + 2 * kGuard.
  cases[std::size(cases) - 1].wr.sge[0].len = kLen + 2 * kGuard + 1;
  std::vector<std::byte> big(kLen + 2 * kGuard + 1);
  cases[std::size(cases) - 1].wr.sge[0].addr = big.data();
  for (Target* t : {rw, ro, gone}) fill_pattern(t->buf.data(), t->buf.size(), 51);
  std::unique_ptr<Endpoint> ep = std::move(ab_);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    a_->lost.clear();
    b_->lost.clear();
    b_->rx.clear();
    if (!ep || !ep->alive()) ep = connect(a_, b_);
    ASSERT_NE(ep, nullptr);
    const uint64_t marker = 7;
    WorkRequest wrs[2] = {c.wr, send_wr(2, reinterpret_cast<const std::byte*>(&marker), 8)};
    ASSERT_TRUE(post_all(ep.get(), wrs).is_ok());
    ASSERT_TRUE(pump_until([&] { return has(a_->lost, 2) && has(b_->lost, 1); }));
    EXPECT_FALSE(ep->alive());
    auto r = ep->post(std::span<const WorkRequest>(&wrs[1], 1));
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), Code::kPeerDown);
    EXPECT_TRUE(b_->rx.empty()) << "the message after a refused write was delivered";
    for (Target* t : {rw, ro, gone}) {
      EXPECT_EQ(check_pattern(t->buf.data(), t->buf.size(), 51), SIZE_MAX) << "memory changed";
    }
  }
  // A new connection works, and so does the region.
  ep = connect(a_, b_);
  ASSERT_NE(ep, nullptr);
  WorkRequest ok[2] = {write_wr(*rw, 1, src.data(), 8, rw->at), send_wr(2, src.data(), 8)};
  ASSERT_TRUE(post_all(ep.get(), ok).is_ok());
  ASSERT_TRUE(pump_until([&] { return !b_->rx.empty(); }));
  EXPECT_EQ(std::memcmp(rw->at, src.data(), 8), 0);
}

// Receive an 8 MiB kWrite from node 1 while node 3 sends / Expect node 3's
// messages delivered by polls that return while the write is still being
// placed, the write's kSend only after all of it, across several polls.
TEST_F(TcpPlacementTest, PlacementSpansPollsWhileOthersProgress) {
  Side* c = add_side(3);
  ASSERT_NE(c, nullptr);
  auto cb = connect(c, b_);
  ASSERT_NE(cb, nullptr);
  auto x = pattern(100, 62), y = pattern(200, 63);
  ASSERT_TRUE(post_one(cb.get(), send_wr(0, x.data(), x.size())).is_ok());
  ASSERT_TRUE(pump_until([&] { return b_->rx.size() == 1; }));  // node 3 is known
  b_->rx.clear();
  Target* t = register_target(b_, kBig);
  post_big_write(t);
  ASSERT_TRUE(post_one(cb.get(), send_wr(0, x.data(), x.size())).is_ok());
  int b_polls = 0;
  ASSERT_TRUE(until_partly_placed(t, &b_polls));
  EXPECT_FALSE(marker_arrived()) << "a message overtook the write before it";
  ASSERT_EQ(b_->rx.size(), 1u) << "node 3 waited for node 1's write";
  EXPECT_EQ(b_->rx[0].peer, 3u);
  EXPECT_EQ(b_->rx[0].data, x);
  // One more poll of node 2 serves node 3 again, whatever node 1's write does.
  ASSERT_TRUE(post_one(cb.get(), send_wr(0, y.data(), y.size())).is_ok());
  pump_side(b_);
  ++b_polls;
  EXPECT_TRUE(std::any_of(b_->rx.begin(), b_->rx.end(), [&](const Received& r) {
    return r.peer == 3 && r.data == y;
  })) << "node 3 waited for node 1's write";
  Deadline d = Deadline::after_ms(kWaitMs);
  while (!marker_arrived() && !d.expired()) {
    if (pump_side(a_) + pump_side(b_) == 0 && !marker_arrived()) wait_any(d);
    ++b_polls;
  }
  ASSERT_TRUE(marker_arrived());
  EXPECT_GE(b_polls, 2);
  EXPECT_EQ(check_pattern(t->at, kBig, kSeed), SIZE_MAX);
  EXPECT_EQ(check_guards(*t), SIZE_MAX);
  EXPECT_TRUE(b_->lost.empty());
}

// Receive a write of many polls' worth, sleeping on wait_fd whenever both
// sides' polls return nothing, as the engine does / Expect it to arrive
// without a sleep running out: a placement never waits for a readiness edge
// that does not come.
TEST_F(TcpPlacementTest, LongPlacementNeedsNoSpinning) {
  constexpr size_t kHuge = 32u << 20;
  Target* t = register_target(b_, kHuge);
  auto src = pattern(kHuge, kSeed);
  WorkRequest wrs[2] = {write_wr(*t, 0, src.data(), kHuge, t->at),
                        send_wr(0, reinterpret_cast<const std::byte*>(&kMarker), 8)};
  ASSERT_TRUE(post_all(ab_.get(), wrs).is_ok());
  std::vector<pollfd> fds = {{a_->t->wait_fd(), POLLIN, 0}, {b_->t->wait_fd(), POLLIN, 0}};
  Deadline d = Deadline::after_ms(kWaitMs);
  int sleeps = 0, timeouts = 0;
  while (!marker_arrived() && !d.expired()) {
    if (pump_side(a_) + pump_side(b_) > 0) continue;
    ++sleeps;
    if (::poll(fds.data(), fds.size(), 2000) == 0) ++timeouts;
  }
  ASSERT_TRUE(marker_arrived());
  EXPECT_EQ(timeouts, 0) << "a 2 s sleep on wait_fd ran out (" << sleeps << " sleeps)";
  EXPECT_EQ(check_pattern(t->at, kHuge, kSeed), SIZE_MAX);
}

// Deregister a region while a write into it is half placed / Expect no byte
// of it to change afterwards, the connection broken, the kSend after the
// write never delivered.
TEST_F(TcpPlacementTest, DeregisterDuringPlacementStopsIt) {
  Target* t = register_target(b_, kBig);
  post_big_write(t);
  int polls = 0;
  ASSERT_TRUE(until_partly_placed(t, &polls));
  deregister(t);
  std::vector<std::byte> snapshot = t->buf;
  ASSERT_TRUE(pump_until([&] { return has(a_->lost, 2) && has(b_->lost, 1); }));
  EXPECT_TRUE(t->buf == snapshot) << "bytes were placed after deregister_memory returned";
  EXPECT_FALSE(marker_arrived());
  EXPECT_FALSE(ab_->alive());
}

// The same from another thread while node 2 polls: deregister_memory returns
// only once no store into the region is in progress (TSan checks the
// snapshot's reads against the poller's stores). The write may also finish
// first; either way nothing changes after deregister_memory returns.
TEST_F(TcpPlacementTest, DeregisterFromAnotherThreadWhilePlacing) {
  Target* t = register_target(b_, kBig);
  post_big_write(t);
  int polls = 0;
  ASSERT_TRUE(until_partly_placed(t, &polls));
  std::atomic<bool> done{false};
  std::vector<std::byte> snapshot;
  std::thread other([&] {
    b_->t->deregister_memory(t->mr);
    snapshot = t->buf;
    done.store(true, std::memory_order_release);
  });
  bool ended = pump_until([&] {
    return done.load(std::memory_order_acquire) && (marker_arrived() || has(b_->lost, 1));
  });
  other.join();
  t->registered = false;
  ASSERT_TRUE(ended);
  EXPECT_TRUE(t->buf == snapshot) << "bytes were placed after deregister_memory returned";
  if (marker_arrived()) {
    EXPECT_EQ(check_pattern(t->at, kBig, kSeed), SIZE_MAX);
  }
}

// Receive a kWrite frame and a kData frame from a raw socket in 7-byte
// pieces, then a write larger than one recv() / Expect both placed, and the
// kData delivered after each.
TEST_F(TcpPlacementTest, RawWriteFramesInPiecesArePlaced) {
  Target* t = register_target(b_, 600 * 1024);
  net::Fd raw = raw_connect();
  ASSERT_TRUE(raw.valid());
  auto small = pattern(1000, 64);
  bool placed = false;
  b_->on_rx = [&](const Completion&) { placed = check_pattern(t->at + 5, 1000, 64) == SIZE_MAX; };
  std::string bytes = hello(9, kToken) + write_frame(t->at + 5, t->mr.rkey, str(small)) +
                      frame(wire::FrameKind::kData, "one");
  for (size_t i = 0; i < bytes.size(); i += 7) {
    std::string piece = bytes.substr(i, 7);
    ASSERT_TRUE(
        net::write_all(raw.get(), piece.data(), piece.size(), Deadline::after_ms(kWaitMs)).is_ok());
    pump_once();
  }
  ASSERT_TRUE(pump_until([&] { return placed; }));
  auto large = pattern(t->len, 65);
  bytes = write_frame(t->at, t->mr.rkey, str(large)) + frame(wire::FrameKind::kData, "two");
  placed = false;
  b_->on_rx = [&](const Completion&) { placed = check_pattern(t->at, t->len, 65) == SIZE_MAX; };
  std::thread writer([&] {
    EXPECT_TRUE(
        net::write_all(raw.get(), bytes.data(), bytes.size(), Deadline::after_ms(kWaitMs)).is_ok());
  });
  bool ok = pump_until([&] { return placed; });
  writer.join();
  EXPECT_TRUE(ok);
  EXPECT_EQ(check_guards(*t), SIZE_MAX);
  EXPECT_TRUE(b_->lost.empty());
}

// Receive malformed kWrite frames after a good hello / Expect that peer lost,
// nothing placed, other peers served.
TEST_F(TcpPlacementTest, MalformedWriteFramesLoseThatPeer) {
  Target* t = register_target(b_, 4096);
  std::string data(64, 'w');
  wire::FrameHeader with_imm = wire::make_frame(wire::FrameKind::kWrite, 16);
  with_imm.imm = 3;
  struct Case {
    const char* what;
    std::string bytes;
  };
  Case cases[] = {
      {"empty write frame", frame(wire::FrameKind::kWrite, "")},
      {"length below the descriptor", write_frame(t->at, t->mr.rkey, "", 1)},
      {"imm on a write", std::string(reinterpret_cast<const char*>(&with_imm), sizeof(with_imm)) +
                             std::string(16, '\0')},
      // 64 bytes from 8 before the end of the registration.
      {"out of bounds", write_frame(t->reg_end() - 8, t->mr.rkey, data)},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    b_->lost.clear();
    b_->rx.clear();
    net::Fd raw = raw_connect();
    ASSERT_TRUE(raw.valid());
    std::string bytes = hello(9, kToken) + frame(wire::FrameKind::kData, "first") + c.bytes +
                        frame(wire::FrameKind::kData, "never");
    ASSERT_TRUE(
        net::write_all(raw.get(), bytes.data(), bytes.size(), Deadline::after_ms(kWaitMs)).is_ok());
    EXPECT_TRUE(closed_by_peer(raw));
    ASSERT_TRUE(pump_until([&] { return has(b_->lost, 9); }));
    ASSERT_EQ(b_->rx.size(), 1u);
    EXPECT_EQ(b_->rx[0].peer, 9u);
    EXPECT_EQ(check_guards(*t), SIZE_MAX);
    EXPECT_TRUE(std::all_of(t->at, t->at + t->len, [](std::byte b) { return b == kGuardByte; }));
  }
  expect_node1_still_served();
}

}  // namespace
}  // namespace lt::transport
