// transport/tcp: the frame parser of TcpTransport (read_conn), hello and
// kWrite placement included, driven through a real TcpTransport by a peer
// that speaks fuzzed bytes over a loopback connection.
//
// Input: byte 0 seeds how the stream is split into send() calls, byte 1
// sizes the completion array poll() gets (1..32, so "out is full" happens);
// then records, each appending to the stream:
//   0 raw      u8 n, n bytes as they are
//   1 hello    u8 variant (node 1/3/keeper/~0, self, 0, wrong token, meant for
//              another, a bad MAC, a replayed counter)
//   2 data     u8 flags, [u32 imm], u16 n, [i8 length delta], n bytes
//   3 write    u8 target, i16 offset, u16 n, i8 length delta, n bytes:
//              a kWrite frame whose WriteDesc names one of the registrations
//              below (or raw addr/rkey), offset from its base
//   4 big      u8 flags, u24 n, u8 fill: a kData (or kWrite) frame of n bytes
//   5 header   u8 flags, u8 kind, u32 length, u32 imm: a bare header
// The peer sends the stream, shuts its side down and waits until the
// transport closes the connection: a hang is a failure. Another peer, the
// keeper, stays connected and idle throughout and must never be lost. A reference parser
// written out here from common/wire.h and tcp_transport.h's comments says
// what must have happened: which messages are delivered (content, imm,
// peer), whether one kPeerLost follows, how the malformed-frame and
// refused-write counters move, and every byte of the memory around the
// registrations afterwards (bytes land only where a valid kWrite put them).
// The result may not depend on how the stream was split.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/net.h"
#include "common/time.h"
#include "common/wire.h"
#include "tests/fuzz/fuzz_util.h"
#include "transport/tcp/tcp_transport.h"

namespace lt::transport::tcp {
namespace {

using fuzz::Input;

constexpr NodeId kSelf = 2;
constexpr NodeId kKeeper = 77;  // an idle peer that stays connected across inputs
constexpr uint64_t kToken = 0x7c9f00d5eed0000bull;
constexpr uint32_t kMaxMsg = 64 * 1024;
constexpr size_t kMaxStream = 512 * 1024;
constexpr uint64_t kWaitMs = 10000;  // a guard against hangs, not a timing

// The registrations, inside one arena with guard bytes between them.
enum Reg { kW, kR, kZ, kD, kA, kNumRegs };
struct Region {
  size_t off, len;
  Access access;
  bool deregistered;
};
constexpr size_t kGuard = 4096;
constexpr Region kRegions[kNumRegs] = {
    {kGuard, 80 * 1024, Access::kRemoteWrite, false},  // W: above the 64 KiB rx buffer
    {kGuard + 80 * 1024 + kGuard, 1024, Access::kRemoteRead, false},      // R: not writable
    {kGuard + 81 * 1024 + 2 * kGuard, 0, Access::kRemoteWrite, false},    // Z: empty
    {kGuard + 81 * 1024 + 3 * kGuard, 1024, Access::kRemoteWrite, true},  // D: deregistered
    {kGuard + 82 * 1024 + 4 * kGuard, 1024, kRemoteAll, false},           // A: all rights
};
constexpr size_t kArena = kGuard + 83 * 1024 + 5 * kGuard;

// What the arena holds before each input.
const std::vector<uint8_t>& arena_pattern() {
  static const std::vector<uint8_t> p = [] {
    std::vector<uint8_t> v(kArena);
    for (size_t i = 0; i < kArena; ++i) v[i] = static_cast<uint8_t>(i * 31 + 7);
    return v;
  }();
  return p;
}

void put_header(std::string* s, uint8_t kind, uint32_t length, uint32_t imm = 0,
                uint16_t magic = wire::kFrameMagic, uint8_t version = wire::kWireVersion,
                uint32_t reserved = 0) {
  wire::Writer w(s);
  w.u16(magic);
  w.u8(version);
  w.u8(kind);
  w.u32(length);
  w.u32(imm);
  w.u32(reserved);
}

struct World {
  std::unique_ptr<std::byte[]> arena{new std::byte[kArena]};  // outlives the transport
  std::unique_ptr<TcpTransport> t;
  sockaddr_in addr{};
  MemRegion mr[kNumRegs];
  // Node kKeeper's connection, said hello and then idle: the transport always
  // has a peer besides the fuzzed one (which must not disturb it), and with
  // one it accepts a new connection within 16 polls instead of waiting for
  // its idle-listener look.
  net::Fd keeper;
  // Hello counters: the last one used, and per node slot the node and the
  // last counter the transport accepted (what the reference expects it to
  // remember across inputs).
  uint64_t counter = 0;
  std::map<uint32_t, std::pair<NodeId, uint64_t>> seen;

