// The harness every transport test uses: the transports under test (made by
// factory functions), their address book entries, test patterns and work
// request builders, and TransportHarness, a fixture of sides that pumps every
// transport of a test from one thread (a stream transport may need its sender
// polled to flush its backlog). Every wait has a Deadline; no test asserts a
// timing.
#pragma once

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
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

namespace lt::transport::test {

constexpr uint64_t kToken = 0x5eed5eed12345678ull;
constexpr uint64_t kWaitMs = 10000;  // generous: a guard against hangs, never a timing
constexpr uint32_t kTestMaxMsg = 4u << 20;

using Factory = Result<std::unique_ptr<Transport>> (*)();
// The address book entry of `node` with `address` (local_address() of its
// transport) in the field this kind of transport reads.
using PeerFn = PeerInfo (*)(NodeId node, const std::string& address);

inline PeerInfo tcp_peer(NodeId node, const std::string& address) {
  return PeerInfo{node, "", {{"tcp", address}}};
}
inline PeerInfo shm_peer(NodeId node, const std::string& address) {
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
inline void PrintTo(const TransportKind& k, std::ostream* os) { *os << k.name; }

inline Result<std::unique_ptr<Transport>> make_tcp() {
  TcpConfig c;
  c.listen = "127.0.0.1:0";
  c.max_msg_bytes = kTestMaxMsg;  // keeps the over-max_msg test small
  return make_tcp_transport(c);
}

// Small socket buffers and send backlog, so back-pressure comes quickly.
constexpr uint32_t kSmallQueue = 64 * 1024;
inline Result<std::unique_ptr<Transport>> make_tcp_small_queue() {
  TcpConfig c;
  c.listen = "127.0.0.1:0";
  c.max_msg_bytes = kTestMaxMsg;
  c.sndbuf_bytes = kSmallQueue;
  c.rcvbuf_bytes = kSmallQueue;
  c.max_queued_bytes = kSmallQueue;
  return make_tcp_transport(c);
}

// Small socket buffers only (the send queue keeps its default bound): a
// large post or frame crosses over many polls.
inline Result<std::unique_ptr<Transport>> make_tcp_small_sockets() {
  TcpConfig c;
  c.listen = "127.0.0.1:0";
  c.max_msg_bytes = kTestMaxMsg;
  c.sndbuf_bytes = c.rcvbuf_bytes = kSmallQueue;
  return make_tcp_transport(c);
}

inline Result<std::unique_ptr<Transport>> make_shm() {
  ShmConfig c;
  c.max_msg_bytes = kTestMaxMsg;
  return make_shm_transport(c);
}

// A 16 KiB ring: wrap-around, padding, fragmentation (messages above 4 KiB)
// and back-pressure all happen within a few messages.
constexpr uint32_t kSmallRing = 16 * 1024;
inline Result<std::unique_ptr<Transport>> make_shm_small_ring() {
  ShmConfig c;
  c.max_msg_bytes = kTestMaxMsg;
  c.ring_bytes = kSmallRing;
  return make_shm_transport(c);
}

inline PeerInfo rc_peer(NodeId node, const std::string& address) {
  return PeerInfo{node, "", {{"rc", address}}};
}

inline Result<std::unique_ptr<Transport>> make_rc() {
  Config c;
  c.verbs.max_msg_bytes = kTestMaxMsg;
  return make_rc_transport(c);
}

// A send ring of 32 KiB and 16 work requests per QP: back-pressure, ring
// wrap-around and the fragment backlog within a few messages.
inline Result<std::unique_ptr<Transport>> make_rc_small_ring() {
  Config c;
  c.verbs.max_msg_bytes = kTestMaxMsg;
  c.verbs.send_ring_bytes = 32 * 1024;
  c.verbs.send_depth = 16;
  c.verbs.recv_buffer_bytes = 4096;
  return make_rc_transport(c);
}

inline PeerInfo ud_peer(NodeId node, const std::string& address) {
  return PeerInfo{node, "", {{"ud", address}}};
}

inline Result<std::unique_ptr<Transport>> make_ud() {
  Config c;
  c.verbs.max_msg_bytes = kTestMaxMsg;
  c.verbs.ud_peer_timeout_ms = 2000;
  return make_ud_transport(c);
}

// A window of 16 datagrams, 64 send slots and 10% of datagrams dropped on
// receipt: back-pressure, the waiting queue, reordering, duplicates and
// retransmission within a few messages.
inline Result<std::unique_ptr<Transport>> make_ud_lossy() {
  Config c;
  c.verbs.max_msg_bytes = kTestMaxMsg;
  c.verbs.ud_window = 16;
  c.verbs.ud_send_slots = 64;
  c.verbs.ud_loss_percent = 10;
  c.verbs.ud_peer_timeout_ms = 2000;
  return make_ud_transport(c);
}

// Polls `t` once, hands every completion to `f` and releases them; returns
// how many there were.
inline size_t poll_once(Transport* t, const std::function<void(const Completion&)>& f) {
  std::array<Completion, 32> cq;
  size_t n = t->poll(cq);
  for (size_t i = 0; i < n; ++i) f(cq[i]);
  t->release_rx(std::span<const Completion>(cq.data(), n));
  return n;
}

// A test whose threads can deadlock ends the test process with a message
// once `d` passes, instead of hanging until the suite's time limit. The
// guard's scope must cover every thread that could be stuck.
class HangGuard {
 public:
  HangGuard(Deadline d, const char* what)
      : thread_([this, d, what] {
          std::unique_lock<std::mutex> g(mu_);
          while (!done_) {
            if (d.expired()) {
              std::fprintf(stderr, "%s: no progress by the deadline (a deadlock?)\n", what);
              std::abort();
            }
            cv_.wait_for(g, std::chrono::milliseconds(100));
          }
        }) {}
  ~HangGuard() {
    {
      std::lock_guard<std::mutex> g(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  HangGuard(const HangGuard&) = delete;
  HangGuard& operator=(const HangGuard&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

// Deterministic message contents: byte j of the message with `seed`.
inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

inline void fill_pattern(std::byte* p, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v = splitmix64(seed * 0x100000001b3ull + i / 8);
    std::memcpy(p + i, &v, std::min<size_t>(8, n - i));
  }
}

inline std::vector<std::byte> pattern(size_t n, uint64_t seed) {
  std::vector<std::byte> v(n);
  fill_pattern(v.data(), n, seed);
  return v;
}

// A message as the short and express paths take it: a 16-byte header and
// `len` bytes of data, both from pattern seeds derived from `i`, so every
// byte says which message it is; `whole` is the two as they arrive.
struct HdrMsg {
  std::vector<std::byte> hdr, data, whole;
};
inline HdrMsg hdr_message(uint64_t i, size_t len) {
  HdrMsg m{pattern(16, 2 * i), pattern(len, 2 * i + 1), {}};
  m.whole = m.hdr;
  m.whole.insert(m.whole.end(), m.data.begin(), m.data.end());
  return m;
}

// Index of the first byte that differs from the pattern, or SIZE_MAX.
inline size_t check_pattern(const std::byte* p, size_t n, uint64_t seed) {
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
inline WorkRequest rdma_wr(Op op, uint64_t wr_id, const std::byte* local, size_t len,
                           uint64_t offset, uint64_t rkey) {
  WorkRequest wr;
  wr.op = op;
  wr.wr_id = wr_id;
  wr.num_sge = 1;
  wr.sge[0] = Sge{local, static_cast<uint32_t>(len), 0};
  wr.remote = RemoteRef{offset, rkey};
  return wr;
}

// kFetchAdd (operand) or kCmpSwap (compare, operand); the old value lands in *old.
inline WorkRequest atomic_wr(Op op, uint64_t* old, uint64_t offset, uint64_t rkey, uint64_t compare,
                             uint64_t operand) {
  WorkRequest wr = rdma_wr(op, 0, reinterpret_cast<const std::byte*>(old), 8, offset, rkey);
  wr.compare = compare;
  wr.operand = operand;
  return wr;
}

inline WorkRequest send_wr(uint64_t wr_id, const std::byte* p, size_t len, int num_sge = 1) {
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
inline size_t check_guards(const Target& t) {
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

  // Two joined transports, 1 connected to 2: a_, b_ and ab_.
  void set_up_pair() {
    a_ = add_side(1);
    b_ = add_side(2);
    ASSERT_NE(a_, nullptr);
    ASSERT_NE(b_, nullptr);
    ab_ = connect(a_, b_);
    ASSERT_NE(ab_, nullptr);
  }

  // A transport that has joined as `node` with `token` (kNoNode: not joined).
  Side* add_side(NodeId node, uint64_t token = kToken) {
    auto t = make_();
    EXPECT_TRUE(t.is_ok()) << t.status().name();
    if (!t.is_ok()) return nullptr;
    auto s = std::make_unique<Side>();
    s->node = node;
    s->t = std::move(t).value();
    if (node != kNoNode) s->t->set_identity(node, token, lt::Mac{});
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
      if (!s->t) continue;
      s->t->prepare_sleep();
      fds.push_back(pollfd{s->t->wait_fd(), POLLIN, 0});
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
  // set_up_pair()'s; declared last so that the endpoint goes before the sides.
  Side* a_ = nullptr;
  Side* b_ = nullptr;
  std::unique_ptr<Endpoint> ab_;
};

// tcp, shm, and shm with a small ring: PairedPaths' parameters, and the
// test name of one.
inline std::vector<TransportKind> paired_path_kinds() {
  return {TransportKind{"tcp", &make_tcp}, TransportKind{"shm", &make_shm, &shm_peer},
          TransportKind{"shm_small_ring", &make_shm_small_ring, &shm_peer, true}};
}
inline std::string kind_name(const ::testing::TestParamInfo<TransportKind>& info) {
  return info.param.name;
}

// A pair (1 connected to 2) on each transport of the host build, with the
// short and express paths at hand for HdrMsg messages.
class PairedPaths : public TransportHarness, public ::testing::WithParamInterface<TransportKind> {
 protected:
  using Msg = HdrMsg;
  PairedPaths() : TransportHarness(GetParam().make, GetParam().peer) {}
  void SetUp() override { set_up_pair(); }
  bool is_shm() const { return std::string(GetParam().name).starts_with("shm"); }
  static Msg message(uint64_t i, size_t len) { return hdr_message(i, len); }
  bool post_short(const Msg& m) {
    return ab_->post_short(m.hdr.data(), m.hdr.size(), m.data.data(), m.data.size());
  }
  bool post_express(const Msg& m) {
    return ab_->post_express(m.hdr.data(), m.hdr.size(), m.data.data(), m.data.size());
  }
};

}  // namespace lt::transport::test
