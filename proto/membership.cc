#include "proto/membership.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "common/time.h"

namespace lt::proto {

namespace {
constexpr uint64_t kJoinSpinNs = 300 * 1000;
}  // namespace

Status Membership::send_frame(const std::string& f, Deadline d) {
  std::lock_guard<std::mutex> g(send_mu_);
  return net::write_all(fd_.get(), f.data(), f.size(), d);
}

Status Membership::join(const ClusterConfig& c, const std::string& tenant,
                        const std::string& addresses, uint32_t rank, Deadline d) {
  std::string host;
  uint16_t port = 0;
  sockaddr_in addr{};
  if (!parse_host_port(c.manager, &host, &port).is_ok() ||
      !net::resolve(host, port, &addr).is_ok()) {
    LT_ERROR("join: cluster.manager '%s' is not a valid host:port", c.manager.c_str());
    return Code::kInvalidArg;
  }
  auto fd = net::connect_tcp(addr, d);
  if (!fd) {
    LT_ERROR("join: cannot reach ltier-manager at %s (%s)", c.manager.c_str(), fd.status().name());
    return fd.status().code() == Code::kTimedOut ? Code::kTimedOut : Code::kPeerDown;
  }
  fd_ = std::move(fd.value());
  std::string name = c.node_name;
  if (name.empty()) {
    char h[256] = {};
    gethostname(h, sizeof(h) - 1);
    name = std::string(h) + "." + std::to_string(getpid());
  }
  std::string f = begin_ctl(CtlType::kJoin);
  wire::Writer w(&f);
  w.str(c.secret);
  w.str(name);
  w.str(addresses);
  w.str(net::host_id());
  w.str(tenant);
  w.u32(rank);
  finish_ctl(&f);
  LT_RETURN_IF_ERROR(send_frame(f, d));
  std::string payload;
  // The answer usually comes within a few hundred microseconds: poll the
  // socket for a short while before sleeping, which saves a wake-up.
  uint64_t spin_until = now_ns() + kJoinSpinNs;
  for (;;) {
    Status s = in_.next(&payload);
    if (s.is_ok()) break;
    if (s.code() != Code::kNoResource) return Code::kMalformed;
    pollfd p{fd_.get(), POLLIN, 0};
    bool spinning = now_ns() < spin_until;
    int n = ::poll(&p, 1, spinning ? 0 : d.remaining_ms());
    if (n == 0 && spinning) continue;
    if (n == 0) {
      LT_ERROR("join: ltier-manager at %s did not answer in time", c.manager.c_str());
      return Code::kTimedOut;
    }
    Status fs = in_.fill(fd_.get());
    if (!fs.is_ok()) {
      // The manager may have written a refusal and closed: parse what we have.
      if (in_.next(&payload).is_ok()) break;
      LT_ERROR("join: ltier-manager at %s closed the connection", c.manager.c_str());
      return Code::kPeerDown;
    }
  }
  wire::Reader r(std::span<const std::byte>(reinterpret_cast<const std::byte*>(payload.data()),
                                            payload.size()));
  auto type = static_cast<CtlType>(r.u8());
  if (type == CtlType::kJoinRefused) {
    uint8_t raw = r.u8();
    auto code = raw < kNumCodes ? static_cast<Code>(raw) : Code::kMalformed;
    std::string reason(r.str(256));
    LT_ERROR("join refused by ltier-manager at %s: %s", c.manager.c_str(), reason.c_str());
    fd_.reset();
    return r.ok() && code == Code::kAuth ? Code::kAuth : Code::kNoResource;
  }
  if (type != CtlType::kJoinOk) return Code::kMalformed;
  self_ = r.u32();
  token_ = r.u64();
  heartbeat_ms_ = r.u32();
  r.u32();  // down_after_ms: informative
  uint32_t count = r.u32();
  if (!r.ok() || count > kMaxMembers || self_ == 0) return Code::kMalformed;
  {
    std::lock_guard<std::mutex> g(mu_);
    for (uint32_t i = 0; i < count; ++i) {
      Member m;
      if (!get_member(r, &m)) return Code::kMalformed;
      members_[m.node] = m;
    }
  }
  if (heartbeat_ms_ == 0) heartbeat_ms_ = 200;
  next_beat_ns_ = now_ns() + heartbeat_ms_ * 1000000ull;
  // Pushes that arrived with the JoinOk (a node joining right after us) are
  // already in our buffer; the socket will not signal them again.
  std::vector<Event> early;
  while (in_.next(&payload).is_ok()) handle_push(payload, &early);
  return Status::ok();
}

void Membership::leave() {
  if (!fd_.valid()) return;
  {
    std::lock_guard<std::mutex> g(mu_);
    leaving_ = true;
  }
  std::string f = begin_ctl(CtlType::kLeave);
  finish_ctl(&f);
  (void)send_frame(f, Deadline::after_ms(200));
  ::shutdown(fd_.get(), SHUT_RDWR);
}

void Membership::handle_push(const std::string& payload, std::vector<Event>* events) {
  wire::Reader r(std::span<const std::byte>(reinterpret_cast<const std::byte*>(payload.data()),
                                            payload.size()));
  auto type = static_cast<CtlType>(r.u8());
  std::lock_guard<std::mutex> g(mu_);
  if (type == CtlType::kMemberUp) {
    Member m;
    if (get_member(r, &m)) {
      members_[m.node] = m;
      events->push_back({true, m.node});
    }
  } else if (type == CtlType::kMemberDown) {
    NodeId n = r.u32();
    if (r.ok()) {
      members_.erase(n);
      events->push_back({false, n});  // n == self(): the manager declared this node down
    }
  } else if (type == CtlType::kNameReply) {
    uint64_t req = r.u64();
    uint8_t raw = r.u8();
    auto code = raw < kNumCodes ? static_cast<Code>(raw) : Code::kMalformed;
    NodeId node = r.u32();
    auto it = pending_.find(req);
    if (r.ok() && it != pending_.end()) {
      it->second = Pending{true, code, node};
      cv_.notify_all();
    }
  }
}

Status Membership::on_readable(std::vector<Event>* events) {
  Status fs = in_.fill(fd_.get());
  std::string payload;
  for (;;) {
    Status s = in_.next(&payload);
    if (s.code() == Code::kNoResource) break;
    if (!s.is_ok()) {
      fs = Code::kMalformed;
      break;
    }
    handle_push(payload, events);
  }
  if (!fs.is_ok()) {
    std::lock_guard<std::mutex> g(mu_);
    if (!manager_lost_ && !leaving_) LT_WARN("lost the connection to ltier-manager");
    manager_lost_ = true;
    cv_.notify_all();
    return Code::kPeerDown;
  }
  return Status::ok();
}

int Membership::heartbeat(uint64_t now) {
  if (next_beat_ns_ != 0 && now > next_beat_ns_ + 300000000ull) {
    // The progress thread was held up (a blocking handler, a stalled pass):
    // the manager may declare this node down. Say so where it happened.
    LT_WARN("heartbeat %llu ms late: the progress thread was held up",
            static_cast<unsigned long long>((now - next_beat_ns_) / 1000000));
  }
  if (now >= next_beat_ns_) {
    std::string f = begin_ctl(CtlType::kHeartbeat);
    finish_ctl(&f);
    (void)send_frame(f, Deadline::after_ms(heartbeat_ms_));
    next_beat_ns_ = now + heartbeat_ms_ * 1000000ull;
  }
  return static_cast<int>((next_beat_ns_ - now) / 1000000ull) + 1;
}

std::optional<transport::PeerInfo> Membership::peer(NodeId n) const {
  std::lock_guard<std::mutex> g(mu_);
  auto it = members_.find(n);
  if (it == members_.end()) return std::nullopt;
  // The record's address list is the transports' business: handed on as is.
  return transport::PeerInfo{n, it->second.host_id,
                             transport::parse_addresses(it->second.addresses)};
}

std::vector<Member> Membership::members() const {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<Member> v;
  for (auto& [id, m] : members_) v.push_back(m);
  return v;
}

bool Membership::alive(NodeId n) const {
  std::lock_guard<std::mutex> g(mu_);
  return members_.count(n) != 0;
}

std::string Membership::ctl_frame(CtlType t, uint64_t req, const std::string& name,
                                  const CtlArgs& a) {
  std::string f = begin_ctl(t);
  wire::Writer w(&f);
  w.u64(req);
  w.str(name);
  if (a.has_u64) w.u64(a.u64);
  if (a.has_u32) w.u32(a.u32);
  finish_ctl(&f);
  return f;
}

Result<NodeId> Membership::name_call(CtlType t, const std::string& name, Deadline d,
                                     const CtlArgs& args, uint64_t* req_out) {
  uint64_t req;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (manager_lost_) return Code::kPeerDown;
    req = next_req_++;
    pending_[req] = Pending{};
  }
  if (req_out) *req_out = req;
  Status s = send_frame(ctl_frame(t, req, name, args), d);
  std::unique_lock<std::mutex> g(mu_);
  if (!s.is_ok()) {
    pending_.erase(req);
    return Code::kPeerDown;
  }
  for (;;) {
    auto it = pending_.find(req);
    if (it->second.done) {
      Pending p = it->second;
      pending_.erase(it);
      if (p.code != Code::kOk) return p.code;
      return p.node;
    }
    if (manager_lost_) {
      pending_.erase(it);
      return Code::kPeerDown;
    }
    uint64_t left = d.remaining_ns();
    if (left == 0) {
      pending_.erase(it);
      return Code::kTimedOut;
    }
    cv_.wait_for(g, std::chrono::nanoseconds(std::min<uint64_t>(left, 100000000ull)));
  }
}

Status Membership::post_only(CtlType t, uint64_t req, const std::string& name,
                             const CtlArgs& args) {
  return send_frame(ctl_frame(t, req, name, args), Deadline::after_ms(1000));
}

uint64_t Membership::new_req() {
  std::lock_guard<std::mutex> g(mu_);
  return next_req_++;
}

Status Membership::register_name(const std::string& name, Deadline d) {
  return name_call(CtlType::kNameRegister, name, d).status();
}
Status Membership::unregister_name(const std::string& name, Deadline d) {
  return name_call(CtlType::kNameUnregister, name, d).status();
}
Result<NodeId> Membership::lookup_name(const std::string& name, Deadline d) {
  return name_call(CtlType::kNameLookup, name, d);
}

}  // namespace lt::proto
