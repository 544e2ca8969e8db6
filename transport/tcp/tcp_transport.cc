#include "transport/tcp/tcp_transport.h"

#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <thread>

#include "common/log.h"
#include "common/wire.h"
#include "transport/factory.h"

namespace lt::transport::tcp {

namespace {
constexpr size_t kInitialRx = 64 * 1024;
constexpr size_t kMaxPostBatch = 16;
constexpr int kMaxIov = 64;
constexpr size_t kHdr = sizeof(wire::FrameHeader);
constexpr size_t kDesc = sizeof(wire::WriteDesc);
constexpr uint64_t kHelloTimeoutNs = 5000000000ull;
}  // namespace

// One socket to one peer. The send side is used by any thread; the receive
// side only by the poller. Whoever holds `sending_` is the only writer of the
// socket; everyone else appends copies to `outq_`, so a lock is never held
// across a system call and frames never interleave.
// The frames of one post, gathered for one writev: each request's header
// (and a kWrite's descriptor) before its sges.
struct Gather {
  wire::FrameHeader hdrs[kMaxPostBatch];
  wire::WriteDesc descs[kMaxPostBatch];
  iovec iov[kMaxPostBatch * (2 + kMaxSge)];
  int niov = 0;
  size_t count = 0, total = 0;
  bool more = true;  // every request gathered has kWrMore
  Result<size_t> add(std::span<const WorkRequest> wrs, uint32_t max_msg);
  /// The gathered bytes after the first `skip`, copied (for the queue).
  std::string copy_from(size_t skip) const;
};

class Conn : public std::enable_shared_from_this<Conn> {
 public:
  Conn(TcpTransport* t, net::Fd fd, NodeId peer, bool hello_done)
      : t_(t), fd_(std::move(fd)), peer_(peer), hello_done_(hello_done) {}

  Result<size_t> post(std::span<const WorkRequest> wrs);
  void on_writable();
  void flush_cork();
  uint64_t created_ns_ = now_ns();
  void mark_dead() {
    if (!dead_.exchange(true)) ::shutdown(fd_.get(), SHUT_RDWR);
  }

  TcpTransport* t_;
  net::Fd fd_;
  std::atomic<NodeId> peer_;
  std::atomic<bool> dead_{false};

  // Poller-only.
  bool hello_done_;
  bool in_ready_ = false;
  bool pinned_ = false;
  bool closed_ = false;
  // The kWrite being placed straight from the socket: place_left_ bytes to
  // go at place_at_, inside place_reg_ (held so that its revoked flag stays
  // readable; the memory itself is guarded by Registration::enter).
  std::shared_ptr<Registration> place_reg_;
  std::byte* place_at_ = nullptr;
  size_t place_left_ = 0;
  // Receive buffer: not zero-filled, so untouched capacity costs no page
  // faults; grows to the largest frame seen.
  std::unique_ptr<std::byte[]> rx_;
  size_t rx_cap_ = 0;
  void rx_reserve(size_t n) {
    if (n <= rx_cap_) return;
    std::unique_ptr<std::byte[]> b(new std::byte[n]);
    if (rx_end_ > rx_begin_) std::memcpy(b.get(), rx_.get() + rx_begin_, rx_end_ - rx_begin_);
    rx_end_ -= rx_begin_;
    rx_begin_ = 0;
    rx_ = std::move(b);
    rx_cap_ = n;
  }
  size_t rx_begin_ = 0, rx_end_ = 0;

 private:
  Result<size_t> post_frames(std::span<const WorkRequest> wrs);
  enum class Claim : uint8_t { kQueued, kRefused, kSend };
  Claim queue_or_claim(const Gather& g, bool cork, bool must_queue);
  void drain();  // caller holds the sending role
  ssize_t send_iov(const iovec* iov, int n) {
    msghdr m{};
    m.msg_iov = const_cast<iovec*>(iov);
    m.msg_iovlen = static_cast<size_t>(n);
    return ::sendmsg(fd_.get(), &m, MSG_NOSIGNAL | MSG_DONTWAIT);
  }

