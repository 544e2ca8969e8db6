// The tcp transport's own wire: hellos, framing, garbage, back-pressure and
// placement frames, driven through raw sockets next to real transports.
// What every transport must do is in transport_conformance_test.cc.
#include "transport/tcp/tcp_transport.h"
#include "transport_harness.h"

namespace lt::transport::test {
namespace {

using tcp::HelloBody;
using tcp::make_hello;

class TcpWireTest : public TransportHarness {
 protected:
  explicit TcpWireTest(Factory make = &make_tcp) : TransportHarness(make) {}

  void SetUp() override { set_up_pair(); }

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

  // A kHello from `node` meant for `to` (this one is 2), sealed with the
  // harness's hello key (all zero) and a counter above every earlier one.
  static std::string hello(uint32_t node, uint64_t token, uint32_t to = 2) {
    static uint64_t counter = 0;
    return hello_with(make_hello(node, to, token, ++counter, Mac{}));
  }
  static std::string hello_with(const HelloBody& h) {
    return frame(wire::FrameKind::kHello,
                 std::string(reinterpret_cast<const char*>(&h), sizeof(h)));
  }
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
  std::string short_body(sizeof(HelloBody) - 1, '\0'), long_body(sizeof(HelloBody) + 1, '\0');
  HelloBody forged = make_hello(9, 2, kToken, 1u << 30, Mac{});
  forged.mac[0] ^= std::byte{1};  // what a sender without the key would send
  Mac other{};
  other[0] = std::byte{7};
  Case cases[] = {
      {"data before hello", frame(wire::FrameKind::kData, "abc")},
      {"control before hello", frame(wire::FrameKind::kControl, "\x06")},
      {"wrong token", hello(9, kToken + 1)},
      {"zero token", hello(9, 0)},
      {"node 0", hello(0, kToken)},
      {"own node id", hello(2, kToken)},
      {"meant for another node", hello(9, kToken, 7)},
      {"bad MAC", hello_with(forged)},
      {"another cluster's key", hello_with(make_hello(9, 2, kToken, 1u << 30, other))},
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

// A hello captured on the wire and sent again on a new connection: its
// counter is not above the last one accepted from that node, so it is refused.
TEST_F(TcpWireTest, ReplayedHelloIsRefused) {
  std::string captured = hello(9, kToken);
  net::Fd first = raw_connect();
  ASSERT_TRUE(first.valid());
  std::string bytes = captured + frame(wire::FrameKind::kData, "first");
  ASSERT_TRUE(
      net::write_all(first.get(), bytes.data(), bytes.size(), Deadline::after_ms(kWaitMs)).is_ok());
  ASSERT_TRUE(pump_until([&] { return b_->rx.size() == 1; }));
  net::Fd replay = raw_connect();
  ASSERT_TRUE(replay.valid());
  bytes = captured + frame(wire::FrameKind::kData, "replayed");
  ASSERT_TRUE(net::write_all(replay.get(), bytes.data(), bytes.size(), Deadline::after_ms(kWaitMs))
                  .is_ok());
  EXPECT_TRUE(closed_by_peer(replay));
  EXPECT_EQ(b_->rx.size(), 1u);
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
// (read_conn() checks that the first frame is a hello-sized kHello before it
// grows its buffer for the frame, so a stranger cannot pin max_msg_bytes.)
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

// A deferred post (kWrDeferred) never writes the socket itself, however
// large: its frames wait for flush(). Past max_queued_bytes it is refused
// like any other post, and after flush() the backlog arrives in order.
TEST_F(TcpBackPressureTest, DeferredPostsWaitForFlushAndFeelBackPressure) {
  expect_in_order();
  std::vector<std::byte> buf(kMsgBytes);
  uint64_t posted = 0;
  for (; posted < 10000; ++posted) {
    fill_pattern(buf.data(), buf.size(), posted);
    WorkRequest wr = send_wr(posted, buf.data(), buf.size());
    wr.flags = kWrDeferred;
    auto r = ab_->post(std::span<const WorkRequest>(&wr, 1));
    ASSERT_TRUE(r.is_ok()) << r.status().name();
    if (*r == 0) break;
  }
  ASSERT_GT(posted, 0u);
  ASSERT_LT(posted, 10000u) << "deferred posts never felt back-pressure";
  for (int i = 0; i < 20; ++i) {
    pump_once();
    wait_any(Deadline::after_ms(1));
  }
  EXPECT_EQ(next_, 0u) << "deferred frames went out before flush()";
  a_->t->flush();
  ASSERT_TRUE(pump_until([&] { return next_ >= posted; }))
      << "received " << next_ << " of " << posted;
  EXPECT_EQ(next_, posted);
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
    a_->t->prepare_sleep();  // as the engine arms before it sleeps
    b_->t->prepare_sleep();
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
}  // namespace lt::transport::test
