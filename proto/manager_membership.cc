#include "proto/manager_membership.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "common/time.h"

namespace lt::proto {

namespace {
constexpr uint64_t kJoinSpinNs = 300 * 1000;
}  // namespace

Status ManagerMembership::send_frame(const std::string& f, Deadline d) {
  std::lock_guard<std::mutex> g(send_mu_);
  return net::write_all(fd_.get(), f.data(), f.size(), d);
}

ManagerMembership::~ManagerMembership() { stop_rejoin(); }

namespace {
// Next control frame on `fd` into *payload, waiting until `d`. The answer
// usually comes within a few hundred microseconds: poll the socket for a
// short while before sleeping, which saves a wake-up. On EOF a frame the
// manager wrote before closing (a refusal) is still returned.
Status read_frame(int fd, CtlStream* in, Deadline d, std::string* payload) {
  const uint64_t spin_until = now_ns() + kJoinSpinNs;
  for (;;) {
    Status s = in->next(payload);
    if (s.is_ok()) return s;
    if (s.code() != Code::kNoResource) return Code::kMalformed;
    pollfd p{fd, POLLIN, 0};
    bool spinning = now_ns() < spin_until;
    int n = ::poll(&p, 1, spinning ? 0 : d.remaining_ms());
    if (n == 0 && spinning) continue;
    if (n == 0) return Code::kTimedOut;
    if (!in->fill(fd).is_ok()) return in->next(payload).is_ok() ? Status::ok() : Code::kPeerDown;
  }
}
}  // namespace

Status ManagerMembership::open_manager(Deadline d, net::Fd* fd, bool quiet) {
  const std::string& where = cluster_.manager;
  std::string host;
  uint16_t port = 0;
  sockaddr_in addr{};
  if (!parse_host_port(where, &host, &port).is_ok() || !net::resolve(host, port, &addr).is_ok()) {
    LT_ERROR("join: cluster.manager '%s' is not a valid host:port", where.c_str());
    return Code::kInvalidArg;
  }
  auto c = net::connect_tcp(addr, d);
  if (!c) {
    if (!quiet) {
      LT_ERROR("join: cannot reach ltier-manager at %s (%s)", where.c_str(), c.status().name());
    }
    return c.status().code() == Code::kTimedOut ? Code::kTimedOut : Code::kPeerDown;
  }
  *fd = std::move(c.value());
  return Status::ok();
}

Status ManagerMembership::handshake(const JoinRequest& j, Deadline d, net::Fd* fd, CtlStream* in,
                                    std::string* answer) {
  const std::string& where = cluster_.manager;
  if (!fd->valid()) LT_RETURN_IF_ERROR(open_manager(d, fd, j.claim_node != 0));
  // Our nonce first: its first use sets up libsodium (tens of µs), which
  // then overlaps the manager's wake-up for its challenge.
  std::string payload;
  Nonce theirs{}, mine{};
  Status s = make_nonce(&mine) ? Status::ok() : Status(Code::kSys);
  if (s.is_ok()) s = read_frame(fd->get(), in, d, &payload);
  if (s.is_ok() && !parse_challenge(payload, &theirs)) s = Code::kMalformed;
  if (s.is_ok()) {
    std::string f = join_frame(cluster_.secret, theirs, mine, j);
    s = net::write_all(fd->get(), f.data(), f.size(), d);
  }
  if (s.is_ok()) s = read_frame(fd->get(), in, d, &payload);
  if (!s.is_ok()) {
    if (j.claim_node == 0) {
      LT_ERROR("join: ltier-manager at %s %s", where.c_str(),
               s.code() == Code::kTimedOut ? "did not answer in time" : "closed the connection");
    }
    return s.code() == Code::kTimedOut ? Code::kTimedOut : Code::kPeerDown;
  }
  wire::Reader r(std::span<const std::byte>(reinterpret_cast<const std::byte*>(payload.data()),
                                            payload.size()));
  auto type = static_cast<CtlType>(r.u8());
  if (type == CtlType::kJoinRefused) {
    uint8_t raw = r.u8();
    auto code = raw < kNumCodes ? static_cast<Code>(raw) : Code::kMalformed;
    std::string reason(r.str(256));
    LT_ERROR("%s refused by ltier-manager at %s: %s", j.claim_node ? "rejoin" : "join",
             where.c_str(), reason.c_str());
    if (r.ok() && (code == Code::kAuth || code == Code::kClosed)) return code;
    return Code::kNoResource;
  }
  if (type != CtlType::kJoinOk) return Code::kMalformed;
  Code code = open_join_ok(payload, cluster_.secret, mine, theirs, answer);
  if (code == Code::kAuth) {
    LT_ERROR("join: the manager at %s does not know the cluster secret", where.c_str());
  }
  return code;
}

Status ManagerMembership::adopt(const std::string& answer, std::map<NodeId, Member>* members) {
  wire::Reader r(
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(answer.data()), answer.size()));
  NodeId self = r.u32();
  uint64_t token = r.u64();
  uint32_t heartbeat_ms = r.u32();
  r.u32();  // down_after_ms: informative
  uint32_t count = r.u32();
  if (!r.ok() || count > kMaxMembers || self == 0) return Code::kMalformed;
  for (uint32_t i = 0; i < count; ++i) {
    Member m;
    if (!get_member(r, &m)) return Code::kMalformed;
    (*members)[m.node] = m;
  }
  if (self_ != 0 && (self != self_ || token != token_)) return Code::kMalformed;  // a claim
  self_ = self;
  token_ = token;
  heartbeat_ms_ = heartbeat_ms != 0 ? heartbeat_ms : 200;
  return Status::ok();
}