  std::mutex mu_;  // guards the fields below; never held across a syscall
  bool sending_ = false;
  bool retry_ = false;  // EPOLLOUT seen while another thread was sending
  std::deque<std::string> outq_;
  size_t out_off_ = 0;
  size_t queued_ = 0;
  // Frames posted with kWrMore while the socket was idle sit in outq_ with
  // corked_ set and nobody sending: the next post without kWrMore (or
  // flush_cork) takes the sending role and drains them first.
  std::atomic<bool> corked_{false};  // written under mu_; read by the sending role
  bool cork_listed_ = false;         // in the transport's corked_ list
};

namespace {
constexpr size_t kCorkFrameMax = 16 * 1024;   // larger posts go out at once
constexpr size_t kMaxRecv = 256 * 1024;       // bytes one recv() asks for
constexpr size_t kMaxReadPerPoll = 4u << 20;  // bytes read per connection per poll
}  // namespace

// Gathers the frames of wrs (a prefix of at most kMaxPostBatch that the
// socket takes as they are): an error only when the first is refused.
Result<size_t> Gather::add(std::span<const WorkRequest> wrs, uint32_t max_msg) {
  for (const WorkRequest& wr : wrs) {
    if (count == kMaxPostBatch) break;
    Code refused = Code::kOk;
    size_t len = 0;
    if (wr.op != Op::kSend && wr.op != Op::kWriteImm && wr.op != Op::kWrite) {
      refused = Code::kUnsupported;
    } else if (wr.num_sge > kMaxSge) {
      refused = Code::kInvalidArg;
    } else {
      for (int i = 0; i < wr.num_sge; ++i) len += wr.sge[i].len;
      // A kWrite is no message: the owner buffers none of it, so only the
      // frame's length field and the owner's registration bound it.
      if (wr.op == Op::kWrite ? len > UINT32_MAX - kDesc : len > max_msg) {
        refused = Code::kInvalidArg;
      }
    }
    if (refused != Code::kOk) {
      if (count == 0) return refused;
      break;
    }
    if (wr.op == Op::kWrite) {
      // Header, descriptor, then the bytes; the receiver places them.
      hdrs[count] = wire::make_frame(wire::FrameKind::kWrite, static_cast<uint32_t>(kDesc + len));
      descs[count] = wire::WriteDesc{wr.remote.addr, wr.remote.rkey};
      iov[niov++] = {&hdrs[count], kHdr};
      iov[niov++] = {&descs[count], kDesc};
      total += kDesc;
    } else {
      hdrs[count] =
          wire::make_frame(wr.op == Op::kSend ? wire::FrameKind::kData : wire::FrameKind::kDataImm,
                           static_cast<uint32_t>(len), wr.op == Op::kSend ? 0 : wr.imm);
      iov[niov++] = {&hdrs[count], kHdr};
    }
    for (int i = 0; i < wr.num_sge; ++i) {
      if (wr.sge[i].len == 0) continue;
      iov[niov++] = {const_cast<std::byte*>(wr.sge[i].addr), wr.sge[i].len};
    }
    total += kHdr + len;
    more = more && (wr.flags & kWrMore);
    ++count;
  }
  return count;
}

std::string Gather::copy_from(size_t skip) const {
  std::string out;
  out.reserve(total - std::min(skip, total));
  for (int i = 0; i < niov; ++i) {
    size_t l = iov[i].iov_len;
    if (skip >= l) {
      skip -= l;
      continue;
    }
    out.append(static_cast<const char*>(iov[i].iov_base) + skip, l - skip);
    skip = 0;
  }
  return out;
}

Result<size_t> Conn::post_frames(std::span<const WorkRequest> wrs) {
  if (dead_.load(std::memory_order_acquire)) return Code::kPeerDown;
  if (wrs.empty()) return size_t{0};
  Gather g;
  auto got = g.add(wrs, t_->caps_.max_msg);
  if (!got) return got;
  const bool cork = g.more && g.total <= kCorkFrameMax;
  for (;;) {
    switch (queue_or_claim(g, cork, wrs[0].flags & kWrMustQueue)) {
      case Claim::kQueued:
        return g.count;
      case Claim::kRefused:
        return size_t{0};  // back-pressure
      case Claim::kSend:
        break;
    }
    if (!corked_.load(std::memory_order_relaxed)) break;
    // Corked frames are waiting (we hold the sending role): they go first.
    corked_.store(false, std::memory_order_relaxed);
    drain();  // gives the sending role back; then try again for our frames
  }
  ssize_t n = send_iov(g.iov, g.niov);
  if (n < 0) {
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      LT_DEBUG("tcp: send to node %u failed: %s", peer_.load(), strerror(errno));
      mark_dead();
      std::lock_guard<std::mutex> lock(mu_);
      sending_ = false;
      return Code::kPeerDown;
    }
    n = 0;
  }
  if (static_cast<size_t>(n) < g.total) {
    std::string rest = g.copy_from(static_cast<size_t>(n));
    std::lock_guard<std::mutex> lock(mu_);
    queued_ += rest.size();
    outq_.push_front(std::move(rest));
    out_off_ = 0;
  }
  drain();
  return g.count;
}

