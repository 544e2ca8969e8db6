#include "proto/manager.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "common/config.h"
#include "common/log.h"
#include "common/siphash.h"
#include "common/time.h"

namespace lt::proto {

Manager::Manager(ManagerOptions o) : opt_(std::move(o)) {}
Manager::~Manager() = default;

Status Manager::start() {
  sockaddr_in bound{};
  auto fd = net::listen_on(opt_.listen, "manager: listen address", &bound);
  if (!fd) return fd.status();
  listen_fd_ = std::move(fd.value());
  address_ = net::to_string(bound);
  epfd_.reset(epoll_create1(EPOLL_CLOEXEC));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;
  epoll_ctl(epfd_.get(), EPOLL_CTL_ADD, listen_fd_.get(), &ev);
  do {
    token_ = random_u64();
  } while (token_ == 0);
  // Room for many nodes: the soft descriptor limit up to the hard one. The
  // unjoined cap stays below half of it, so members always find room.
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &nofile);
    (void)getrlimit(RLIMIT_NOFILE, &nofile);
  }
  max_unjoined_ = std::max<size_t>(
      1, std::min<size_t>(opt_.max_unjoined, static_cast<size_t>(nofile.rlim_cur / 2)));
  spare_fd_.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (opt_.recover_ms != 0) recover_until_ns_ = now_ns() + opt_.recover_ms * 1000000ull;
  max_slot_ = std::clamp<uint32_t>(opt_.max_nodes, 1, kMaxMembers);
  for (uint32_t s = 1; s <= max_slot_; ++s) free_slots_.push_back(s);
  return Status::ok();
}

uint32_t Manager::next_fresh_id() const {
  for (uint32_t s : free_slots_) {
    const SlotState& st = slots_[s];
    uint32_t gen = st.known ? st.gen + 1 : 0;
    if (st.holder == 0 && !st.reserved && gen <= kMaxNodeGen) return gen * kNodeSlots + s;
  }
  return 0;
}

void Manager::take_slot(uint32_t id) {
  SlotState& st = slots_[node_slot(id)];
  st = SlotState{node_gen(id), true, true, id, false};
  std::erase(free_slots_, node_slot(id));
  ++joins_;
}

void Manager::raise_slot(uint32_t id) {
  uint32_t slot = node_slot(id);
  if (slot == 0 || slot > max_slot_) return;
  SlotState& st = slots_[slot];
  if (st.known && node_gen(id) <= st.gen) return;
  if (st.holder != 0) return;  // a member holds it: it is the newest
  st.gen = node_gen(id);
  st.known = true;
  st.admitted = false;
}

void Manager::joined_or_gone(Client* c) {
  if (c->node != 0 || c->unjoined == unjoined_.end()) return;
  unjoined_.erase(c->unjoined);
  c->unjoined = unjoined_.end();
}

void Manager::accept_all() {
  for (;;) {
    int fd = accept4(listen_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      if ((errno == EMFILE || errno == ENFILE) && spare_fd_.valid()) {
        // Out of descriptors: take the newcomer with the spare one and close
        // it, so the listener does not stay readable for ever (a busy loop).
        spare_fd_.reset();
        int refused = accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC);
        if (refused >= 0) ::close(refused);
        spare_fd_.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
        ++refused_;
        continue;
      }
      return;  // EAGAIN
    }
    if (unjoined_.size() >= max_unjoined_) {
      ++refused_;
      drop(unjoined_.front(), "too many connections that have not joined");
    }
    net::set_nodelay(fd);
    auto cl = std::make_unique<Client>();
    cl->fd.reset(fd);
    cl->last_seen_ns = cl->connected_ns = now_ns();
    cl->unjoined = unjoined_.insert(unjoined_.end(), cl.get());
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.ptr = cl.get();
    epoll_ctl(epfd_.get(), EPOLL_CTL_ADD, fd, &ev);
    Client* c = cl.get();
    clients_[c] = std::move(cl);
    if (!make_nonce(&c->challenge)) {
      drop(c, "no random nonce (the system's random source failed)");
      continue;
    }
    send(c, challenge_frame(c->challenge));
  }
}