  World() {
    fuzz::quiet_log();
    TcpConfig c;
    c.listen = "127.0.0.1:0";
    c.max_msg_bytes = kMaxMsg;
    t = std::make_unique<TcpTransport>(c);
    Status s = t->init();
    FUZZ_CHECK(s.is_ok(), s.name());
    t->set_identity(kSelf, kToken, lt::Mac{});
    std::string host;
    uint16_t port = 0;
    FUZZ_CHECK(parse_host_port(t->local_address(), &host, &port).is_ok(), t->local_address());
    FUZZ_CHECK(net::resolve(host, port, &addr).is_ok(), host);
    for (int i = 0; i < kNumRegs; ++i) {
      const Region& g = kRegions[i];
      auto r = t->register_memory(std::span<std::byte>(arena.get() + g.off, g.len), g.access);
      FUZZ_CHECK(r.is_ok(), r.status().name());
      mr[i] = *r;
      if (g.deregistered) t->deregister_memory(mr[i]);
    }
    Deadline d = Deadline::after_ms(kWaitMs);
    auto fd = net::connect_tcp(addr, d);
    FUZZ_CHECK(fd.is_ok(), fd.status().name());
    keeper = std::move(fd).value();
    std::string hello;
    put_header(&hello, static_cast<uint8_t>(wire::FrameKind::kHello), sizeof(HelloBody));
    HelloBody kh = make_hello(kKeeper, kSelf, kToken, ++counter, Mac{});
    hello.append(reinterpret_cast<const char*>(&kh), sizeof(kh));
    seen[node_slot(kKeeper)] = {kKeeper, counter};
    put_header(&hello, static_cast<uint8_t>(wire::FrameKind::kData), 0);
    FUZZ_CHECK(net::write_all(keeper.get(), hello.data(), hello.size(), d).is_ok(), "keeper");
    // Until its empty message arrives: then it is accepted and identified.
    for (bool seen = false; !seen;) {
      FUZZ_CHECK(!d.expired(), "the keeper's message never arrived");
      std::array<Completion, 8> cq;
      size_t n = t->poll(cq);
      for (size_t i = 0; i < n; ++i) {
        seen |= cq[i].kind == CqKind::kRecv && cq[i].peer == kKeeper && cq[i].len == 0;
      }
      t->release_rx(std::span<const Completion>(cq.data(), n));
    }
  }
  uint64_t base(int reg) const {
    return reinterpret_cast<uintptr_t>(arena.get() + kRegions[reg].off);
  }
};

World& world() {
  static World w;
  return w;
}

// A kWrite's target: (addr, rkey) from a target selector and an offset.
void write_target(const World& w, uint8_t sel, int64_t off, Input& in, uint64_t* addr,
                  uint64_t* rkey) {
  switch (sel % 8) {
    case 5:  // raw
      *rkey = in.u64();
      *addr = in.u64();
      return;
    case 6:  // W's rkey, A's address
      *rkey = w.mr[kW].rkey;
      *addr = w.base(kA) + static_cast<uint64_t>(off);
      return;
    case 7:  // no rkey
      *rkey = 0;
      *addr = w.base(kW) + static_cast<uint64_t>(off);
      return;
    default: {
      int reg = sel % 8;  // kW, kR, kZ, kD, kA
      *rkey = w.mr[reg].rkey;
      *addr = w.base(reg) + static_cast<uint64_t>(off);
      return;
    }
  }
}

std::string build_stream(World& w, Input& in) {
  std::string s;
  while (!in.empty() && s.size() < kMaxStream) {
    switch (in.u8() % 6) {
      case 0:
        s += in.bytes(in.u8());
        break;
      case 1: {
        uint8_t v = in.u8();
        static constexpr uint32_t kNodes[] = {1, 3, kKeeper, 0xffffffffu};
        uint32_t node = v & 4 ? kSelf : v & 8 ? 0 : kNodes[v & 3];
        put_header(&s, static_cast<uint8_t>(wire::FrameKind::kHello), sizeof(HelloBody));
        HelloBody h = make_hello(node, v & 32 ? 1 : kSelf, v & 16 ? kToken ^ 1 : kToken,
                                 v & 128 ? 1 : ++w.counter, Mac{});
        if (v & 64) h.mac[5] ^= std::byte{0x10};
        s.append(reinterpret_cast<const char*>(&h), sizeof(h));
        break;
      }
      case 2: {
        uint8_t f = in.u8();
        uint32_t imm = f & 5 ? in.u32() : 0;
        size_t n = in.u16() % 4096;
        int8_t delta = f & 2 ? static_cast<int8_t>(in.u8()) : 0;
        std::string_view body = in.bytes(n);
        auto kind = f & 1 ? wire::FrameKind::kDataImm : wire::FrameKind::kData;
        put_header(&s, static_cast<uint8_t>(kind), static_cast<uint32_t>(body.size() + delta), imm);
        s += body;
        break;
      }
      case 3: {
        uint8_t sel = in.u8();
        int64_t off = static_cast<int16_t>(in.u16());
        size_t n = in.u16() % 4096;
        int8_t delta = static_cast<int8_t>(in.u8());
        uint64_t addr = 0, rkey = 0;
        write_target(w, sel, off, in, &addr, &rkey);
        std::string_view data = in.bytes(n);
        put_header(&s, static_cast<uint8_t>(wire::FrameKind::kWrite),
                   static_cast<uint32_t>(sizeof(wire::WriteDesc) + data.size() + delta));
        wire::Writer d(&s);
        d.u64(addr);
        d.u64(rkey);
        s += data;
        break;
      }
      case 4: {
        uint8_t f = in.u8();
        uint32_t lo = in.u16();
        size_t n = (lo | static_cast<uint32_t>(in.u8()) << 16) % (2 * kMaxMsg + 64);
        char fill = static_cast<char>(in.u8());
        if (f & 1) {
          uint64_t addr = 0, rkey = 0;
          write_target(w, static_cast<uint8_t>(f >> 1), 0, in, &addr, &rkey);
          put_header(&s, static_cast<uint8_t>(wire::FrameKind::kWrite),
                     static_cast<uint32_t>(sizeof(wire::WriteDesc) + n));
          wire::Writer d(&s);
          d.u64(addr);
          d.u64(rkey);
        } else {
          put_header(&s, static_cast<uint8_t>(wire::FrameKind::kData), static_cast<uint32_t>(n));
        }
        s.append(n, fill);
        break;
      }
      default: {
        uint8_t f = in.u8();
        uint8_t kind = in.u8();
        uint32_t length = in.u32();
        uint32_t imm = in.u32();
        put_header(&s, kind, length, imm, f & 1 ? 0x4c54 : wire::kFrameMagic,
                   f & 2 ? 2 : wire::kWireVersion, f & 4 ? 1 : 0);
        break;
      }
    }
  }
  return s;
}

struct Msg {
  NodeId peer;
  uint32_t imm;
  std::string data;
  bool operator==(const Msg&) const = default;
};

struct Outcome {
  std::vector<Msg> msgs;
  std::vector<NodeId> lost;
  uint64_t malformed = 0, refused = 0;
  std::vector<uint8_t> arena;
};

// What the transport must do with `s` followed by EOF.
// Not const: a hello it accepts raises the counter the transport remembers.
Outcome reference(World& w, const std::string& s) {
  Outcome o;
  o.arena = arena_pattern();
  auto u32 = [&](size_t at) {
    uint32_t v;
    std::memcpy(&v, s.data() + at, 4);
    return v;
  };
  auto u64 = [&](size_t at) {
    uint64_t v;
    std::memcpy(&v, s.data() + at, 8);
    return v;
  };
  NodeId peer = kNoNode;
  size_t at = 0;
  for (;;) {
    const size_t left = s.size() - at;
    if (left < 16) break;  // EOF inside a header
    uint16_t magic;
    std::memcpy(&magic, s.data() + at, 2);
    uint8_t version = static_cast<uint8_t>(s[at + 2]), kind = static_cast<uint8_t>(s[at + 3]);
    uint32_t len = u32(at + 4), imm = u32(at + 8), reserved = u32(at + 12);
    bool header_ok = magic == 0x544c && version == 1 && kind >= 1 && kind <= 5 && reserved == 0 &&
                     (imm == 0 || kind == 3) && (kind == 5 || len <= kMaxMsg);
    if (!header_ok || (peer == kNoNode && (kind != 1 || len != sizeof(HelloBody)))) {
      ++o.malformed;
      break;
    }
    if (kind == 5) {  // kWrite
      if (len < 16) {
        ++o.refused;
        break;
      }
      if (left < 32) break;
      uint64_t addr = u64(at + 16), rkey = u64(at + 24);
      uint64_t n = len - 16;
      bool ok = false;
      for (int i = 0; i < kNumRegs && !ok; ++i) {
        const Region& g = kRegions[i];
        if (g.deregistered || w.mr[i].rkey != rkey) continue;
        if (!has_access(g.access, Access::kRemoteWrite)) break;
        unsigned __int128 end = static_cast<unsigned __int128>(addr) + n;
        ok = addr >= w.base(i) && end <= static_cast<unsigned __int128>(w.base(i)) + g.len;
      }
      if (!ok) {
        ++o.refused;
        break;
      }
      size_t have = std::min<uint64_t>(left - 32, n);
      size_t to = addr - reinterpret_cast<uintptr_t>(w.arena.get());
      std::memcpy(o.arena.data() + to, s.data() + at + 32, have);
      at += 32 + have;
      if (have < n) break;  // EOF inside the bytes
      continue;
    }
    if (left - 16 < len) break;  // EOF inside the body
    if (kind == 1) {
      if (peer != kNoNode) {  // a second hello, of any length
        ++o.malformed;
        break;
      }
      // The first frame is a hello's length here (checked with the header).
      HelloBody h;
      std::memcpy(&h, s.data() + at + 16, sizeof(h));
      auto& [seen_node, seen_counter] = w.seen[node_slot(h.node)];
      if (h.cluster_token != kToken || h.to != kSelf || h.node == kNoNode || h.node == kSelf ||
          !hello_mac_ok(h, Mac{}) || h.node < seen_node ||
          (h.node == seen_node && h.counter <= seen_counter)) {
        ++o.malformed;
        break;
      }
      seen_node = h.node;
      seen_counter = h.counter;
      peer = h.node;
    } else if (kind == 2 || kind == 3) {
      o.msgs.push_back(Msg{peer, imm, s.substr(at + 16, len)});
    } else {
      ++o.malformed;  // kControl on a peer connection
      break;
    }
    at += 16 + len;
  }
  // A second connection of node kKeeper is a redundant one: its end is not
  // the peer's (the keeper's connection carries on).
  if (peer != kNoNode && peer != kKeeper) o.lost.push_back(peer);
  return o;
}

// One poll of the transport; what it reports goes into *o.
size_t pump(World& w, size_t cap, Outcome* o) {
  std::array<Completion, 32> cq;
  size_t n = w.t->poll(std::span<Completion>(cq.data(), cap));
  for (size_t i = 0; i < n; ++i) {
    const Completion& c = cq[i];
    if (c.kind == CqKind::kRecv) {
      o->msgs.push_back(
          Msg{c.peer, c.imm, std::string(reinterpret_cast<const char*>(c.rx), c.len)});
    } else if (c.kind == CqKind::kPeerLost) {
      FUZZ_CHECK(c.status.code() == Code::kPeerDown, c.status.name());
      o->lost.push_back(c.peer);
    } else {
      fuzz::fail(__FILE__, __LINE__, "unexpected completion",
                 std::to_string(static_cast<int>(c.kind)));
    }
  }
  w.t->release_rx(std::span<const Completion>(cq.data(), n));
  return n;
}

// Polls until the transport reports something, at most 64 times (with the
// keeper connected it looks for new connections on every 16th poll); after
// many fruitless rounds it sleeps on the transport's wait_fd and the raw
// socket for up to 1 ms.
void settle(World& w, size_t cap, Outcome* o, int fd, int* idle) {
  for (int i = 0; i < 64; ++i) {
    if (pump(w, cap, o) != 0) return;
  }
  if (++*idle % 64 != 0) return;
  pollfd p[2] = {{w.t->wait_fd(), POLLIN, 0}, {fd, POLLIN, 0}};
  ::poll(p, 2, 1);
}

std::string describe(const Outcome& o) {
  // Built with append: for `" " + std::to_string(n)` GCC 12 at -O3 reports a
  // false -Wrestrict inside std::string.
  std::string s = std::to_string(o.msgs.size());
  s.append(" messages, lost");
  for (NodeId n : o.lost) s.append(" ").append(std::to_string(n));
  s.append(", malformed ").append(std::to_string(o.malformed));
  s.append(", refused ").append(std::to_string(o.refused));
  return s;
}

}  // namespace
}  // namespace lt::transport::tcp

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lt::transport::tcp;
  using lt::Deadline;
  World& w = world();
  lt::fuzz::Input in(data, size);
  uint64_t split = in.u8();
  size_t cap = 1 + in.u8() % 32;
  const std::string stream = build_stream(w, in);
  const Outcome want = reference(w, stream);

  std::memcpy(w.arena.get(), arena_pattern().data(), kArena);
  Outcome got;
  const uint64_t malformed0 = w.t->malformed_frames(), refused0 = w.t->refused_writes();
  Deadline d = Deadline::after_ms(kWaitMs);

  auto fd = lt::net::connect_tcp(w.addr, d);
  FUZZ_CHECK(fd.is_ok(), fd.status().name());
  const int raw = fd->get();
  // Send in pieces, polling the transport between them.
  bool open = true;
  int idle = 0;
  for (size_t at = 0; at < stream.size() && open;) {
    uint64_t r = lt::fuzz::splitmix64(&split);
    size_t n = r % 4 == 0 ? stream.size() - at : 1 + (r >> 8) % (r & 8 ? 4096 : 48);
    size_t end = std::min(stream.size(), at + n);
    while (at < end) {
      ssize_t k = ::send(raw, stream.data() + at, end - at, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k > 0) {
        at += static_cast<size_t>(k);
        continue;
      }
      if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        settle(w, cap, &got, raw, &idle);
        FUZZ_CHECK(!d.expired(), "the transport stopped reading");
        continue;
      }
      open = false;  // the transport closed the connection (EPIPE, ECONNRESET)
      break;
    }
    pump(w, cap, &got);
  }
  ::shutdown(raw, SHUT_WR);
  // Until the transport closes its end.
  for (;;) {
    char b[256];
    ssize_t k = ::recv(raw, b, sizeof(b), MSG_DONTWAIT);
    if (k == 0 || (k < 0 && errno == ECONNRESET)) break;
    FUZZ_CHECK(k < 0, "the transport sent bytes to a peer");
    FUZZ_CHECK(errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR, strerror(errno));
    FUZZ_CHECK(!d.expired(), "the transport never closed the connection");
    settle(w, cap, &got, raw, &idle);
  }
  while (pump(w, cap, &got) != 0) {
  }
  linger l{1, 0};  // close with a reset: no TIME_WAIT left behind per input
  ::setsockopt(raw, SOL_SOCKET, SO_LINGER, &l, sizeof(l));

  got.malformed = w.t->malformed_frames() - malformed0;
  got.refused = w.t->refused_writes() - refused0;
  got.arena.assign(reinterpret_cast<const uint8_t*>(w.arena.get()),
                   reinterpret_cast<const uint8_t*>(w.arena.get()) + kArena);
  const std::string what = "got " + describe(got) + "; want " + describe(want);
  FUZZ_CHECK(got.malformed == want.malformed && got.refused == want.refused, what);
  FUZZ_CHECK(got.lost == want.lost, what);
  FUZZ_CHECK(got.msgs == want.msgs, what);
  if (got.arena != want.arena) {
    size_t i = 0;
    while (got.arena[i] == want.arena[i]) ++i;
    lt::fuzz::fail(__FILE__, __LINE__, "memory around the registrations",
                   "differs first at arena byte " + std::to_string(i) + "; " + what);
  }
  return 0;
}