void ManagerMembership::prepare(const ClusterConfig& cluster, Deadline d) {
  cluster_ = cluster;
  prepared_ = open_manager(d, &fd_, false);
  if (prepared_.is_ok()) prepare_mac();
}

Status ManagerMembership::join(const JoinInfo& info, Deadline d) {
  const ClusterConfig& c = info.cluster;
  // prepare() connected, or found the manager out of reach (and said so).
  if (!prepared_.is_ok()) return prepared_;
  cluster_ = c;
  std::string name = default_node_name(c.node_name);
  request_ = JoinRequest{};
  request_.name = name;
  request_.addresses = info.addresses;
  request_.host_id = net::host_id();
  request_.tenant = info.tenant;
  request_.rank = info.rank;
  std::string answer;
  LT_RETURN_IF_ERROR(handshake(request_, d, &fd_, &in_, &answer));
  std::map<NodeId, Member> members;
  LT_RETURN_IF_ERROR(adopt(answer, &members));
  {
    std::lock_guard<std::mutex> g(mu_);
    members_ = std::move(members);
    for (auto& [id, m] : members_) note_seen(id);
  }
  next_beat_ns_ = now_ns() + heartbeat_ms_ * 1000000ull;
  // Pushes that arrived with the JoinOk (a node joining right after us) are
  // already in our buffer; the socket will not signal them again.
  std::vector<Event> early;
  std::string payload;
  while (in_.next(&payload).is_ok()) handle_push(payload, &early);
  return Status::ok();
}