// Either the frames are queued (someone sends, EPOLLOUT will, or they join
// or start a cork), refused for back-pressure, or this caller takes the
// sending role (kSend) and writes them itself.
Conn::Claim Conn::queue_or_claim(const Gather& g, bool cork, bool must_queue) {
  bool list_cork = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (sending_ || (!outq_.empty() && !corked_) || (cork && corked_)) {
      // Someone sends (or EPOLLOUT will), or we join a cork: queue a copy.
      if (!cork && queued_ > t_->config_.max_queued_bytes && !must_queue) return Claim::kRefused;
      outq_.push_back(g.copy_from(0));
      queued_ += g.total;
      return Claim::kQueued;
    }
    if (!cork) {
      sending_ = true;
      return Claim::kSend;
    }
    // The socket is idle: hold the frames until a post without kWrMore or
    // flush(), which send the whole batch with one system call.
    outq_.push_back(g.copy_from(0));
    queued_ += g.total;
    corked_ = true;
    list_cork = !cork_listed_;
    cork_listed_ = true;
  }
  // Held; still listed from an earlier cork (a post without kWrMore sent
  // that one, and flush() has not run since) or listed now. Either way we
  // do not hold the sending role: never fall through to drain().
  if (list_cork) t_->add_corked(shared_from_this());
  return Claim::kQueued;
}

void Conn::flush_cork() {
  {
    std::lock_guard<std::mutex> g(mu_);
    cork_listed_ = false;
    if (sending_ || !corked_.load(std::memory_order_relaxed)) return;
    sending_ = true;
    corked_.store(false, std::memory_order_relaxed);
  }
  drain();
}

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

Result<size_t> Conn::post(std::span<const WorkRequest> wrs) {
  auto r = post_frames(wrs);
  if (r.is_ok()) {
    // Sends complete when posted (the transport owns any unsent bytes), so a
    // signaled request is reported at once, through the next poll().
    for (size_t i = 0; i < *r; ++i) {
      if (wrs[i].flags & kWrSignaled) {
        Completion c;
        c.kind = CqKind::kSendDone;
        c.wr_id = wrs[i].wr_id;
        c.peer = peer_.load(std::memory_order_relaxed);
        std::lock_guard<std::mutex> g(t_->done_mu_);
        t_->send_done_.push_back(c);
        t_->done_count_.fetch_add(1, std::memory_order_release);
      }
    }
  }
  return r;
}

void Conn::drain() {
  for (;;) {
    iovec iov[kMaxIov];
    int niov = 0;
    {
      std::lock_guard<std::mutex> g(mu_);
      if (outq_.empty() || dead_.load(std::memory_order_relaxed)) {
        sending_ = false;
        retry_ = false;
        return;
      }
      size_t off = out_off_;
      for (auto& s : outq_) {
        if (niov == kMaxIov) break;
        iov[niov++] = {s.data() + off, s.size() - off};
        off = 0;
      }
    }
    ssize_t n = send_iov(iov, niov);
    if (n < 0) {
      if (errno == EINTR) continue;
      std::lock_guard<std::mutex> g(mu_);
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (retry_) {
          retry_ = false;
          continue;
        }
      } else {
        mark_dead();
      }
      sending_ = false;
      return;
    }
    std::lock_guard<std::mutex> g(mu_);
    size_t left = static_cast<size_t>(n);
    queued_ -= left;
    while (left > 0) {
      size_t avail = outq_.front().size() - out_off_;
      if (avail <= left) {
        left -= avail;
        outq_.pop_front();
        out_off_ = 0;
      } else {
        out_off_ += left;
        left = 0;
      }
    }
  }
}

void Conn::on_writable() {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (sending_) {
      retry_ = true;
      return;
    }
    if (outq_.empty()) return;
    sending_ = true;
    corked_.store(false, std::memory_order_relaxed);
  }
  drain();
}