void Manager::send(Client* c, const std::string& frame) {
  // Control frames are small; a node that cannot take one within 500 ms is
  // treated as gone rather than stalling the whole cluster.
  Status s = net::write_all(c->fd.get(), frame.data(), frame.size(), Deadline::after_ms(500));
  if (!s.is_ok()) ::shutdown(c->fd.get(), SHUT_RDWR);
}

void Manager::broadcast(const std::string& frame, uint32_t except) {
  for (auto& [id, c] : members_) {
    if (id != except) send(c, frame);
  }
}

void Manager::reply(Client* c, uint64_t req, Code code, uint32_t node) {
  std::string f = begin_ctl(CtlType::kNameReply);
  wire::Writer w(&f);
  w.u64(req);
  w.u8(static_cast<uint8_t>(code));
  w.u32(node);
  finish_ctl(&f);
  send(c, f);
}

void Manager::grant_next(const std::string& name, Lock& l) {
  if (l.waiters.empty()) {
    locks_.erase(name);  // `l` dies here
    return;
  }
  Waiter w = l.waiters.front();
  l.waiters.pop_front();
  l.holder = w.client;
  l.owner = w.owner;
  reply(w.client, w.req, Code::kOk, w.client->node);
}

// A node that leaves or dies releases its locks (the next waiter gets them)
// and its barrier arrivals; the other arrivals keep waiting for a full count.
void Manager::forget_client(Client* c) {
  for (auto it = locks_.begin(); it != locks_.end();) {
    Lock& l = it->second;
    std::erase_if(l.waiters, [c](const Waiter& w) { return w.client == c; });
    if (l.holder == c) {
      std::string name = it->first;
      ++it;
      grant_next(name, locks_[name]);
    } else {
      ++it;
    }
  }
  for (auto it = barriers_.begin(); it != barriers_.end();) {
    std::erase_if(it->second.arrived, [c](const Waiter& w) { return w.client == c; });
    it = it->second.arrived.empty() ? barriers_.erase(it) : std::next(it);
  }
}

void Manager::drop(Client* c, const char* why) {
  uint32_t node = c->node;
  joined_or_gone(c);
  forget_client(c);
  std::erase_if(held_, [c](const Held& h) { return h.client == c; });
  epoll_ctl(epfd_.get(), EPOLL_CTL_DEL, c->fd.get(), nullptr);
  auto owned = std::move(clients_[c]);
  clients_.erase(c);
  if (node == 0) return;
  members_.erase(node);
  slots_[node_slot(node)].holder = 0;
  free_slots_.push_back(node_slot(node));
  for (auto it = names_.begin(); it != names_.end();) {
    it = it->second == node ? names_.erase(it) : std::next(it);
  }
  if (opt_.verbose) fprintf(stderr, "ltier-manager: node %u down (%s)\n", node, why);
  std::string f = begin_ctl(CtlType::kMemberDown);
  wire::Writer w(&f);
  w.u32(node);
  finish_ctl(&f);
  broadcast(f, 0);
}

void Manager::handle(Client* c, const std::string& payload) {
  auto bytes = std::span<const std::byte>(reinterpret_cast<const std::byte*>(payload.data()),
                                          payload.size());
  wire::Reader r(bytes);
  auto type = static_cast<CtlType>(r.u8());
  c->last_seen_ns = now_ns();
  if (c->node == 0) {
    if (type == CtlType::kJoin) return on_join(c, payload);
    return drop(c, "spoke before joining");
  }
  switch (type) {
    case CtlType::kHeartbeat:
      return;
    case CtlType::kLeave:
      return drop(c, "left");
    case CtlType::kLockAcquire:
    case CtlType::kLockRelease:
      return on_lock(c, type, r);
    case CtlType::kBarrier:
      return on_barrier(c, r);
    case CtlType::kNameRegister:
    case CtlType::kNameLookup:
    case CtlType::kNameUnregister:
      return on_name(c, type, r);
    default:
      return drop(c, "unexpected control message");
  }
}

