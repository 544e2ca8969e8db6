// TcpTransport itself: setup, connect, memory registration for placement,
// accept, hello, close, the poller and release_rx.
#include "transport/tcp/tcp_transport.h"

#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "common/log.h"
#include "common/siphash.h"
#include "common/wire.h"
#include "transport/factory.h"
#include "transport/tcp/tcp_conn.h"

namespace lt::transport::tcp {

void TcpTransport::add_corked(std::shared_ptr<Conn> c) {
  std::lock_guard<std::mutex> g(cork_mu_);
  corked_.push_back(std::move(c));
  has_corked_.store(true, std::memory_order_release);
}

void TcpTransport::flush() {
  if (!has_corked_.load(std::memory_order_acquire)) return;
  {
    std::lock_guard<std::mutex> g(cork_mu_);
    flushing_.swap(corked_);
    has_corked_.store(false, std::memory_order_release);
  }
  for (auto& c : flushing_) c->flush_cork();
  flushing_.clear();
}

TcpTransport::TcpTransport(const TcpConfig& config) : config_(config) {
  caps_.reliable = true;
  caps_.one_sided = false;
  caps_.write_imm = true;  // carried as a frame field
  caps_.atomics64 = false;
  caps_.needs_registration = false;
  caps_.gathers = true;      // held frames go out in one writev
  caps_.placement = true;    // kWrite into register_memory() regions
  caps_.send_by_ref = true;  // kWrByRef: queued large writes are not copied
  caps_.max_inline = 0;
  caps_.max_msg = config.max_msg_bytes;
  caps_.eager_max = config.eager_max_bytes;
  caps_.max_batch = kMaxPostBatch;
  // A random high half keeps an rkey of an earlier engine on this port (a
  // peer's stale handle) from naming one of ours. From getrandom: a
  // std::random_device asks the CPU (cpuid) first, about 17 us per cpuid
  // under some hypervisors, on the join's path.
  next_rkey_ = (random_u64() & 0xffffffff00000000ull) | 1;
}

TcpTransport::~TcpTransport() {
  conns_.for_each_locked([](Conn& c) { c.mark_dead(); });
}

Status TcpTransport::init() {
  sockaddr_in bound{};
  auto fd = net::listen_on(config_.listen, "tcp.listen", &bound);
  if (!fd) return fd.status();
  listen_fd_ = std::move(fd.value());
  epfd_.reset(epoll_create1(EPOLL_CLOEXEC));
  if (!epfd_.valid()) return Code::kSys;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;
  if (epoll_ctl(epfd_.get(), EPOLL_CTL_ADD, listen_fd_.get(), &ev) != 0) return Code::kSys;
  bell_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!bell_.valid()) return Code::kSys;
  ev.data.ptr = &bell_;
  if (epoll_ctl(epfd_.get(), EPOLL_CTL_ADD, bell_.get(), &ev) != 0) return Code::kSys;
  if (!config_.advertise.empty()) {
    address_ = config_.advertise.find(':') == std::string::npos
                   ? config_.advertise + ":" + std::to_string(ntohs(bound.sin_port))
                   : config_.advertise;
  } else {
    if (bound.sin_addr.s_addr == htonl(INADDR_ANY)) bound.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address_ = net::to_string(bound);
  }
  return Status::ok();
}

void TcpTransport::set_identity(NodeId self, uint64_t cluster_token, const Mac& hello_key) {
  hello_key_ = hello_key;
  token_.store(cluster_token, std::memory_order_release);
  self_.store(self, std::memory_order_release);
}

Status TcpTransport::add_to_epoll(Conn* c) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
  ev.data.ptr = c;
  if (epoll_ctl(epfd_.get(), EPOLL_CTL_ADD, c->fd_.get(), &ev) != 0) return Code::kSys;
  return Status::ok();
}

