// ShmTransport's connections: dialing a peer (a fresh sealed segment and
// bells handed over in the hello), accepting one, the hello, closing, and the
// sweep of connections that never said hello.
#include <sys/epoll.h>

#include "transport/shm/shm_conn.h"

namespace lt::transport::shm {

Result<std::unique_ptr<Endpoint>> ShmTransport::connect(const PeerInfo& peer, Deadline d) {
  NodeId self = self_.load(std::memory_order_acquire);
  if (self == kNoNode) return Code::kNotJoined;
  if (auto c = conns_.serving(peer.node)) return std::unique_ptr<Endpoint>(new ShmEndpoint(c));
  pid_t pid = 0;
  auto sock = dial(peer, d, &pid);
  if (!sock) return sock.status();
  auto seg = new_segment(peer.node);
  if (!seg) return seg.status();
  net::Fd my_bell(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  net::Fd peer_bell(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!my_bell.valid() || !peer_bell.valid()) {
    ::munmap(seg->mem, seg->len);
    return Code::kSys;
  }
  const uint32_t r = config_.ring_bytes;
  auto conn = std::make_shared<ShmConn>(this, std::move(sock.value()), peer.node, true, pid);
  conn->attach(seg->mem, seg->len, r, seg->salt, std::move(my_bell), std::move(peer_bell));

  Hello hello{kSegMagic, kSegVersion, static_cast<uint16_t>(HelloKind::kHello),
              self,      r,           token_.load(std::memory_order_acquire)};
  int fds[3] = {seg->memfd.get(), conn->my_bell_.get(), conn->peer_bell_.get()};
  if (!send_packet(conn->sock_.get(), &hello, sizeof(hello), fds, 3)) {
    LT_DEBUG("shm: hello to node %u: %s", peer.node, strerror(errno));
    return Code::kPeerDown;
  }
  seg->memfd.reset();  // the mappings keep the segment

  // Another thread or the peer itself may have connected first: that one
  // serves here, and this one is kept for the peer, which may serve on it.
  auto served = conns_.add_dialed(
      peer.node, conn,
      [&]() -> Status {
        uint64_t tag = reinterpret_cast<uintptr_t>(conn.get());
        LT_RETURN_IF_ERROR(add_to_epoll(conn->my_bell_.get(), tag | kBellBit));
        if (!add_to_epoll(conn->sock_.get(), tag).is_ok()) {
          ::epoll_ctl(epfd_.get(), EPOLL_CTL_DEL, conn->my_bell_.get(), nullptr);
          return Code::kSys;
        }
        return Status::ok();
      },
      true);
  if (!served) return served.status();
  return std::unique_ptr<Endpoint>(new ShmEndpoint(*served));
}

// A connected socket to `peer`'s listener, refused unless the process behind
// it runs as our user (its pid in *pid).
Result<net::Fd> ShmTransport::dial(const PeerInfo& peer, Deadline d, pid_t* pid) {
  std::string sock_name;
  const std::string address(peer.address(name()));
  if (address.empty()) return Code::kPeerDown;  // not in the address book (yet)
  if (!parse_address(address, &sock_name)) {
    LT_ERROR("shm: node %u has a bad address '%s'", peer.node, address.c_str());
    return Code::kPeerDown;
  }
  net::Fd sock(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!sock.valid()) return Code::kSys;
  sockaddr_un a;
  socklen_t alen = abstract_addr(sock_name, &a);
  for (;;) {
    if (::connect(sock.get(), reinterpret_cast<sockaddr*>(&a), alen) == 0) break;
    if (errno == EINTR) continue;
    if (errno == EAGAIN) {  // the listener's backlog is full
      if (d.expired()) return Code::kTimedOut;
      ::usleep(100);
      continue;
    }
    LT_DEBUG("shm: connect to node %u at %s: %s", peer.node, address.c_str(), strerror(errno));
    return Code::kPeerDown;
  }
  ucred cred{};
  if (!peer_cred(sock.get(), &cred) || cred.uid != ::geteuid()) {
    LT_WARN("shm: node %u at %s belongs to another user; refusing it", peer.node, address.c_str());
    return Code::kPeerDown;
  }
  *pid = cred.pid;
  return sock;
}

// A connection segment for `peer`: two rings of shm.ring_bytes and two lanes after the
// header and their control blocks, sealed, so the peer can never shrink it
// under us, and mapped here.
Result<ShmTransport::NewSegment> ShmTransport::new_segment(NodeId peer) {
  const uint32_t r = config_.ring_bytes;
  NewSegment out;
  out.len = segment_bytes(r);
  out.memfd = net::Fd(::memfd_create("ltier-shm-conn", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!out.memfd.valid() || ::ftruncate(out.memfd.get(), static_cast<off_t>(out.len)) != 0 ||
      ::fcntl(out.memfd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    LT_ERROR("shm: connection segment for node %u: %s", peer, strerror(errno));
    return Code::kSys;
  }
  void* p = ::mmap(nullptr, out.len, PROT_READ | PROT_WRITE, MAP_SHARED, out.memfd.get(), 0);
  if (p == MAP_FAILED) {
    LT_ERROR("shm: mapping a connection segment (%zu bytes): %s", out.len, strerror(errno));
    return Code::kNoMemory;
  }
  out.mem = static_cast<std::byte*>(p);
  SegHeader h{};
  h.magic = kSegMagic;
  h.version = kSegVersion;
  h.ring_bytes = r;
  h.salt = out.salt = new_salt();
  std::memcpy(out.mem, &h, sizeof(h));
  auto* ctrl = reinterpret_cast<RingCtrl*>(out.mem + sizeof(SegHeader));
  for (int i = 0; i < 2; ++i) {
    // Both sides start asking for bells: a new connection is not yet part of
    // its poller's arming, so its first message must not go unnoticed.
    aref(ctrl[i].want_data).store(1, std::memory_order_relaxed);
  }
  return out;
}

void ShmTransport::accept_all() {
  for (;;) {
    int fd = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR) continue;
      return;  // EAGAIN, or EMFILE and friends: retried on the next readiness
    }
    net::Fd sock(fd);
    ucred cred{};
    if (!peer_cred(fd, &cred) || cred.uid != ::geteuid()) {
      LT_WARN("shm: refusing a connection from uid %u", static_cast<unsigned>(cred.uid));
      continue;
    }
    auto conn = std::make_shared<ShmConn>(this, std::move(sock), kNoNode, false, cred.pid);
    (void)conns_.add_accepted(conn, [&] {
      return add_to_epoll(conn->sock_.get(), reinterpret_cast<uintptr_t>(conn.get())).is_ok();
    });
  }
}

bool ShmTransport::handle_hello(ShmConn* c, const void* body, size_t len,
                                std::vector<net::Fd>* fds) {
  const uint64_t token = token_.load(std::memory_order_acquire);
  const NodeId self = self_.load(std::memory_order_acquire);
  if (len != sizeof(Hello) || token == 0) return false;  // token 0: not joined yet
  Hello h;
  std::memcpy(&h, body, sizeof(h));
  if (h.magic != kSegMagic || h.version != kSegVersion ||
      h.kind != static_cast<uint16_t>(HelloKind::kHello) || h.cluster_token != token ||
      h.node == kNoNode || h.node == self) {
    return false;
  }
  const uint32_t r = h.ring_bytes;
  if (!is_pow2(r) || r < kMinRingBytes || r > kMaxRingBytes || fds->size() != 3) return false;
  const size_t seg_len = segment_bytes(r);
  struct stat st;
  int seals = ::fcntl((*fds)[0].get(), F_GET_SEALS);
  if (::fstat((*fds)[0].get(), &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<size_t>(st.st_size) != seg_len || seals < 0 || !(seals & F_SEAL_SHRINK)) {
    return false;
  }
  void* p = ::mmap(nullptr, seg_len, PROT_READ | PROT_WRITE, MAP_SHARED, (*fds)[0].get(), 0);
  if (p == MAP_FAILED) return false;
  auto* seg = static_cast<std::byte*>(p);
  SegHeader sh;
  std::memcpy(&sh, seg, sizeof(sh));
  auto* ctrl = reinterpret_cast<RingCtrl*>(seg + sizeof(SegHeader));
  // A fresh segment: nothing consumed yet, nothing sent our way yet.
  if (sh.magic != kSegMagic || sh.version != kSegVersion || sh.ring_bytes != r ||
      (sh.salt >> 63) == 0 || aref(ctrl[0].tail).load() != 0 || aref(ctrl[1].tail).load() != 0) {
    ::munmap(seg, seg_len);
    return false;
  }
  c->attach(seg, seg_len, r, sh.salt, std::move((*fds)[2]), std::move((*fds)[1]));
  uint64_t tag = reinterpret_cast<uintptr_t>(c);
  if (!add_to_epoll(c->my_bell_.get(), tag | kBellBit).is_ok()) return false;
  Hello ack{kSegMagic, kSegVersion, static_cast<uint16_t>(HelloKind::kAck), self, 0, token};
  if (!send_packet(c->sock_.get(), &ack, sizeof(ack), nullptr, 0)) return false;
  c->peer_.store(h.node);
  c->hello_done_ = true;
  conns_.identify(c, h.node);
  return true;
}

void ShmTransport::on_socket(ShmConn* c, uint32_t events, std::span<Completion> out, size_t* n) {
  for (;;) {
    alignas(8) unsigned char buf[64];
    std::vector<net::Fd> fds;
    bool trunc = false;
    ssize_t r = recv_packet(c->sock_.get(), buf, sizeof(buf), &fds, &trunc);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (r <= 0) {  // EOF: the peer closed or died
      if (!c->mapped()) {
        close_conn(c, out, n, "closed before its hello");
        return;
      }
      c->hup_ = true;
      c->mark_dead();
      ::epoll_ctl(epfd_.get(), EPOLL_CTL_DEL, c->sock_.get(), nullptr);
      return;  // the ring is drained, then the peer is reported lost
    }
    bool ok = false;
    if (!c->hello_done_) {
      ok = !trunc && handle_hello(c, buf, static_cast<size_t>(r), &fds);
    } else if (c->connector_ && !c->ack_done_ && !trunc && fds.empty() &&
               r == static_cast<ssize_t>(sizeof(Hello))) {
      Hello h;
      std::memcpy(&h, buf, sizeof(h));
      ok = h.magic == kSegMagic && h.version == kSegVersion &&
           h.kind == static_cast<uint16_t>(HelloKind::kAck) && h.node == c->peer_.load() &&
           h.cluster_token == token_.load(std::memory_order_acquire);
      c->ack_done_ = ok;
    }
    if (!ok) {
      malformed_.fetch_add(1, std::memory_order_relaxed);
      close_conn(c, out, n, c->hello_done_ ? "unexpected packet" : "bad hello");
      return;
    }
  }
  (void)events;
}

void ShmTransport::close_conn(ShmConn* c, std::span<Completion> out, size_t* n, const char* why) {
  if (c->closed_) return;
  c->closed_ = true;
  const NodeId peer = c->peer_.load();
  if (c->identified()) {
    LT_INFO("shm: connection to node %u closed: %s", peer, why);
  } else {
    LT_WARN("shm: dropping unidentified connection: %s", why);
  }
  ::epoll_ctl(epfd_.get(), EPOLL_CTL_DEL, c->sock_.get(), nullptr);
  if (c->my_bell_.valid()) ::epoll_ctl(epfd_.get(), EPOLL_CTL_DEL, c->my_bell_.get(), nullptr);
  c->mark_dead();
  c->drop_remote_maps();
  // Every identified connection serves its node unless another one already
  // did (both sides dialed at once). Only the serving one reports the peer
  // lost: a redundant one closing is not the peer going away, and when both
  // close (the peer died) the peer is reported once.
  if (conns_.remove(c, peer) && peer != kNoNode && c->identified()) {
    conns_.report_lost(peer, out, n);
  }
}

void ShmTransport::sweep_unidentified(uint64_t now) {
  // A connection that has not said hello within the deadline is dropped, so
  // idle strangers cannot hold sockets forever.
  auto identified = [](const ShmConn& c) { return c.identified(); };
  for (ShmConn* c : conns_.stale(now, kHelloTimeoutNs, identified)) {
    size_t none = 0;
    close_conn(c, {}, &none, "no hello in time");
  }
}

}  // namespace lt::transport::shm