void Manager::on_join(Client* c, const std::string& payload) {
  JoinRequest j;
  Nonce node_nonce{};
  if (std::any_of(held_.begin(), held_.end(), [c](const Held& h) { return h.client == c; })) {
    return drop(c, "joined twice");
  }
  Code code = open_join(payload, opt_.secret, c->challenge, &j, &node_nonce);
  if (code == Code::kMalformed) return drop(c, "malformed join");
  if (code == Code::kAuth) {
    return refuse_join(c, "?", Code::kAuth, "wrong cluster secret (or a replayed join)");
  }
  Member m;
  m.name = j.name;
  m.addresses = j.addresses;
  m.host_id = j.host_id;
  m.rank = j.rank;
  if (j.claim_node != 0) return readmit(c, j, std::move(m), node_nonce);
  if (next_fresh_id() == 0) {
    return refuse_join(c, m.name, Code::kNoResource,
                       "cluster is full (" + std::to_string(max_slot_) + " members)");
  }
  if (now_ns() < recover_until_ns_) {
    // Answered when the recovery time ends (admit_held): the survivors'
    // claims come first, so this node gets an id none of them knows.
    joined_or_gone(c);
    held_.push_back({c, std::move(m), node_nonce});
    return;
  }
  admit(c, std::move(m), node_nonce);
}

void Manager::admit_held() {
  std::vector<Held> held = std::move(held_);
  held_.clear();
  for (Held& h : held) {
    if (clients_.find(h.client) == clients_.end()) continue;
    if (next_fresh_id() == 0) {
      refuse_join(h.client, h.member.name, Code::kNoResource, "cluster is full");
    } else {
      admit(h.client, std::move(h.member), h.nonce);
    }
  }
}

void Manager::refuse_join(Client* c, const std::string& name, Code code, const std::string& why) {
  std::string f = begin_ctl(CtlType::kJoinRefused);
  wire::Writer w(&f);
  w.u8(static_cast<uint8_t>(code));
  w.str(why);
  finish_ctl(&f);
  send(c, f);
  if (opt_.verbose) {
    fprintf(stderr, "ltier-manager: refused join from '%s': %s\n", name.c_str(), why.c_str());
  }
  drop(c, "refused");
}

// The newcomer learns everyone already in (itself first); they learn of it
// before it is added, so it is not told about itself twice.
void Manager::admit(Client* c, Member m, const Nonce& node_nonce) {
  joined_or_gone(c);
  if (m.node == 0) m.node = next_fresh_id();  // checked by the caller
  take_slot(m.node);
  c->node = m.node;
  c->member = m;
  std::string answer;
  wire::Writer w(&answer);
  w.u32(m.node);
  w.u64(token_);
  w.u32(opt_.heartbeat_ms);
  w.u32(opt_.down_after_ms);
  w.u32(static_cast<uint32_t>(members_.size() + 1));
  put_member(w, m);
  for (auto& [id, other] : members_) put_member(w, other->member);
  send(c, join_ok_frame(opt_.secret, node_nonce, c->challenge, answer));
  std::string up = begin_ctl(CtlType::kMemberUp);
  wire::Writer wu(&up);
  put_member(wu, m);
  finish_ctl(&up);
  broadcast(up, 0);
  members_[m.node] = c;
  if (opt_.verbose) {
    fprintf(stderr, "ltier-manager: node %u '%s' joined (%s)\n", m.node, m.name.c_str(),
            m.addresses.c_str());
  }
}