Result<std::unique_ptr<Endpoint>> TcpTransport::connect(const PeerInfo& peer, Deadline d) {
  NodeId self = self_.load(std::memory_order_acquire);
  if (self == kNoNode) return Code::kNotJoined;
  if (auto c = conns_.serving(peer.node)) return std::unique_ptr<Endpoint>(new TcpEndpoint(c));
  std::string host;
  uint16_t port = 0;
  sockaddr_in addr{};
  const std::string address(peer.address(name()));
  if (address.empty()) return Code::kPeerDown;  // not in the address book (yet)
  if (!parse_host_port(address, &host, &port).is_ok() || !net::resolve(host, port, &addr).is_ok()) {
    LT_ERROR("tcp: node %u has a bad address '%s'", peer.node, address.c_str());
    return Code::kPeerDown;
  }
  auto fd = net::connect_tcp(addr, d);
  if (!fd) {
    LT_DEBUG("tcp: connect to node %u at %s: %s", peer.node, address.c_str(), fd.status().name());
    return fd.status();
  }
  net::set_bufsizes(fd->get(), config_.sndbuf_bytes, config_.rcvbuf_bytes);
  struct {
    wire::FrameHeader h;
    HelloBody b;
  } hello{wire::make_frame(wire::FrameKind::kHello, sizeof(HelloBody)),
          make_hello(self, peer.node, token_.load(), hello_counter_.fetch_add(1) + 1, hello_key_)};
  LT_RETURN_IF_ERROR(net::write_all(fd->get(), &hello, sizeof(hello), d));
  auto conn = std::make_shared<Conn>(this, std::move(fd.value()), peer.node, true);
  conn->rx_reserve(kInitialRx);
  // Another thread or the peer itself may have connected first: that one
  // serves here, and this one is kept for the peer, which may serve on it.
  auto served = conns_.add_dialed(
      peer.node, conn, [&] { return add_to_epoll(conn.get()); }, true);
  if (!served) return served.status();
  return std::unique_ptr<Endpoint>(new TcpEndpoint(*served));
}

Result<MemRegion> TcpTransport::register_memory(std::span<std::byte> mem, Access a) {
  auto r = std::make_shared<Registration>();
  r->addr = mem.data();
  r->len = mem.size();
  r->access = a;
  uint64_t rkey;
  {
    std::lock_guard<std::mutex> g(reg_mu_);
    rkey = next_rkey_++;
    if (rkey == 0) rkey = next_rkey_++;  // after 2^64 registrations
    regs_.emplace(rkey, std::move(r));
  }
  return MemRegion{mem.data(), mem.size(), 0, rkey};
}

void TcpTransport::deregister_memory(const MemRegion& mr) {
  std::shared_ptr<Registration> r;
  {
    std::lock_guard<std::mutex> g(reg_mu_);
    auto it = regs_.find(mr.rkey);
    if (it == regs_.end() || it->second->addr != mr.addr) return;
    r = std::move(it->second);
    regs_.erase(it);
  }
  // A write being placed into it stops at its next store (and breaks its
  // connection). A store in progress is one recv() of at most kMaxRecv bytes
  // already in the socket, or a memcpy: wait it out.
  r->revoked.store(true, std::memory_order_seq_cst);
  while (r->busy.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
}

std::shared_ptr<Registration> TcpTransport::writable(const wire::WriteDesc& d, size_t len,
                                                     const char** why) {
  std::shared_ptr<Registration> r;
  {
    std::lock_guard<std::mutex> g(reg_mu_);
    auto it = regs_.find(d.rkey);
    if (it != regs_.end()) r = it->second;
  }
  if (!r) {
    *why = "unknown rkey";
    return nullptr;
  }
  if (!has_access(r->access, Access::kRemoteWrite)) {
    *why = "region not writable";
    return nullptr;
  }
  // [addr, addr + len) inside [base, base + r->len), without overflow.
  const uint64_t base = reinterpret_cast<uintptr_t>(r->addr);
  if (d.addr < base || d.addr - base > r->len || len > r->len - (d.addr - base)) {
    *why = "out of bounds";
    return nullptr;
  }
  return r;
}

void TcpTransport::refuse_write(Conn* c, std::span<Completion> out, size_t* n,
                                const wire::WriteDesc& d, size_t len, const char* why) {
  refused_writes_.fetch_add(1, std::memory_order_relaxed);
  if (!warned_refused_) {
    warned_refused_ = true;
    LT_WARN("tcp: refused a write from node %u (rkey %#llx, addr %#llx, %zu bytes): %s",
            c->peer_.load(), static_cast<unsigned long long>(d.rkey),
            static_cast<unsigned long long>(d.addr), len, why);
  }
  close_conn(c, out, n, why);
}

void TcpTransport::accept_all() {
  for (;;) {
    int fd = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      return;  // EAGAIN, or EMFILE and friends: retried on the next readiness
    }
    net::set_nodelay(fd);
    net::set_bufsizes(fd, config_.sndbuf_bytes, config_.rcvbuf_bytes);
    auto conn = std::make_shared<Conn>(this, net::Fd(fd), kNoNode, false);
    conn->rx_reserve(kInitialRx);
    (void)conns_.add_accepted(conn, [&] { return add_to_epoll(conn.get()).is_ok(); });
  }
}