void ManagerMembership::leave() {
  stop_rejoin();
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

// The thread handle moves under mu_ (the progress thread starts rejoin
// threads under it too); the join happens outside it, since the thread
// takes mu_.
void ManagerMembership::stop_rejoin() {
  std::thread t;
  {
    std::lock_guard<std::mutex> g(mu_);
    leaving_ = true;
    cv_.notify_all();
    t = std::move(rejoiner_);
  }
  if (t.joinable()) t.join();
}

// The rejoin thread: claims this node's place back from whichever manager
// answers at cluster.manager, retrying with backoff (50 ms doubling to 1 s)
// until it is admitted, refused, or the engine leaves.
void ManagerMembership::rejoin_loop() {
  uint32_t backoff_ms = 50;
  for (;;) {
    JoinRequest j = request_;
    {
      std::unique_lock<std::mutex> g(mu_);
      cv_.wait_for(g, std::chrono::milliseconds(backoff_ms), [&] { return leaving_; });
      if (leaving_) return;
      j.claim_node = self_;
      j.claim_token = token_;
      for (auto& [slot, id] : seen_) j.seen.push_back(id);
      j.locks.assign(held_locks_.begin(), held_locks_.end());
      j.names.assign(my_names_.begin(), my_names_.end());
      for (auto& [id, m] : members_) {
        if (id != self_) j.known.push_back(id);
      }
    }
    net::Fd fd;
    CtlStream in;
    std::string answer;
    Status s = handshake(j, Deadline::after_ms(500), &fd, &in, &answer);
    if (s.is_ok() || s.code() == Code::kClosed || s.code() == Code::kAuth) {
      {
        std::lock_guard<std::mutex> g(mu_);
        rejoin_refused_ = !s.is_ok();
        staged_fd_ = std::move(fd);
        staged_in_ = std::move(in);
        staged_answer_ = std::move(answer);
      }
      rejoin_ready_.store(true, std::memory_order_release);
      if (wake_) wake_();
      return;
    }
    backoff_ms = std::min<uint32_t>(backoff_ms * 2, 1000);
  }
}

bool ManagerMembership::finish_rejoin(std::vector<Event>* events) {
  rejoin_ready_.store(false, std::memory_order_relaxed);
  std::map<NodeId, Member> fresh;
  bool ok;
  {
    std::lock_guard<std::mutex> g(mu_);
    ok = !rejoin_refused_ && adopt(staged_answer_, &fresh).is_ok();
    if (!ok) {
      expelled_ = true;
      events->push_back({Event::kExpelled, self_});
      return false;
    }
    // Members that have not claimed their place back yet stay in the book:
    // the manager declares down those that do not come back in time.
    for (auto& [id, m] : fresh) {
      if (members_.count(id) == 0) events->push_back({Event::kUp, id});
      note_seen(id);
      members_[id] = m;
    }
    manager_lost_ = false;
  }
  {
    std::lock_guard<std::mutex> g(send_mu_);
    fd_ = std::move(staged_fd_);
  }
  in_ = std::move(staged_in_);
  lost_.store(false, std::memory_order_release);
  next_beat_ns_ = 0;  // say we are here at once
  events->push_back({Event::kRejoined, self_});
  LT_INFO("reconnected to ltier-manager at %s as node %u", cluster_.manager.c_str(), self_);
  std::string payload;
  while (in_.next(&payload).is_ok()) handle_push(payload, events);
  return true;
}

bool ManagerMembership::note_lock(const std::string& name, uint64_t owner, bool held) {
  std::lock_guard<std::mutex> g(mu_);
  if (held) return held_locks_.emplace(name, owner).second;
  return held_locks_.erase({name, owner}) != 0;
}

void ManagerMembership::handle_push(const std::string& payload, std::vector<Event>* events) {
  wire::Reader r(std::span<const std::byte>(reinterpret_cast<const std::byte*>(payload.data()),
                                            payload.size()));
  auto type = static_cast<CtlType>(r.u8());
  std::lock_guard<std::mutex> g(mu_);
  if (type == CtlType::kMemberUp) {
    Member m;
    if (get_member(r, &m)) {
      bool known = members_.count(m.node) != 0;
      members_[m.node] = m;
      note_seen(m.node);
      if (!known) events->push_back({Event::kUp, m.node});
    }
  } else if (type == CtlType::kMemberDown) {
    NodeId n = r.u32();
    if (r.ok() && n == self_) {
      expelled_ = true;  // the manager declared this node down
      events->push_back({Event::kExpelled, n});
    } else if (r.ok() && members_.erase(n) != 0) {
      events->push_back({Event::kDown, n});
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

Status ManagerMembership::on_readable(std::vector<Event>* events) {
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
    if (!manager_lost_ && !leaving_ && !expelled_ && reconnect_) {
      LT_WARN(
          "lost the connection to ltier-manager at %s: reconnecting (calls that need the "
          "manager fail with PEER_DOWN meanwhile)",
          cluster_.manager.c_str());
      events->push_back({Event::kManagerLost, self_});
      lost_.store(true, std::memory_order_release);
      // A rejoin thread that reconnected once before has returned by now.
      if (rejoiner_.joinable()) rejoiner_.join();
      rejoiner_ = std::thread([this] { rejoin_loop(); });
    }
    manager_lost_ = true;
    cv_.notify_all();
    return Code::kPeerDown;
  }
  return Status::ok();
}

int ManagerMembership::heartbeat(uint64_t now) {
  if (next_beat_ns_ != 0 && now > next_beat_ns_ + 300000000ull) {
    // The progress thread was held up (a blocking handler, a stalled pass):
    // the manager may declare this node down. Say so where it happened.
    LT_WARN("heartbeat %llu ms late: the progress thread was held up",
            static_cast<unsigned long long>((now - next_beat_ns_) / 1000000));
  }
  if (lost_.load(std::memory_order_acquire)) return static_cast<int>(heartbeat_ms_);
  if (now >= next_beat_ns_) {
    std::string f = begin_ctl(CtlType::kHeartbeat);
    finish_ctl(&f);
    (void)send_frame(f, Deadline::after_ms(heartbeat_ms_));
    next_beat_ns_ = now + heartbeat_ms_ * 1000000ull;
  }
  return static_cast<int>((next_beat_ns_ - now) / 1000000ull) + 1;
}

std::optional<transport::PeerInfo> ManagerMembership::peer(NodeId n) const {
  std::lock_guard<std::mutex> g(mu_);
  return peer_in(members_, n);
}

std::vector<Member> ManagerMembership::members() const {
  std::lock_guard<std::mutex> g(mu_);
  return members_in(members_);
}

bool ManagerMembership::alive(NodeId n) const {
  std::lock_guard<std::mutex> g(mu_);
  return members_.count(n) != 0;
}

std::string ManagerMembership::ctl_frame(CtlType t, uint64_t req, const std::string& name,
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

Result<NodeId> ManagerMembership::name_call(CtlType t, const std::string& name, Deadline d,
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

Status ManagerMembership::post_only(CtlType t, uint64_t req, const std::string& name,
                                    const CtlArgs& args) {
  return send_frame(ctl_frame(t, req, name, args), Deadline::after_ms(1000));
}

uint64_t ManagerMembership::new_req() {
  std::lock_guard<std::mutex> g(mu_);
  return next_req_++;
}

Status ManagerMembership::register_name(const std::string& name, Deadline d) {
  Status s = name_call(CtlType::kNameRegister, name, d).status();
  if (s.is_ok()) {
    std::lock_guard<std::mutex> g(mu_);
    my_names_.insert(name);
  }
  return s;
}
Status ManagerMembership::unregister_name(const std::string& name, Deadline d) {
  Status s = name_call(CtlType::kNameUnregister, name, d).status();
  if (s.is_ok() || s.code() == Code::kNotFound) {
    std::lock_guard<std::mutex> g(mu_);
    my_names_.erase(name);
  }
  return s;
}
Result<NodeId> ManagerMembership::lookup_name(const std::string& name, Deadline d) {
  return name_call(CtlType::kNameLookup, name, d);
}

// A lock acquire waits in the manager's queue: on timeout it is withdrawn
// (a release of this owner), and if the grant crossed the timeout, that
// release hands the lock on.
Status ManagerMembership::lock(const std::string& name, uint64_t owner, Deadline d) {
  const CtlArgs a = CtlArgs::of_u64(owner);
  auto r = name_call(CtlType::kLockAcquire, name, d, a);
  if (r.status().code() == Code::kTimedOut) {
    (void)post_only(CtlType::kLockRelease, new_req(), name, a);
  }
  if (r) note_lock(name, owner, true);  // claimed back after a manager restart
  return r.status();
}

Status ManagerMembership::unlock(const std::string& name, uint64_t owner, Deadline d) {
  Status s = name_call(CtlType::kLockRelease, name, d, CtlArgs::of_u64(owner)).status();
  if (s.is_ok()) note_lock(name, owner, false);
  // With the manager away, nobody can take the lock; forgetting it here means
  // it is not claimed back, so it is free under the restarted manager.
  if (s.code() == Code::kPeerDown && note_lock(name, owner, false)) return Status::ok();
  return s;
}

// A barrier arrival that times out is withdrawn: the same request id with a
// count of 0, which gets no answer.
Status ManagerMembership::barrier(const std::string& name, uint32_t count, Deadline d) {
  uint64_t req = 0;
  auto r = name_call(CtlType::kBarrier, name, d, CtlArgs::of_u32(count), &req);
  if (r.status().code() == Code::kTimedOut) {
    (void)post_only(CtlType::kBarrier, req, name, CtlArgs::of_u32(0));
  }
  return r.status();
}

}  // namespace lt::proto