// A restarted manager knows nothing: the members that outlived the old one
// tell it. The first claim fixes the cluster token; every claim raises the
// next fresh id above the highest id its claimant has seen, and brings back
// the locks it holds and the names it registered. An id this manager has
// already admitted is never admitted again: its holder was declared down,
// or another process holds it.
void Manager::readmit(Client* c, const JoinRequest& j, Member m, const Nonce& node_nonce) {
  if (!token_adopted_ && members_.empty() && joins_ == 0) {
    token_ = j.claim_token;
    token_adopted_ = true;
  }
  const uint32_t id = j.claim_node;
  if (j.claim_token == token_) {
    for (uint32_t seen : j.seen) {
      if (seen != id) raise_slot(seen);  // one newer than the claimant in its slot refuses it
    }
  }
  const SlotState& st = slots_[node_slot(id)];
  std::string why;
  if (j.claim_token != token_) {
    why = "this manager serves another cluster (its token differs)";
  } else if (node_slot(id) == 0 || node_slot(id) > max_slot_) {
    why = "node id out of range";
  } else if (st.holder != 0) {
    why = "node id " + std::to_string(id) + " is taken";
  } else if (st.known && (node_gen(id) < st.gen || (node_gen(id) == st.gen && st.admitted))) {
    why = "node " + std::to_string(id) + " was declared down";
  }
  if (!why.empty()) return refuse_join(c, m.name, Code::kClosed, why);
  // The survivors get as long as the down time (at least the recovery time)
  // from the first claim to come back, as they would have to keep their
  // place under the old manager.
  if (claims_until_ns_ == 0) {
    claims_until_ns_ =
        std::max<uint64_t>(recover_until_ns_, now_ns() + opt_.down_after_ms * 1000000ull);
  }
  for (uint32_t k : j.known) {
    SlotState& ks = slots_[node_slot(k)];
    bool gone = ks.known && (node_gen(k) < ks.gen || (node_gen(k) == ks.gen && ks.admitted));
    if (node_slot(k) == 0 || gone || ks.holder != 0) continue;
    expected_.insert(k);
    ks.reserved = true;  // no fresh node takes its slot while it may come back
  }
  expected_.erase(id);
  m.node = id;
  for (const std::string& name : j.names) names_.try_emplace(name, id);
  admit(c, std::move(m), node_nonce);
  for (const auto& [name, owner] : j.locks) {
    auto [it, fresh] = locks_.try_emplace(name);
    if (fresh) {
      it->second.holder = c;
      it->second.owner = owner;
    }
  }
}

// The members some survivor knew that did not claim their place back in
// time died while there was no manager: declared down now, as the old
// manager would have, and never admitted again.
void Manager::end_claims() {
  claims_until_ns_ = 0;
  for (uint32_t id : expected_) {
    if (members_.count(id) != 0) continue;
    SlotState& st = slots_[node_slot(id)];
    st.reserved = false;
    if (st.holder == 0 && (!st.known || node_gen(id) >= st.gen)) {
      st = SlotState{node_gen(id), true, true, 0, false};  // never admitted again
    }
    if (opt_.verbose) fprintf(stderr, "ltier-manager: node %u down (did not come back)\n", id);
    std::string f = begin_ctl(CtlType::kMemberDown);
    wire::Writer w(&f);
    w.u32(id);
    finish_ctl(&f);
    broadcast(f, 0);
  }
  expected_.clear();
}

void Manager::on_lock(Client* c, CtlType type, wire::Reader& r) {
  uint64_t req = r.u64();
  std::string name(r.str(256));
  uint64_t owner = r.u64();
  if (!r.ok() || !r.at_end() || name.empty()) return drop(c, "malformed lock request");
  if (type == CtlType::kLockAcquire) return acquire_lock(c, req, name, owner);
  release_lock(c, req, name, owner);
}

void Manager::acquire_lock(Client* c, uint64_t req, const std::string& name, uint64_t owner) {
  auto [it, fresh] = locks_.try_emplace(name);
  Lock& l = it->second;
  if (fresh) {
    l.holder = c;
    l.owner = owner;
    reply(c, req, Code::kOk, c->node);
  } else if (l.holder == c && l.owner == owner) {
    reply(c, req, Code::kExists);  // not reentrant: the caller already holds it
  } else {
    l.waiters.push_back({c, owner, req});
  }
}

void Manager::release_lock(Client* c, uint64_t req, const std::string& name, uint64_t owner) {
  auto it = locks_.find(name);
  if (it == locks_.end()) return reply(c, req, Code::kPerm);
  Lock& l = it->second;
  if (l.holder == c && l.owner == owner) {
    reply(c, req, Code::kOk);
    grant_next(name, l);
    return;
  }
  // Not the holder: withdraw a waiting acquire of this owner (a caller
  // that timed out), else refuse.
  size_t before = l.waiters.size();
  std::erase_if(l.waiters, [&](const Waiter& w) { return w.client == c && w.owner == owner; });
  reply(c, req, l.waiters.size() != before ? Code::kOk : Code::kPerm);
}

