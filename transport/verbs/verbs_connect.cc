// The rc transport's connections: the QP address exchange over the control
// socket (verbs_conn.h), and posting on a connection (its QPs and channels
// come from qp_supply.cc).
#include <infiniband/verbs.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "common/log.h"
#include "common/time.h"
#include "common/tls.h"
#include "transport/verbs/verbs_transport.h"

namespace lt::transport::verbs {

QpWire to_wire(const QpAddress& a) {
  QpWire w{};
  w.qpn = a.qpn;
  w.psn = a.psn;
  std::memcpy(w.gid, a.gid.data(), 16);
  w.lid = a.lid;
  w.mtu = a.mtu;
  return w;
}

QpAddress from_wire(const QpWire& w) {
  QpAddress a;
  a.qpn = w.qpn;
  a.psn = w.psn & 0xffffff;
  std::memcpy(a.gid.data(), w.gid, 16);
  a.lid = w.lid;
  a.mtu = w.mtu;
  return a;
}

// --- VerbsConn ---

VerbsConn::VerbsConn(VerbsTransport* t, net::Fd fd, NodeId peer)
    : peer_(peer), created_ns_(now_ns()), t_(t), fd_(std::move(fd)) {}

VerbsConn::~VerbsConn() = default;

namespace {
uint32_t thread_index() {
  static std::atomic<uint32_t> next_thread{0};
  LT_TLS_FAST thread_local uint32_t me = next_thread.fetch_add(1, std::memory_order_relaxed);
  return me;
}
}  // namespace

// A thread keeps to one message channel, so its posts stay in order;
// threads spread over the K channels without a lock.
Channel* VerbsConn::pick_msg() { return channels_[thread_index() % msg_channels_].get(); }

// One-sided ops are done when they return, so any channel keeps their
// order; a thread keeps to one all the same, spreading threads over the R.
Channel* VerbsConn::pick_rdma() {
  const uint32_t r = static_cast<uint32_t>(channels_.size()) - msg_channels_;
  if (r == 0) return pick_msg();
  return channels_[msg_channels_ + thread_index() % r].get();
}

Result<size_t> VerbsConn::post(std::span<const WorkRequest> wrs) {
  if (dead_.load(std::memory_order_acquire) || channels_.empty()) return Status(Code::kPeerDown);
  const Caps& caps = t_->caps();
  if (wrs.size() == 2 && (wrs[0].flags & kWrGuard) != 0) {
    LT_RETURN_IF_ERROR(pick_rdma()->execute_guarded(wrs[0], wrs[1]));
    return size_t{2};
  }
  if (wrs.size() == 2 && (wrs[1].flags & kWrGuard) != 0) {
    LT_RETURN_IF_ERROR(pick_rdma()->execute_guard_after(wrs[0], wrs[1]));
    return size_t{2};
  }
  for (size_t i = 0; i < wrs.size(); ++i) {
    const WorkRequest& wr = wrs[i];
    Status s;
    if (wr.num_sge > kMaxSge) {
      s = Code::kInvalidArg;
    } else if (wr.op == Op::kSend || wr.op == Op::kWriteImm) {  // posted like a message
      uint64_t len = 0;
      for (int k = 0; k < wr.num_sge; ++k) len += wr.sge[k].len;
      if (len > caps.max_msg) {
        s = Code::kInvalidArg;
      } else {
        auto r = pick_msg()->post_message(wr);
        if (!r) {
          s = r.status();
        } else if (!*r) {
          return i;  // back-pressure
        }
      }
    } else {
      s = pick_rdma()->execute(wr);
      if (s.is_ok() && (wr.flags & kWrSignaled)) t_->report_send_done(wr.wr_id, Code::kOk);
    }
    if (!s.is_ok()) {
      if (i > 0) return i;
      return s;
    }
  }
  return wrs.size();
}

// --- channels of a connection ---

Status VerbsTransport::connect_channels(VerbsConn* conn, const ConnectReply& remote,
                                        std::string* why) {
  for (size_t i = 0; i < conn->channels_.size(); ++i) {
    LT_RETURN_IF_ERROR(conn->channels_[i]->qp().connect(from_wire(remote.qp[i]), why));
  }
  return Status::ok();
}

// Puts c's channels in the slot table (send completions find them there).
void VerbsTransport::add_channels(VerbsConn* c) {
  std::lock_guard<std::mutex> g(slots_mu_);
  for (auto& ch : c->channels_) {
    uint32_t slot;
    if (!free_slots_.empty()) {
      slot = free_slots_.back();
      free_slots_.pop_back();
    } else {
      slot = next_slot_++;
    }
    ChannelSlot& s = slots_[slot];
    ++s.gen;
    ch->set_slot(slot, s.gen);
    s.ch.store(ch.get(), std::memory_order_release);
  }
  std::lock_guard<SpinLock> q(qpn_mu_);
  for (auto& ch : c->channels_) by_qpn_[ch->qp().local().qpn] = ch.get();
}

// --- the dialer ---

// Whether `k` more QPs in connections stay within verbs.rc_qp_budget. Two
// connections made at once may both pass: the budget is a bound to within
// one connection.
bool VerbsTransport::qp_budget_allows(uint32_t k) const {
  if (config_.rc_qp_budget == 0) return true;
  const TransportStats s = stats();
  if (s.queue_pairs + k <= config_.rc_qp_budget) return true;
  LT_INFO("rc: %llu QPs in use, %u more would pass verbs.rc_qp_budget %u",
          static_cast<unsigned long long>(s.queue_pairs), k, config_.rc_qp_budget);
  return false;
}

Result<std::shared_ptr<VerbsConn>> VerbsTransport::dial(const PeerInfo& peer, Deadline d) {
  const NodeId self = self_.load(std::memory_order_acquire);
  const std::string address(peer.address(name()));
  std::string host;
  uint16_t port = 0;
  sockaddr_in addr{};
  if (address.empty()) return Code::kPeerDown;
  if (!parse_host_port(address, &host, &port).is_ok() || !net::resolve(host, port, &addr).is_ok()) {
    LT_ERROR("rc: node %u has a bad address '%s'", peer.node, address.c_str());
    return Code::kPeerDown;
  }
  const uint32_t k = config_.qps_per_peer;
  const uint32_t r = config_.rdma_qps_per_peer;
  if (!qp_budget_allows(k + r)) return Code::kNoResource;
  const uint64_t t0 = now_ns();
  auto fd = net::connect_tcp(addr, d);
  if (!fd) return fd.status();
  auto conn = std::make_shared<VerbsConn>(this, std::move(*fd), peer.node);
  ConnectRequest req{};
  req.hello = make_hello(kHelloLabel, self, peer.node, token_.load(),
                         hello_counter_.fetch_add(1) + 1, hello_key_);
  req.magic = kConnectMagic;
  req.count = k;
  req.rdma_count = r;
  auto fail = [&](Code code) {
    qps_.fetch_sub(conn->channels_.size());
    return Status(code);
  };
  if (Status s = make_channels(conn.get(), k, r); !s.is_ok()) return fail(s.code());
  const uint64_t t1 = now_ns();
  for (uint32_t i = 0; i < k + r; ++i) req.qp[i] = to_wire(conn->channels_[i]->qp().local());
  if (!net::write_all(conn->fd(), &req, sizeof(req), d).is_ok()) return fail(Code::kPeerDown);
  ConnectReply rep{};
  if (Status s = net::read_all(conn->fd(), &rep, sizeof(rep), d); !s.is_ok()) {
    return fail(s.code() == Code::kTimedOut ? Code::kTimedOut : Code::kPeerDown);
  }
  if (rep.magic == kConnectMagic && rep.status == static_cast<uint32_t>(Code::kNoResource)) {
    return fail(Code::kNoResource);  // its QP budget is spent: the next transport
  }
  if (rep.magic != kConnectMagic || rep.status != 0 || rep.count != k || rep.rdma_count != r) {
    LT_WARN("rc: node %u refused the QP exchange (status %u)", peer.node, rep.status);
    return fail(Code::kPeerDown);
  }
  const uint64_t t2 = now_ns();
  std::string why;
  if (!connect_channels(conn.get(), rep, &why).is_ok()) {
    LT_ERROR("rc: connecting to node %u: %s", peer.node, why.c_str());
    return fail(Code::kPeerDown);
  }
  const uint64_t t3 = now_ns();
  LT_DEBUG(
      "rc: connected to node %u in %.2f ms (socket and channels %.2f, exchange %.2f, "
      "QP state changes %.2f)",
      peer.node, (t3 - t0) / 1e6, (t1 - t0) / 1e6, (t2 - t1) / 1e6, (t3 - t2) / 1e6);
  add_channels(conn.get());  // before the peer may send: it waits for kReady
  const uint8_t ready = kReady;
  if (!net::write_all(conn->fd(), &ready, 1, d).is_ok()) {
    remove_channels(conn.get());  // nothing was posted on them: no completion will come
    return fail(Code::kPeerDown);
  }
  return conn;
}

Result<std::unique_ptr<Endpoint>> VerbsTransport::connect(const PeerInfo& peer, Deadline d) {
  if (self_.load(std::memory_order_acquire) == kNoNode) return Code::kNotJoined;
  if (auto c = conns_.serving(peer.node)) {
    return std::unique_ptr<Endpoint>(new ConnEndpoint<VerbsConn>(c));
  }
  const Deadline mine = Deadline::after_ms(config_.connect_timeout_ms);
  const Deadline until = mine.at_ns() < d.at_ns() ? mine : d;
  if (await_answered(peer.node, until)) {
    if (auto c = conns_.serving(peer.node)) {
      return std::unique_ptr<Endpoint>(new ConnEndpoint<VerbsConn>(c));
    }
  }
  auto conn = dial(peer, until);
  if (!conn) return conn.status();
  VerbsConn* raw = conn->get();
  // If a connection serves the node by now (the peer dialed us at the same
  // time and its kReady came first), ours is kept all the same: the peer may
  // have identified our dial first and serve on it, so closing it would
  // break the connection the peer uses, and both nodes would lose the pair.
  // Each side then posts on the one it identified first, and both stay
  // watched until the peer goes away.
  bool watched = false;
  auto served = conns_.add_dialed(
      peer.node, *conn,
      [&] {
        Status s = watch(*conn);
        watched = s.is_ok();
        return s;
      },
      true);
  if (!watched) {
    // Not in the table: its channels are, and the poller closes and sweeps them.
    conns_.add_accepted(*conn, [] { return true; });
    break_conn(raw);
    if (!served) return served.status();
  }
  return std::unique_ptr<Endpoint>(new ConnEndpoint<VerbsConn>(*served));
}

// --- the control thread ---

Status VerbsTransport::watch(const std::shared_ptr<VerbsConn>& c) {
  std::lock_guard<std::mutex> g(watch_mu_);
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.ptr = c.get();
  if (epoll_ctl(ctl_epfd_.get(), EPOLL_CTL_ADD, c->fd(), &ev) != 0) return Code::kSys;
  watched_[c.get()] = c;
  return Status::ok();
}

void VerbsTransport::unwatch(VerbsConn* c) {
  std::lock_guard<std::mutex> g(watch_mu_);
  epoll_ctl(ctl_epfd_.get(), EPOLL_CTL_DEL, c->fd(), nullptr);
  watched_.erase(c);
  if (c->state_ == VerbsConn::State::kAwaitReady) end_exchange_locked(c->peer());
}

void VerbsTransport::end_exchange_locked(NodeId node) {
  auto it = answered_.find(node);
  if (it != answered_.end()) answered_.erase(it);
}

// The node dialed us and we answered: its kReady is on its way, and its
// first messages may be served before the control thread reads it. A
// connection to it then waits for that one (bounded) rather than dialing a
// second.
bool VerbsTransport::await_answered(NodeId node, Deadline d) {
  for (;;) {
    {
      std::lock_guard<std::mutex> g(watch_mu_);
      if (answered_.count(node) == 0) return true;
    }
    if (d.expired()) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// Asleep in epoll but for set-up: accepts, answers exchanges, makes spare
// QPs and registered room ahead (refill_spares), and turns EOF on a socket
// into a broken connection for the poller. A connection it watches stays
// alive until it lets go (after the poller closed it). Refills wait while an
// exchange is under way: a dialer's kReady read late would let its first
// messages be served before the connection serves the node, and an answer
// to them would dial the node a second time.
void VerbsTransport::control_loop() {
  epoll_event evs[16];
  for (;;) {
    if (refill_due_.load() && !exchanges_under_way() && refill_due_.exchange(false)) {
      refill_spares();
    }
    int k = ::epoll_wait(ctl_epfd_.get(), evs, 16, 1000);
    for (int i = 0; i < k; ++i) {
      if (evs[i].data.u64 == kStopTag) return;
      if (evs[i].data.u64 == kRefillTag) {
        net::drain_eventfd(ctl_refill_.get());
        continue;
      }
      if (evs[i].data.u64 == kListenTag) {
        accept_all();
        continue;
      }
      std::shared_ptr<VerbsConn> c;
      {
        std::lock_guard<std::mutex> g(watch_mu_);
        auto it = watched_.find(static_cast<VerbsConn*>(evs[i].data.ptr));
        if (it != watched_.end()) c = it->second;
      }
      if (c) on_control(c, evs[i].events);
    }
    // Strangers that never finished the exchange are dropped.
    const uint64_t now = now_ns();
    std::vector<std::shared_ptr<VerbsConn>> stale;
    {
      std::lock_guard<std::mutex> g(watch_mu_);
      for (auto& [p, c] : watched_) {
        if (c->state_ != VerbsConn::State::kReady && now - c->created_ns_ > 5'000'000'000ull) {
          stale.push_back(c);
        }
      }
    }
    for (auto& c : stale) abandon(c);
  }
}

// Whether an accepted connection is still in its exchange (the control
// thread's: it alone moves state_).
bool VerbsTransport::exchanges_under_way() {
  std::lock_guard<std::mutex> g(watch_mu_);
  for (auto& [p, c] : watched_) {
    if (c->state_ != VerbsConn::State::kReady) return true;
  }
  return false;
}

// An accepted connection that never became ready. Channels it made may be
// in the tables already: the poller closes and sweeps them like any other.
void VerbsTransport::abandon(const std::shared_ptr<VerbsConn>& c) {
  if (!c->channels_.empty()) {
    for (auto& ch : c->channels_) ch->fail();
    conns_.add_accepted(c, [] { return true; });
    break_conn(c.get());
  }
  unwatch(c.get());
}

void VerbsTransport::accept_all() {
  for (;;) {
    int fd = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    auto c = std::make_shared<VerbsConn>(this, net::Fd(fd), kNoNode);
    c->state_ = VerbsConn::State::kAwaitRequest;
    (void)watch(c);
  }
}

// A whole ConnectRequest has arrived: check it, make and connect our QPs,
// answer. False: refuse (the caller closes the socket).
bool VerbsTransport::answer_request(VerbsConn* c) {
  ConnectRequest req{};
  if (::recv(c->fd(), &req, sizeof(req), MSG_WAITALL) != static_cast<ssize_t>(sizeof(req))) {
    return false;
  }
  if (req.magic != kConnectMagic || req.count == 0 || req.count > kMaxQpsPerPeer ||
      req.rdma_count > kMaxQpsPerPeer ||
      !hellos_.accept(req.hello, self_.load(), token_.load(), hello_key_)) {
    return false;
  }
  c->peer_.store(req.hello.node);
  const uint64_t t0 = now_ns();
  // The dialer's layout is the connection's: K and R may differ by node.
  const uint32_t n = req.count + req.rdma_count;
  ConnectReply rep{};
  rep.magic = kConnectMagic;
  rep.count = req.count;
  rep.rdma_count = req.rdma_count;
  if (!qp_budget_allows(n)) rep.status = static_cast<uint32_t>(Code::kNoResource);
  if (rep.status == 0) {
    if (Status s = make_channels(c, req.count, req.rdma_count); !s.is_ok()) {
      rep.status = static_cast<uint32_t>(s.code());
    }
  }
  const uint64_t t1 = now_ns();
  std::string why;
  if (rep.status == 0) {
    for (uint32_t i = 0; i < n; ++i) {
      Status s = c->channels_[i]->qp().connect(from_wire(req.qp[i]), &why);
      if (!s.is_ok()) {
        LT_ERROR("rc: accepting node %u: %s", req.hello.node, why.c_str());
        rep.status = static_cast<uint32_t>(s.code());
        break;
      }
      rep.qp[i] = to_wire(c->channels_[i]->qp().local());
    }
  }
  if (rep.status == 0) {
    add_channels(c);  // before the answer: the dialer may send at once
    // And awaited before the answer: its first messages may be served
    // before we read its kReady (await_answered).
    std::lock_guard<std::mutex> g(watch_mu_);
    c->state_ = VerbsConn::State::kAwaitReady;
    answered_.insert(c->peer());
  }
  // The socket is fresh and the reply small: the kernel takes it at once.
  const bool sent =
      ::send(c->fd(), &rep, sizeof(rep), MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof(rep));
  const uint64_t t2 = now_ns();
  LT_DEBUG("rc: answered node %u in %.2f ms (channels %.2f, QP state changes %.2f)", req.hello.node,
           (t2 - t0) / 1e6, (t1 - t0) / 1e6, (t2 - t1) / 1e6);
  return sent && rep.status == 0;
}

void VerbsTransport::on_control(const std::shared_ptr<VerbsConn>& c, uint32_t events) {
  VerbsConn* raw = c.get();
  if (raw->state_ == VerbsConn::State::kAwaitRequest && (events & EPOLLIN)) {
    ConnectRequest peek;
    ssize_t r = ::recv(raw->fd(), &peek, sizeof(peek), MSG_PEEK | MSG_DONTWAIT);
    if (r == static_cast<ssize_t>(sizeof(peek))) {
      if (!answer_request(raw)) return abandon(c);  // kAwaitReady once it answered
      return;
    }
    if (r > 0 && !(events & (EPOLLRDHUP | EPOLLHUP))) return;  // the rest is on its way
    return unwatch(raw);
  }
  if (raw->state_ == VerbsConn::State::kAwaitReady && (events & EPOLLIN)) {
    uint8_t b = 0;
    ssize_t r = ::recv(raw->fd(), &b, 1, MSG_DONTWAIT);
    if (r < 0 && errno == EAGAIN) return;
    if (r == 1 && b == kReady) {
      conns_.add_accepted(c, [] { return true; });
      conns_.identify(raw, raw->peer());
      std::lock_guard<std::mutex> g(watch_mu_);
      raw->state_ = VerbsConn::State::kReady;
      end_exchange_locked(raw->peer());
      return;
    }
    return abandon(c);  // no ready: the dialer gave up
  }
  // Ready: nothing more is sent on the socket; EOF or an error is the peer
  // gone (or the poller closed it: shutdown).
  char b[64];
  ssize_t r = ::recv(raw->fd(), b, sizeof(b), MSG_DONTWAIT);
  if (r < 0 && errno == EAGAIN && !(events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))) return;
  if (!raw->closed_.load()) break_conn(raw);
  unwatch(raw);
}

}  // namespace lt::transport::verbs