namespace {
class TcpEndpoint final : public Endpoint {
 public:
  explicit TcpEndpoint(std::shared_ptr<Conn> c) : c_(std::move(c)) {}
  Result<size_t> post(std::span<const WorkRequest> wrs) override { return c_->post(wrs); }
  NodeId peer() const override { return c_->peer_.load(std::memory_order_relaxed); }
  bool alive() const override { return !c_->dead_.load(std::memory_order_acquire); }

 private:
  std::shared_ptr<Conn> c_;
};
}  // namespace

TcpTransport::TcpTransport(const TcpConfig& config) : config_(config) {
  caps_.reliable = true;
  caps_.one_sided = false;
  caps_.write_imm = true;  // carried as a frame field
  caps_.atomics64 = false;
  caps_.needs_registration = false;
  caps_.placement = true;  // kWrite into register_memory() regions
  caps_.max_inline = 0;
  caps_.max_msg = config.max_msg_bytes;
  caps_.eager_max = config.eager_max_bytes;
  caps_.max_batch = kMaxPostBatch;
  // A random high half keeps an rkey of an earlier engine on this port (a
  // peer's stale handle) from naming one of ours.
  std::random_device rd;
  next_rkey_ = (static_cast<uint64_t>(rd()) << 32) | 1;
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

void TcpTransport::set_identity(NodeId self, uint64_t cluster_token) {
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
          HelloBody{self, 0, token_.load()}};
  LT_RETURN_IF_ERROR(net::write_all(fd->get(), &hello, sizeof(hello), d));
  auto conn = std::make_shared<Conn>(this, std::move(fd.value()), peer.node, true);
  conn->rx_reserve(kInitialRx);
  // Another thread or the peer itself may have connected first: that one
  // serves, and this one is dropped.
  auto served = conns_.add_dialed(peer.node, conn, [&] { return add_to_epoll(conn.get()); });
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
  if (h.cluster_token != token || h.reserved != 0 || h.node == kNoNode || h.node == self_.load()) {
    return false;
  }
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

bool TcpTransport::read_conn(Conn* c, std::span<Completion> out, size_t* n) {
  size_t read_now = 0;
  // A recv() that returned less than it asked for emptied the socket: after
  // parsing, stop without the recv() that would only say EAGAIN (one system
  // call on every message's path). Edge-triggered epoll reports data that
  // arrives later, and a spinning poller tries again anyway.
  bool drained = false;
  for (;;) {
    if (c->place_left_ > 0) {
      if (ReadStep st = place_rest(c, out, n, &read_now); st != ReadStep::kMore) {
        return st == ReadStep::kDone;
      }
      continue;
    }
    size_t need = kHdr;
    if (ReadStep st = parse_frames(c, out, n, &need); st != ReadStep::kMore) {
      return st == ReadStep::kDone;
    }
    if (c->rx_begin_ == c->rx_end_ && !c->pinned_) c->rx_begin_ = c->rx_end_ = 0;
    if (c->place_left_ > 0) continue;
    if (drained) {
      c->in_ready_ = false;
      return true;
    }
    if (ReadStep st = recv_more(c, out, n, need, &read_now, &drained); st != ReadStep::kMore) {
      return st == ReadStep::kDone;
    }
  }
}

// The rest of a kWrite: straight from the socket into its target, within the
// same bounds as reads into rx_.
TcpTransport::ReadStep TcpTransport::place_rest(Conn* c, std::span<Completion> out, size_t* n,
                                                size_t* read_now) {
  if (*read_now >= kMaxReadPerPoll) return ReadStep::kFull;
  Registration* reg = c->place_reg_.get();
  if (!reg->enter()) {
    wire::WriteDesc d{reinterpret_cast<uintptr_t>(c->place_at_), 0};
    refuse_write(c, out, n, d, c->place_left_, "region deregistered during the write");
    return ReadStep::kDone;
  }
  ssize_t r = ::recv(c->fd_.get(), c->place_at_, std::min(c->place_left_, kMaxRecv), 0);
  int err = errno;
  reg->leave();
  if (r > 0) {
    c->place_at_ += r;
    c->place_left_ -= static_cast<size_t>(r);
    *read_now += static_cast<size_t>(r);
    if (c->place_left_ == 0) c->place_reg_.reset();
    return ReadStep::kMore;
  }
  return recv_failed(c, out, n, r, err);
}

// A recv() that returned `r` <= 0 (errno `err`): closed, retry, or drained.
TcpTransport::ReadStep TcpTransport::recv_failed(Conn* c, std::span<Completion> out, size_t* n,
                                                 ssize_t r, int err) {
  if (r == 0) {
    close_conn(c, out, n, "closed by peer");
    return ReadStep::kDone;
  }
  if (err == EINTR) return ReadStep::kMore;
  if (err == EAGAIN || err == EWOULDBLOCK) {
    c->in_ready_ = false;
    return ReadStep::kDone;
  }
  close_conn(c, out, n, strerror(err));
  return ReadStep::kDone;
}

// Frames what rx_ holds: hellos, messages (lent to `out` in place) and the
// start of kWrites. kMore when it needs more bytes (*need: how many the
// current frame wants in rx_).
TcpTransport::ReadStep TcpTransport::parse_frames(Conn* c, std::span<Completion> out, size_t* n,
                                                  size_t* need) {
  for (;;) {
    size_t avail = c->rx_end_ - c->rx_begin_;
    auto bytes = std::span<const std::byte>(c->rx_.get() + c->rx_begin_, avail);
    wire::FrameHeader h;
    // Any length for a kWrite (it is not buffered: its registration bounds
    // it); max_msg for the others.
    Status s = wire::decode_frame_header(bytes, UINT32_MAX, &h);
    if (s.code() == Code::kNoResource) return ReadStep::kMore;
    if (s.is_ok() && h.kind != static_cast<uint8_t>(wire::FrameKind::kWrite) &&
        h.length > config_.max_msg_bytes) {
      s = Code::kMalformed;
    }
    if (!s.is_ok()) return drop_malformed(c, out, n, "malformed frame header");
    // Before the hello, accept nothing but a hello-sized hello: an
    // unauthenticated peer must not make us buffer a large frame.
    if (!c->hello_done_ && (h.kind != static_cast<uint8_t>(wire::FrameKind::kHello) ||
                            h.length != sizeof(HelloBody))) {
      return drop_malformed(c, out, n, "bad or missing hello");
    }
    auto kind = static_cast<wire::FrameKind>(h.kind);
    if (kind == wire::FrameKind::kWrite) {  // after the hello (checked above)
      ReadStep st = start_write(c, out, n, bytes, h.length, need);
      if (st != ReadStep::kMore || c->place_left_ > 0 || *need > kHdr) return st;
      continue;
    }
    *need = kHdr + h.length;
    if (avail < *need) return ReadStep::kMore;
    auto body = bytes.subspan(kHdr, h.length);
    if (!c->hello_done_ || kind == wire::FrameKind::kHello) {
      if (c->hello_done_ || kind != wire::FrameKind::kHello || !handle_hello(c, body)) {
        return drop_malformed(c, out, n, "bad or missing hello");
      }
    } else if (kind != wire::FrameKind::kData && kind != wire::FrameKind::kDataImm) {
      return drop_malformed(c, out, n, "unexpected frame kind");
    } else {
      if (*n == out.size()) return ReadStep::kFull;
      Completion& cq = out[(*n)++];
      cq = Completion{};
      cq.kind = CqKind::kRecv;
      cq.peer = c->peer_.load(std::memory_order_relaxed);
      cq.len = h.length;
      cq.imm = h.imm;
      cq.rx = body.data();
      if (!c->pinned_) {
        c->pinned_ = true;
        pinned_.push_back(c);
      }
    }
    c->rx_begin_ += *need;
    *need = kHdr;
  }
}

TcpTransport::ReadStep TcpTransport::drop_malformed(Conn* c, std::span<Completion> out, size_t* n,
                                                    const char* why) {
  malformed_.fetch_add(1, std::memory_order_relaxed);
  close_conn(c, out, n, why);
  return ReadStep::kDone;
}

// A kWrite frame at the front of rx_ (`length` bytes after its header): only
// the descriptor is buffered; the bytes go to the target, what rx_ holds of
// them copied now and the rest received in place (place_rest). kMore with
// *need > kHdr: the descriptor is not all in yet.
TcpTransport::ReadStep TcpTransport::start_write(Conn* c, std::span<Completion> out, size_t* n,
                                                 std::span<const std::byte> bytes, uint32_t length,
                                                 size_t* need) {
  if (length < kDesc) {
    refuse_write(c, out, n, wire::WriteDesc{}, length, "shorter than its descriptor");
    return ReadStep::kDone;
  }
  *need = kHdr + kDesc;
  if (bytes.size() < *need) return ReadStep::kMore;
  wire::WriteDesc d;
  std::memcpy(&d, bytes.data() + kHdr, kDesc);
  const size_t len = length - kDesc;
  const char* why = nullptr;
  std::shared_ptr<Registration> reg = writable(d, len, &why);
  if (!reg || !reg->enter()) {
    refuse_write(c, out, n, d, len, reg ? "region deregistered" : why);
    return ReadStep::kDone;
  }
  auto* target = reinterpret_cast<std::byte*>(static_cast<uintptr_t>(d.addr));
  const size_t have = std::min(bytes.size() - *need, len);
  if (have > 0) std::memcpy(target, bytes.data() + *need, have);
  reg->leave();
  c->rx_begin_ += *need + have;
  *need = kHdr;
  if (have < len) {  // rx_ is empty now
    c->place_reg_ = std::move(reg);
    c->place_at_ = target + have;
    c->place_left_ = len - have;
  }
  return ReadStep::kMore;
}

// Makes room in rx_ for the rest of the current frame (`need` bytes from
// rx_begin_) and receives what the socket has. kFull when rx_ is lent out
// (come back after release_rx) or this poll's budget is spent.
TcpTransport::ReadStep TcpTransport::recv_more(Conn* c, std::span<Completion> out, size_t* n,
                                               size_t need, size_t* read_now, bool* drained) {
  if (c->rx_cap_ - c->rx_begin_ < need || c->rx_end_ == c->rx_cap_) {
    if (c->pinned_) return ReadStep::kFull;
    size_t live = c->rx_end_ - c->rx_begin_;
    std::memmove(c->rx_.get(), c->rx_.get() + c->rx_begin_, live);
    c->rx_begin_ = 0;
    c->rx_end_ = live;
    c->rx_reserve(need);
  }
  // At most kMaxRecv per call and kMaxReadPerPoll per connection and poll:
  // a steady stream must not keep the poller here (heartbeats, other
  // peers), and sanitizers account each call at its full length.
  if (*read_now >= kMaxReadPerPoll) return ReadStep::kFull;
  size_t want = std::min(c->rx_cap_ - c->rx_end_, kMaxRecv);
  ssize_t r = ::recv(c->fd_.get(), c->rx_.get() + c->rx_end_, want, 0);
  if (r > 0) {
    c->rx_end_ += static_cast<size_t>(r);
    *read_now += static_cast<size_t>(r);
    *drained = static_cast<size_t>(r) < want;
    return ReadStep::kMore;
  }
  return recv_failed(c, out, n, r, errno);
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
  if (conns_.size() == 0 && ready_.empty() && !conns_.has_pending() &&
      ++idle_polls_ % kIdlePolls != 0) {
    return n;
  }
  // With few connections a spinning caller tries recv() on each of them
  // instead of asking epoll first: a message is then read with one system
  // call instead of two, and an empty try costs about what epoll_wait(0)
  // does. epoll still runs every kEpollEvery-th poll, for the listener,
  // EPOLLOUT and sweeps.
  const auto& list = conns_.changed() ? conns_.refresh() : conns_.snapshot();
  // (With no connection there is nothing to try: the listener needs epoll.)
  if (!list.empty() && list.size() <= kDirectPollConns && ++direct_polls_ % kEpollEvery != 0) {
    for (auto& sp : list) {
      Conn* c = sp.get();
      if (c->closed_ || c->in_ready_) continue;
      c->in_ready_ = true;
      ready_.push_back(c);
    }
    return read_ready(out, n);
  }
  sweep_unidentified();
  epoll_event evs[64];
  int k = epoll_wait(epfd_.get(), evs, 64, 0);
  for (int i = 0; i < k; ++i) {
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
  return read_ready(out, n);
}

// Reads the connections in ready_; those that ran dry (or closed) leave it.
size_t TcpTransport::read_ready(std::span<Completion> out, size_t n) {
  size_t keep = 0;
  for (size_t i = 0; i < ready_.size(); ++i) {
    Conn* c = ready_[i];
    bool done = c->closed_ || read_conn(c, out, &n);
    if (!done) ready_[keep++] = c;
  }
  ready_.resize(keep);
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