bool TcpTransport::handle_hello(Conn* c, std::span<const std::byte> body) {
  uint64_t token = token_.load(std::memory_order_acquire);
  if (body.size() != sizeof(HelloBody) || token == 0) return false;
  HelloBody h;
  std::memcpy(&h, body.data(), sizeof(h));
  if (!hellos_.accept(h, self_.load(), token, hello_key_)) return false;
  c->peer_.store(h.node);
  c->hello_done_ = true;
  conns_.identify(c, h.node);
  return true;
}

void TcpTransport::close_conn(Conn* c, std::span<Completion> out, size_t* n, const char* why) {
  if (c->closed_) return;
  c->closed_ = true;
  NodeId peer = c->peer_.load();
  if (peer != kNoNode) {
    LT_INFO("tcp: connection to node %u closed: %s", peer, why);
  } else {
    LT_WARN("tcp: dropping unidentified connection: %s", why);
  }
  epoll_ctl(epfd_.get(), EPOLL_CTL_DEL, c->fd_.get(), nullptr);
  c->mark_dead();
  c->fail_owed();
  c->in_ready_ = false;
  c->place_reg_.reset();
  c->place_left_ = 0;
  // A redundant connection (both sides dialed at once) closing is not the
  // peer going away: the serving connection still carries its traffic. When
  // the peer dies both close, and only the serving one reports it.
  if (conns_.remove(c, peer) && peer != kNoNode && c->hello_done_) {
    conns_.report_lost(peer, out, n);
  }
}

bool TcpTransport::any_mid_frame(const std::vector<std::shared_ptr<Conn>>& list) {
  for (const auto& c : list) {
    if (c->mid_frame()) return true;
  }
  return false;
}

