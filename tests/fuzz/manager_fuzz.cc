// proto/manager: ltier-manager's side of the control protocol (Manager::handle
// and its join, name, lock and barrier bookkeeping), driven through a real
// Manager on loopback by two clients that speak fuzzed bytes.
//
// Input: byte 0 seeds how each record is split into writes; then records
//   u8 flags, u16 n, n bytes
// sent on connection flags & 1. With flags & 4 the n bytes are the body of a
// join (control.h's join_body) that the client seals for its connection's
// challenge, as a node would (flags & 8: with a wrong secret); fuzzed MACs
// would never pass. With flags & 2 the client then syncs (unless
// it stopped inside a frame): it sends a kNameLookup and waits for its answer
// or for the manager to drop the connection, so the order of requests across
// the two connections is the order of the records (a lock held on one,
// wanted on the other).
// Finally both clients shut down their side and wait until the manager
// closes theirs: a hang is a failure. Every frame the manager sends must be
// well formed and decode completely.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "common/config.h"
#include "common/net.h"
#include "common/time.h"
#include "common/wire.h"
#include "proto/control.h"
#include "proto/manager.h"
#include "tests/fuzz/fuzz_util.h"

namespace lt::proto {
namespace {

using fuzz::Input;

constexpr uint64_t kWaitMs = 10000;  // a guard against hangs, not a timing
constexpr uint64_t kSyncReq = 0x5e5e000000000000ull;
// A fresh manager every so many joins, so that one long run does not drift
// into states (high slot generations) that a replay of one input never sees.
constexpr int kJoinsPerManager = 900;

class Server {
 public:
  Server() { start(); }
  ~Server() { stop(); }
  const sockaddr_in& addr() const { return addr_; }
  // Called for every kJoinOk seen.
  void joined() { ++joins_; }
  // Between inputs: a fresh manager when node ids run low.
  void maybe_restart() {
    if (joins_ < kJoinsPerManager) return;
    stop();
    start();
  }

 private:
  void start() {
    ManagerOptions o;
    o.listen = "127.0.0.1:0";
    o.secret = std::string("s");  // not a literal: GCC 12 -O3 warns (-Wrestrict)
    o.down_after_ms = 60000;      // no node is declared down during an input
    m_ = std::make_unique<Manager>(o);
    Status s = m_->start();
    FUZZ_CHECK(s.is_ok(), s.name());
    std::string host;
    uint16_t port = 0;
    FUZZ_CHECK(parse_host_port(m_->address(), &host, &port).is_ok(), m_->address());
    FUZZ_CHECK(net::resolve(host, port, &addr_).is_ok(), host);
    stop_ = false;
    joins_ = 0;
    thread_ = std::thread([this] { (void)m_->run(stop_); });
  }
  void stop() {
    stop_ = true;
    thread_.join();
    m_.reset();
  }

  std::unique_ptr<Manager> m_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  sockaddr_in addr_{};
  int joins_ = 0;
};

Server& server() {
  static Server s;
  return s;
}

// One client connection and what the manager has sent on it.
struct Client {
  net::Fd fd;
  CtlStream in;
  Nonce challenge{};  // from the manager's first frame
  bool challenged = false;
  bool eof = false;
  // What the client sent, cut into frames as far as they are complete.
  std::string sent;
  size_t cut = 0;
  bool bad = false;  // a frame the manager must refuse (it drops the client)

  // True unless the client stopped inside a frame: then a sync would only
  // extend that frame, and the manager rightly waits for the rest.
  bool at_frame_boundary() {
    while (!bad && sent.size() - cut >= sizeof(wire::FrameHeader)) {
      wire::FrameHeader h;
      std::memcpy(&h, sent.data() + cut, sizeof(h));
      if (h.magic != wire::kFrameMagic || h.version != wire::kWireVersion ||
          h.kind != static_cast<uint8_t>(wire::FrameKind::kControl) || h.length == 0 ||
          h.length > kMaxCtlFrame || h.imm != 0 || h.reserved != 0) {
        bad = true;
        break;
      }
      if (sent.size() - cut - sizeof(h) < h.length) return false;
      uint8_t type = static_cast<uint8_t>(sent[cut + sizeof(h)]);
      bad = type == 0 || type > kMaxCtlType;
      cut += sizeof(h) + h.length;
    }
    return bad || cut == sent.size();
  }

  // Reads what is there; checks every complete frame. True if a kNameReply
  // with request id `req` was among them.
  bool read(uint64_t req = 0) {
    bool seen = false;
    if (!eof) eof = !in.fill(fd.get()).is_ok();
    std::string p;
    for (;;) {
      Status s = in.next(&p);
      if (s.code() == Code::kNoResource) break;
      FUZZ_CHECK(s.is_ok(), std::string("the manager sent a bad frame: ") + s.name());
      seen |= check_frame(p, req);
    }
    return seen;
  }