void Manager::on_barrier(Client* c, wire::Reader& r) {
  uint64_t req = r.u64();
  std::string name(r.str(256));
  uint32_t count = r.u32();
  if (!r.ok() || !r.at_end() || name.empty()) return drop(c, "malformed barrier request");
  if (count == 0) return withdraw_arrival(c, req, name);
  Barrier& b = barriers_[name];
  if (count > kMaxBarrierCount || (b.count != 0 && b.count != count)) {
    if (b.arrived.empty()) barriers_.erase(name);
    return reply(c, req, Code::kInvalidArg);
  }
  b.count = count;
  b.arrived.push_back({c, 0, req});
  if (b.arrived.size() == count) {
    std::vector<Waiter> go = std::move(b.arrived);
    barriers_.erase(name);
    for (auto& w : go) reply(w.client, w.req, Code::kOk);
  }
}

// A caller whose barrier wait timed out takes back arrival `req`; it waits
// for no answer.
void Manager::withdraw_arrival(Client* c, uint64_t req, const std::string& name) {
  auto it = barriers_.find(name);
  if (it == barriers_.end()) return;
  std::erase_if(it->second.arrived, [&](const Waiter& w) { return w.client == c && w.req == req; });
  if (it->second.arrived.empty()) barriers_.erase(it);
}

void Manager::on_name(Client* c, CtlType type, wire::Reader& r) {
  uint64_t req = r.u64();
  std::string name(r.str(256));
  if (!r.ok() || !r.at_end() || name.empty()) return drop(c, "malformed name request");
  Code code = Code::kOk;
  uint32_t node = 0;
  auto it = names_.find(name);
  if (type == CtlType::kNameRegister) {
    if (it != names_.end()) {
      code = Code::kExists;
      node = it->second;
    } else {
      names_[name] = c->node;
      node = c->node;
    }
  } else if (type == CtlType::kNameLookup) {
    if (it == names_.end()) {
      code = Code::kNotFound;
    } else {
      node = it->second;
    }
  } else {
    if (it == names_.end()) {
      code = Code::kNotFound;
    } else if (it->second != c->node) {
      code = Code::kPerm;
    } else {
      names_.erase(it);
    }
  }
  reply(c, req, code, node);
}

void Manager::on_readable(Client* c) {
  Status s = c->in.fill(c->fd.get());
  std::string payload;
  for (;;) {
    Status n = c->in.next(&payload);
    if (n.code() == Code::kNoResource) break;
    if (!n.is_ok()) {
      drop(c, "malformed frame");
      return;
    }
    handle(c, payload);
    if (clients_.find(c) == clients_.end()) return;
  }
  if (!s.is_ok()) drop(c, "connection closed");
}

void Manager::check_timeouts() {
  uint64_t now = now_ns();
  uint64_t limit = static_cast<uint64_t>(opt_.down_after_ms) * 1000000ull;
  std::vector<Client*> dead;
  for (auto& [id, c] : members_) {
    if (now - c->last_seen_ns > limit) dead.push_back(c);
  }
  for (Client* c : dead) {
    // Tell the node itself first: a stopped or stalled one reads this when
    // it runs again, and fails loudly instead of serving as an orphan.
    std::string f = begin_ctl(CtlType::kMemberDown);
    wire::Writer w(&f);
    w.u32(c->node);
    finish_ctl(&f);
    send(c, f);
    drop(c, "heartbeat timeout");
  }
  if (!held_.empty() && now >= recover_until_ns_) admit_held();
  if (claims_until_ns_ != 0 && now >= claims_until_ns_) end_claims();
  // The unjoined list is in connection order: the stale ones are in front.
  const uint64_t join_limit = static_cast<uint64_t>(opt_.join_timeout_ms) * 1000000ull;
  while (!unjoined_.empty() && now - unjoined_.front()->connected_ns > join_limit) {
    drop(unjoined_.front(), "no join in time");
  }
}

Status Manager::run(const std::atomic<bool>& stop) {
  epoll_event evs[64];
  while (!stop.load()) {
    int timeout =
        static_cast<int>(std::min<uint32_t>(100, std::max<uint32_t>(1, opt_.down_after_ms / 4)));
    int n = epoll_wait(epfd_.get(), evs, 64, timeout);
    for (int i = 0; i < n; ++i) {
      auto* c = static_cast<Client*>(evs[i].data.ptr);
      if (c == nullptr) {
        accept_all();
        continue;
      }
      if (clients_.find(c) != clients_.end()) on_readable(c);
    }
    check_timeouts();
  }
  return Status::ok();
}

}  // namespace lt::proto