size_t TcpTransport::poll(std::span<Completion> out) {
  size_t n = conns_.take_pending(out, 0);
  if (done_count_.load(std::memory_order_acquire) != 0) {  // no lock on every pass
    std::lock_guard<std::mutex> g(done_mu_);
    while (!send_done_.empty() && n < out.size()) {
      out[n++] = send_done_.front();
      send_done_.pop_front();
      done_count_.fetch_sub(1, std::memory_order_relaxed);
    }
  }
  // With no connection at all (every peer on shm, say) only the listener
  // can have news: look at it every kIdlePolls-th pass rather than paying an
  // epoll_wait (and a clock read) on every pass of a caller spinning for
  // other transports. A new inbound connection waits a few microseconds.
  // After a sleep on wait_fd() (woken()), epoll is asked at once: the
  // progress thread was woken for a reason, and skipping would make a
  // sleeping engine's first accept wait out the whole count.
  const bool look = epoll_now_.load(std::memory_order_relaxed) &&
                    epoll_now_.exchange(false, std::memory_order_relaxed);
  if (!look && conns_.size() == 0 && ready_.empty() && !conns_.has_pending() &&
      ++idle_polls_ % kIdlePolls != 0) {
    // The poller's copy holds a reference to each connection: once the
    // last one closed it goes now, so an idle engine keeps no closed socket
    // open until its next event.
    if (!conns_.snapshot().empty()) {
      conns_.refresh();
      return settle(n);
    }
    return n;
  }
  // With few connections a spinning caller tries recv() on each of them
  // instead of asking epoll first: a message is then read with one system
  // call instead of two, and an empty try costs about what epoll_wait(0)
  // does. epoll still runs every kEpollEvery-th poll, for the listener,
  // EPOLLOUT and sweeps. Not while a connection is in the middle of a large
  // frame (Conn::mid_frame): each empty recv() takes the socket's lock,
  // which the sender's segments then wait for or queue behind (its backlog),
  // and epoll_wait takes none (1 MiB streams on a 2-vCPU VM: writes 1.41x,
  // sends 1.09x; epoll on every poll cost 8 B round trips a third: PERF.md).
  const auto& list = conns_.changed() ? conns_.refresh() : conns_.snapshot();
  // (With no connection there is nothing to try: the listener needs epoll.)
  if (!look && !list.empty() && list.size() <= kDirectPollConns &&
      ++direct_polls_ % kEpollEvery != 0 && !any_mid_frame(list)) {
    for (auto& sp : list) {
      Conn* c = sp.get();
      if (c->closed_ || c->in_ready_) continue;
      c->in_ready_ = true;
      ready_.push_back(c);
    }
    return settle(read_ready(out, n));
  }
  sweep_unidentified();
  epoll_event evs[64];
  int k = epoll_wait(epfd_.get(), evs, 64, 0);
  for (int i = 0; i < k; ++i) {
    if (evs[i].data.ptr == &bell_) {  // send_done_ was taken above
      bell_rung_.store(false, std::memory_order_relaxed);
      net::drain_eventfd(bell_.get());
      continue;
    }
    auto* c = static_cast<Conn*>(evs[i].data.ptr);
    if (c == nullptr) {
      accept_all();
      continue;
    }
    if (evs[i].events & EPOLLOUT) c->on_writable();
    if ((evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP)) && !c->in_ready_) {
      c->in_ready_ = true;
      ready_.push_back(c);
    }
  }
  return settle(read_ready(out, n));
}

void TcpTransport::report_done(uint64_t wr_id, NodeId peer, Code status, bool wake) {
  Completion c;
  c.kind = CqKind::kSendDone;
  c.wr_id = wr_id;
  c.peer = peer;
  c.status = status;
  {
    std::lock_guard<std::mutex> g(done_mu_);
    send_done_.push_back(c);
    done_count_.fetch_add(1, std::memory_order_release);
  }
  if (wake && !bell_rung_.exchange(true, std::memory_order_acq_rel)) net::ring_eventfd(bell_.get());
}

size_t TcpTransport::settle(size_t n) {
  // A connection that closed without an event for the caller (a redundant
  // one, a stranger's) would otherwise keep its socket until some later
  // poll hands out a completion, however long the engine sits idle.
  if (n == 0 && pinned_.empty() && conns_.has_closed()) conns_.release_closed();
  return n;
}

void TcpTransport::sweep_unidentified() {
  // A connection that has not said hello within the deadline is dropped, so
  // idle or trickling strangers cannot hold sockets and buffers forever.
  uint64_t now = now_ns();
  if (now < next_sweep_ns_) return;
  next_sweep_ns_ = now + 1000000000ull;
  auto said_hello = [](const Conn& c) { return c.hello_done_; };
  for (Conn* c : conns_.stale(now, kHelloTimeoutNs, said_hello)) {
    size_t none = 0;
    close_conn(c, {}, &none, "no hello in time");
  }
}

void TcpTransport::release_rx(std::span<const Completion>) {
  for (Conn* c : pinned_) c->pinned_ = false;
  pinned_.clear();
  conns_.release_closed();
}

Result<std::unique_ptr<Transport>> make_tcp_transport(const TcpConfig& config) {
  auto t = std::make_unique<TcpTransport>(config);
  LT_RETURN_IF_ERROR(t->init());
  return std::unique_ptr<Transport>(std::move(t));
}

}  // namespace lt::transport::tcp

namespace lt::transport {
Result<std::unique_ptr<Transport>> make_tcp_transport(const TcpConfig& config) {
  return tcp::make_tcp_transport(config);
}
}  // namespace lt::transport
