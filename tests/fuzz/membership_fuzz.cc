// proto/membership: a node's side of the control protocol (Membership::join
// decoding kJoinOk/kJoinRefused, handle_push for kMemberUp, kMemberDown and
// kNameReply, and peer() splitting a member's address field), driven by a
// fake ltier-manager on loopback that answers a join with fuzzed bytes.
//
// Input: byte 0, flags (bit 0: seal the first frame), then what the manager
// sends after it has read the node's kJoin, followed by the end of its side.
// A sealed first frame that is a kJoinOk gets the MAC the handshake expects
// (fuzzed bytes never would), so the answer's decoding is reached. join must return (a hang is a
// failure) with one of its documented codes; after a successful one the node reads the rest as
// pushes until it sees the end, and its address book must hold only members
// that decoded: non-zero ids, fields within their limits, and peer()
// addresses cut from the member's own address field.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include "common/config.h"
#include "common/net.h"
#include "common/time.h"
#include "common/wire.h"
#include "proto/control.h"
#include "proto/manager_membership.h"
#include "tests/fuzz/fuzz_util.h"

namespace lt::proto {
namespace {

constexpr uint64_t kWaitMs = 10000;  // a guard against hangs, not a timing

// Accepts one node per input, reads its kJoin, sends the input, shuts down
// its side and waits for the node to close.
class FakeManager {
 public:
  FakeManager() {
    sockaddr_in bound{};
    auto fd = net::listen_tcp("127.0.0.1", 0, &bound);
    FUZZ_CHECK(fd.is_ok(), fd.status().name());
    listen_ = std::move(fd).value();
    address_ = net::to_string(bound);
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeManager() {
    {
      std::lock_guard<std::mutex> g(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  const std::string& address() const { return address_; }

  // Hands `reply` to the manager for the next node that connects.
  void expect(std::string reply) {
    std::lock_guard<std::mutex> g(mu_);
    reply_ = std::move(reply);
    busy_ = true;
    cv_.notify_all();
  }
  // Waits until the manager has finished with that node.
  void wait_done() {
    std::unique_lock<std::mutex> g(mu_);
    FUZZ_CHECK(cv_.wait_for(g, std::chrono::milliseconds(kWaitMs), [&] { return !busy_; }),
               "the fake manager did not finish");
  }

 private:
  void serve() {
    for (;;) {
      std::string reply;
      {
        std::unique_lock<std::mutex> g(mu_);
        cv_.wait(g, [&] { return quit_ || busy_; });
        if (quit_) return;
        reply = reply_;
      }
      one(reply);
      std::lock_guard<std::mutex> g(mu_);
      busy_ = false;
      cv_.notify_all();
    }
  }

  void one(const std::string& reply) {
    Deadline d = Deadline::after_ms(kWaitMs);
    int fd = -1;
    while (fd < 0) {
      fd = ::accept4(listen_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd >= 0) break;
      FUZZ_CHECK(errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR, strerror(errno));
      FUZZ_CHECK(!d.expired(), "the node never connected");
      pollfd p{listen_.get(), POLLIN, 0};
      ::poll(&p, 1, 5);
    }
    net::Fd conn(fd);
    Nonce challenge{};
    challenge.fill(std::byte{0x5a});
    std::string ch = challenge_frame(challenge);
    (void)net::write_all(fd, ch.data(), ch.size(), d);
    // The node's kJoin, sealed with the secret for this challenge.
    CtlStream in;
    std::string join;
    for (;;) {
      Status s = in.next(&join);
      if (s.is_ok()) break;
      FUZZ_CHECK(s.code() == Code::kNoResource, s.name());
      FUZZ_CHECK(!d.expired(), "no kJoin from the node");
      pollfd p{fd, POLLIN, 0};
      ::poll(&p, 1, 5);
      FUZZ_CHECK(in.fill(fd).is_ok(), "the node closed before its kJoin");
    }
    FUZZ_CHECK(static_cast<CtlType>(join[0]) == CtlType::kJoin, "not a kJoin");
    JoinRequest j;
    Nonce node_nonce{};
    FUZZ_CHECK(open_join(join, "s", challenge, &j, &node_nonce) == Code::kOk,
               "a kJoin that does not open");
    FUZZ_CHECK(j.claim_node == 0 && j.name == "fuzz", "not a fresh join");
    std::string out = seal_first(reply, node_nonce, challenge);
    (void)net::write_all(fd, out.data(), out.size(), d);
    ::shutdown(fd, SHUT_WR);
    // Until the node closes (it reads everything first: no reset).
    for (;;) {
      char b[4096];
      ssize_t n = ::recv(fd, b, sizeof(b), 0);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) break;
      FUZZ_CHECK(!d.expired(), "the node never closed");
      pollfd p{fd, POLLIN, 0};
      ::poll(&p, 1, 5);
    }
  }

  // The input less its flags byte; with flag bit 0 set, a leading kJoinOk frame is
  // sealed as the real manager would.
  static std::string seal_first(const std::string& input, const Nonce& node_nonce,
                                const Nonce& challenge) {
    if (input.empty()) return input;
    std::string rest = input.substr(1);
    if ((input[0] & 1) == 0 || rest.size() < sizeof(wire::FrameHeader)) return rest;
    wire::FrameHeader h;
    std::memcpy(&h, rest.data(), sizeof(h));
    const size_t end = sizeof(h) + h.length;
    if (h.kind != static_cast<uint8_t>(wire::FrameKind::kControl) || h.length < 1 + kMacBytes ||
        rest.size() < end || static_cast<CtlType>(rest[sizeof(h)]) != CtlType::kJoinOk) {
      return rest;
    }
    std::string answer = rest.substr(sizeof(h) + 1 + kMacBytes, end - sizeof(h) - 1 - kMacBytes);
    return join_ok_frame("s", node_nonce, challenge, answer) + rest.substr(end);
  }

  net::Fd listen_;
  std::string address_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::string reply_;
  bool busy_ = false;
  bool quit_ = false;
};

FakeManager& fake_manager() {
  static FakeManager m;
  return m;
}

bool is_substring_of(const std::string& part, const std::string& whole) {
  return whole.find(part) != std::string::npos;
}

void check_book(const ManagerMembership& m) {
  for (const Member& x : m.members()) {
    FUZZ_CHECK(x.node != 0, "member 0 in the address book");
    FUZZ_CHECK(x.name.size() <= 256 && x.addresses.size() <= 256 && x.host_id.size() <= 256,
               "a member field over its limit");
    FUZZ_CHECK(m.alive(x.node), "a member that is not alive");
    auto p = m.peer(x.node);
    FUZZ_CHECK(p.has_value() && p->node == x.node, "peer() of a member");
    FUZZ_CHECK(p->host_id == x.host_id, "host id");
    for (const auto& a : p->addresses) {
      FUZZ_CHECK(!a.transport.empty() && a.transport.find(' ') == std::string::npos &&
                     a.address.find(' ') == std::string::npos,
                 "an address entry with an empty name or a space");
      FUZZ_CHECK(is_substring_of(a.transport + "=" + a.address, x.addresses),
                 "an address not from the field");
    }
  }
}

}  // namespace
}  // namespace lt::proto

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lt::proto;
  using lt::Code;
  using lt::Deadline;
  lt::fuzz::quiet_log();
  FakeManager& fm = fake_manager();
  fm.expect(std::string(reinterpret_cast<const char*>(data), size));
  {
    lt::ClusterConfig c;
    c.manager = fm.address();
    c.secret = std::string("s");  // not a literal: GCC 12 -O3 warns (-Wrestrict)
    c.node_name = "fuzz";
    ManagerMembership m;
    m.set_reconnect(false);  // one connection per input
    Deadline d = Deadline::after_ms(kWaitMs);
    lt::Status s = m.join(JoinInfo{c, "tenant", "tcp=127.0.0.1:1 shm=shm:1:x", kNoRank}, d);
    const Code code = s.code();
    FUZZ_CHECK(code == Code::kOk || code == Code::kAuth || code == Code::kNoResource ||
                   code == Code::kMalformed || code == Code::kPeerDown || code == Code::kClosed,
               s.name());
    if (s.is_ok()) {
      FUZZ_CHECK(m.self() != 0, "joined as node 0");
      check_book(m);
      // The rest are pushes, then the end of the manager's side.
      for (;;) {
        std::vector<Membership::Event> events;
        lt::Status r = m.on_readable(&events);
        for (const auto& e : events) {
          FUZZ_CHECK(e.node != 0 || e.kind != Membership::Event::kUp, "member 0 came up");
        }
        check_book(m);
        if (!r.is_ok()) {
          FUZZ_CHECK(r.code() == Code::kPeerDown, r.name());
          break;
        }
        FUZZ_CHECK(!d.expired(), "the node never saw the manager's end");
        pollfd p{m.fd(), POLLIN, 0};
        ::poll(&p, 1, 5);
      }
    }
  }  // the node closes its connection here
  fm.wait_done();
  return 0;
}