  bool check_frame(const std::string& p, uint64_t req) {
    wire::Reader r(fuzz::as_bytes(p));
    auto type = static_cast<CtlType>(r.u8());
    bool seen = false;
    switch (type) {
      case CtlType::kChallenge:
        FUZZ_CHECK(!challenged && parse_challenge(p, &challenge), "kChallenge");
        challenged = true;
        return false;
      case CtlType::kJoinOk: {
        r.bytes(kMacBytes);
        FUZZ_CHECK(r.u32() != 0, "joined as node 0");
        r.u64();
        r.u32();
        r.u32();
        uint32_t count = r.u32();
        FUZZ_CHECK(count >= 1 && count <= kMaxMembers, std::to_string(count));
        for (uint32_t i = 0; i < count; ++i) {
          Member m;
          FUZZ_CHECK(get_member(r, &m), "a member in kJoinOk");
        }
        server().joined();
        break;
      }
      case CtlType::kJoinRefused: {
        uint8_t code = r.u8();
        FUZZ_CHECK(code == static_cast<uint8_t>(Code::kAuth) ||
                       code == static_cast<uint8_t>(Code::kClosed) ||
                       code == static_cast<uint8_t>(Code::kNoResource),
                   std::to_string(code));
        r.str(256);
        break;
      }
      case CtlType::kMemberUp: {
        Member m;
        FUZZ_CHECK(get_member(r, &m), "kMemberUp");
        break;
      }
      case CtlType::kMemberDown:
        FUZZ_CHECK(r.u32() != 0, "kMemberDown of node 0");
        break;
      case CtlType::kNameReply: {
        uint64_t q = r.u64();
        FUZZ_CHECK(r.u8() < kNumCodes, "kNameReply code");
        r.u32();
        seen = q == req && req != 0;
        break;
      }
      default:
        fuzz::fail(__FILE__, __LINE__, "unexpected frame type", std::to_string(p[0]));
    }
    FUZZ_CHECK(r.ok() && r.at_end(), "frame of type " + std::to_string(p[0]) + " does not decode");
    return seen;
  }

  void wait(const Deadline& d) {
    pollfd p{fd.get(), POLLIN, 0};
    ::poll(&p, 1, std::min(d.remaining_ms(), 5));
  }
};

// Writes all of `s` (the manager reads everything; no back-pressure here).
void send_all(Client& c, std::string_view s, uint64_t* split, const Deadline& d) {
  c.sent += s;
  for (size_t at = 0; at < s.size();) {
    uint64_t r = fuzz::splitmix64(split);
    size_t n = r % 2 == 0 ? s.size() - at : 1 + (r >> 8) % 24;
    n = std::min(n, s.size() - at);
    Status st = net::write_all(c.fd.get(), s.data() + at, n, d);
    if (!st.is_ok()) return;  // the manager dropped this client
    at += n;
  }
}

}  // namespace
}  // namespace lt::proto

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lt::proto;
  using lt::Deadline;
  lt::fuzz::quiet_log();
  Server& srv = server();
  srv.maybe_restart();
  lt::fuzz::Input in(data, size);
  uint64_t split = in.u8();
  Deadline d = Deadline::after_ms(kWaitMs);
  Client c[2];
  for (auto& cl : c) {
    auto fd = lt::net::connect_tcp(srv.addr(), d);
    FUZZ_CHECK(fd.is_ok(), fd.status().name());
    cl.fd = std::move(fd).value();
    while (!cl.challenged && !cl.eof) {
      cl.read();
      FUZZ_CHECK(!d.expired(), "no challenge from the manager");
      if (!cl.challenged) cl.wait(d);
    }
  }
  uint64_t syncs = 0;
  while (!in.empty()) {
    uint8_t flags = in.u8();
    std::string_view bytes = in.bytes(in.u16());
    Client& cl = c[flags & 1];
    if (flags & 4) {
      lt::Nonce mine{};
      mine.fill(std::byte{0x33});
      std::string sealed = seal_join((flags & 8) ? "wrong" : "s", cl.challenge, mine, bytes);
      send_all(cl, sealed, &split, d);
    } else {
      send_all(cl, bytes, &split, d);
    }
    if ((flags & 2) && cl.at_frame_boundary()) {
      std::string f = begin_ctl(CtlType::kNameLookup);
      lt::wire::Writer w(&f);
      uint64_t req = kSyncReq + ++syncs;
      w.u64(req);
      w.str("sync");
      finish_ctl(&f);
      send_all(cl, f, &split, d);
      while (!cl.read(req) && !cl.eof) {
        FUZZ_CHECK(!d.expired(), "no answer to a sync and no close");
        cl.wait(d);
      }
    }
  }
  for (auto& cl : c) ::shutdown(cl.fd.get(), SHUT_WR);
  for (auto& cl : c) {
    while (!cl.eof) {
      cl.read();
      if (cl.eof) break;
      FUZZ_CHECK(!d.expired(), "the manager never closed a finished client");
      cl.wait(d);
    }
  }
  return 0;
}
