// VerbsTransport itself: set-up, memory, the poller, closing connections,
// and the send-CQ polling shared by every thread.
#include "transport/verbs/verbs_transport.h"

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "common/time.h"
#include "transport/factory.h"

namespace lt::transport::verbs {

namespace {
constexpr uint64_t kClosingGraceNs = 2'000'000'000;
}  // namespace

VerbsTransport::VerbsTransport(const Config& config)
    : config_(config.verbs),
      max_msg_(config.verbs.max_msg_bytes),
      op_gauge_(config.verbs.spin_us * 1000ull, kMaxLearnedSpinNs) {}

VerbsTransport::~VerbsTransport() {
  if (control_.joinable()) {
    net::ring_eventfd(ctl_stop_.get());
    control_.join();
  }
  // Connections still in the exchange are closed and swept with the rest
  // (taken out first: connect() takes the table's lock, then watch_mu_).
  decltype(watched_) watched;
  {
    std::lock_guard<std::mutex> g(watch_mu_);
    watched.swap(watched_);
  }
  for (auto& [p, c] : watched) {
    if (c->state_ != VerbsConn::State::kReady && !c->channels_.empty()) {
      conns_.add_accepted(c, [] { return true; });
    }
  }
  watched.clear();
  conns_.for_each_locked([](VerbsConn& c) { c.dead_.store(true); });
  std::vector<VerbsConn*> all;
  for (auto& c : conns_.refresh()) all.push_back(c.get());
  size_t none = 0;
  for (VerbsConn* c : all) close_conn(c, {}, &none, "transport closing");
  sweep_closed(true);
  dead_channels_.clear();
  loopback_.store(nullptr);
  loopbacks_.clear();
  conns_.release_closed();
  {
    std::lock_guard<std::mutex> g(spare_mu_);
    spare_.clear();
    rdma_spare_.clear();
  }
  regs_.clear();
  rx_region_.reset();
  if (rx_mem_ != nullptr) ::munmap(rx_mem_, rx_len_);
  local_pools_.reset();
  pools_.reset();
  ocq_.reset();
  dev_.reset();
}

Status VerbsTransport::add_to_epoll(int fd, uint64_t tag) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.u64 = tag;
  return epoll_ctl(epfd_.get(), EPOLL_CTL_ADD, fd, &ev) == 0 ? Status::ok() : Code::kSys;
}

// The device, its pools and the receive buffers, all posted.
Status VerbsTransport::open_device(TransportShare* share) {
  const VerbsConfig& c = config_;
  std::string why;
  auto devices = list_devices(&why);
  auto choice = choose(devices, c, &why);
  if (!choice) {
    // No device at all is the common case on a host without RDMA: the
    // default transports name rc everywhere, so that is not an error.
    if (devices.empty()) {
      LT_INFO("rc: %s", why.c_str());
    } else {
      LT_ERROR("rc: %s", why.c_str());
    }
    return choice.status();
  }
  // The send CQ starts small (a large one costs its creation time and its
  // memory in every process) and grows with the QPs (count_qp).
  const uint32_t cq = kFirstSendQueues * c.send_depth;
  auto dev = VerbsDevice::open(*choice, cq, &why, c.recv_buffers, share);
  if (!dev) {
    LT_ERROR("rc: %s", why.c_str());
    return dev.status();
  }
  dev_ = std::move(*dev);
  cq_limit_.store(dev_->cq_entries() - 2 * c.send_depth, std::memory_order_relaxed);
  pools_ = std::make_unique<MemPools>(*dev_, c.pool_bytes, choice->numa_node);
  // Send rings and bounce buffers: the first pool holds one peer's channels.
  const size_t bounces = c.rdma_qps_per_peer != 0 ? c.rdma_qps_per_peer : c.qps_per_peer;
  local_pools_ = std::make_unique<MemPools>(
      *dev_, 16u << 20, choice->numa_node, false,
      size_t{c.qps_per_peer} * c.send_ring_bytes + bounces * c.bounce_bytes);
  // Receive buffers, all posted.
  const size_t rx_len = size_t{c.recv_buffers} * c.recv_buffer_bytes;
  void* rx = ::mmap(nullptr, rx_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (rx == MAP_FAILED) return Code::kNoMemory;
  rx_mem_ = static_cast<std::byte*>(rx);
  rx_len_ = rx_len;
  auto region = Region::make_local(*dev_, rx, rx_len, &why);
  if (!region) {
    LT_ERROR("rc: %s", why.c_str());
    return region.status();
  }
  rx_region_ = std::move(*region);
  stash_.reset(new ibv_wc[kStash]);
  std::vector<uint32_t> all(c.recv_buffers);
  for (uint32_t i = 0; i < c.recv_buffers; ++i) all[i] = i;
  post_recv(all.data(), all.size());
  return Status::ok();
}

// The control listener, the epoll sets and the control thread.
Status VerbsTransport::open_control() {
  const VerbsConfig& c = config_;
  const Choice* choice = &dev_->choice();
  // The control listener: verbs.listen, else the GID's IPv4 address.
  std::string listen = c.listen;
  if (listen.empty()) {
    const std::string& g = choice->gid.text;
    listen = (choice->gid.ipv4_mapped ? g.substr(g.rfind(':') + 1) : std::string("0.0.0.0")) + ":0";
  }
  sockaddr_in bound{};
  auto lfd = net::listen_on(listen, "verbs.listen", &bound);
  if (!lfd) return lfd.status();
  listen_fd_ = std::move(*lfd);
  address_ = net::to_string(bound);
  epfd_.reset(epoll_create1(EPOLL_CLOEXEC));
  awake_fd_.reset(eventfd(1, EFD_NONBLOCK | EFD_CLOEXEC));
  ctl_epfd_.reset(epoll_create1(EPOLL_CLOEXEC));
  ctl_stop_.reset(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  ctl_refill_.reset(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!epfd_.valid() || !awake_fd_.valid() || !ctl_epfd_.valid() || !ctl_stop_.valid() ||
      !ctl_refill_.valid()) {
    return Code::kSys;
  }
  LT_RETURN_IF_ERROR(add_to_epoll(dev_->channel_fd(), kCqChannelTag));
  LT_RETURN_IF_ERROR(add_to_epoll(awake_fd_.get(), kAwakeFdTag));
  for (auto [fd, tag] : {std::pair{listen_fd_.get(), kListenTag},
                         {ctl_stop_.get(), kStopTag},
                         {ctl_refill_.get(), kRefillTag}}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = tag;
    if (epoll_ctl(ctl_epfd_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) return Code::kSys;
  }
  control_ = std::thread([this] { control_loop(); });
  return Status::ok();
}

Status VerbsTransport::init(TransportShare* share) {
  const VerbsConfig& c = config_;
  if (c.qps_per_peer == 0 || c.qps_per_peer > kMaxQpsPerPeer ||
      c.rdma_qps_per_peer > kMaxQpsPerPeer || c.send_depth < 8 || c.recv_buffers < 8 ||
      c.recv_buffer_bytes < 256 || c.max_msg_bytes == 0 ||
      c.send_ring_bytes < 2 * c.recv_buffer_bytes || c.bounce_bytes < kPage) {
    LT_ERROR(
        "rc: verbs.qps_per_peer must be 1 to %u, verbs.rdma_qps_per_peer 0 to %u, "
        "verbs.send_depth and verbs.recv_buffers at least 8, verbs.recv_buffer_bytes at least "
        "256, verbs.send_ring_bytes at least twice verbs.recv_buffer_bytes, verbs.bounce_bytes "
        "at least 4096",
        kMaxQpsPerPeer, kMaxQpsPerPeer);
    return Code::kInvalidArg;
  }
  LT_RETURN_IF_ERROR(open_device(share));
  slots_.reset(new ChannelSlot[kMaxChannels]);
  // One QP now: it tells the inline limit, and is the first spare.
  RcOptions o;
  o.send_depth = c.send_depth;
  o.inline_bytes = 256;
  std::string why;
  auto probe = RcQp::create(*dev_, o, &why);
  if (!probe) {
    LT_ERROR("rc: %s", why.c_str());
    return probe.status();
  }
  caps_.max_inline = (*probe)->max_inline();
  auto ocq = OneSidedCq::create(*dev_, kOneSidedCqEntries, &why);
  if (!ocq) {
    LT_ERROR("rc: %s", why.c_str());
    return ocq.status();
  }
  ocq_ = std::move(*ocq);
  count_qp();
  spare_.push_back(std::move(*probe));
  caps_.reliable = true;
  caps_.one_sided = true;
  caps_.write_imm = true;
  caps_.atomics64 = true;
  caps_.device_atomics = true;
  caps_.device_atomics_global = dev_->atomics_global();
  caps_.needs_registration = false;
  caps_.placement = false;
  caps_.guarded_reads = true;
  caps_.guard_after = true;
  caps_.async_write_imm_max = c.recv_buffer_bytes;  // one WRITE_WITH_IMM (channel.h)
  caps_.max_msg = c.max_msg_bytes;
  caps_.eager_max = std::min(c.eager_max_bytes, c.max_msg_bytes);
  caps_.max_batch = c.send_depth / 2;
  LT_RETURN_IF_ERROR(open_control());
  const Choice& choice = dev_->choice();
  LT_INFO("rc: %s port %u GID[%u] %s, control %s, inline %u", choice.device.c_str(), choice.port,
          choice.gid.index, choice.gid.text.c_str(), address_.c_str(), caps_.max_inline);
  return Status::ok();
}

void VerbsTransport::set_identity(NodeId self, uint64_t cluster_token, const Mac& hello_key) {
  hello_key_ = hello_key;
  token_.store(cluster_token, std::memory_order_release);
  self_.store(self, std::memory_order_release);
}

Result<MemRegion> VerbsTransport::alloc_memory(size_t len, Access a) {
  (void)a;  // pools are registered with every right; proto checks rights on handles
  if (len == 0) return Code::kInvalidArg;
  want_refill();  // keep the headroom (refill_spares)
  return pools_->alloc(len);
}

void VerbsTransport::free_memory(const MemRegion& r) { pools_->free(r); }

Result<MemRegion> VerbsTransport::register_memory(std::span<std::byte> mem, Access a) {
  (void)a;  // local use only: rc has no placement
  if (MemRegion in; pools_->slice_of(mem.data(), mem.size(), &in)) {
    return MemRegion{mem.data(), mem.size(), in.lkey, in.rkey};  // inside an LMR slice
  }
  std::string why;
  auto r = Region::make_local(*dev_, mem.data(), mem.size(), &why);
  if (!r) {
    LT_WARN("rc: %s", why.c_str());
    return r.status();
  }
  MemRegion out{mem.data(), mem.size(), (*r)->lkey(), 0};
  std::lock_guard<std::mutex> g(reg_mu_);
  regs_[out.lkey] = std::move(*r);
  return out;
}

void VerbsTransport::deregister_memory(const MemRegion& r) {
  if (r.rkey != 0) return;  // a span of an LMR slice: nothing was registered
  std::lock_guard<std::mutex> g(reg_mu_);
  regs_.erase(r.lkey);
}

// Another transport's LMR memory (shm's, on a node running both): its own
// zero-based registration, so peers reach it as they reach a pool slice.
Result<MemRegion> VerbsTransport::export_memory(std::span<std::byte> mem, Access a) {
  (void)a;  // pools are registered with every remote right; proto checks rights
  return pools_->adopt(mem);
}

void VerbsTransport::unexport_memory(const MemRegion& r) { pools_->free(r); }

// --- completions shared by all threads ---

TransportStats VerbsTransport::stats() const {
  TransportStats s;
  s.connections = conns_.size();
  {
    std::lock_guard<std::mutex> g(spare_mu_);
    s.spare_queue_pairs = spare_.size() + rdma_spare_.size();
  }
  const size_t all = qps_.load(std::memory_order_relaxed);
  s.queue_pairs = all > s.spare_queue_pairs ? all - s.spare_queue_pairs : 0;
  s.registrations = pools_->registrations() + local_pools_->registrations();
  return s;
}

void VerbsTransport::poll_send_cq() { poll_cq(dev_->cq(), send_cq_mu_); }

void VerbsTransport::poll_onesided_cq() {
  if (ocq_ != nullptr) poll_cq(ocq_->raw(), ocq_->lock());
}

void VerbsTransport::poll_cq(ibv_cq* cq, SpinLock& mu) {
  if (!mu.try_lock()) return;
  ibv_wc wc[16];
  int n;
  while ((n = ibv_poll_cq(cq, 16, wc)) > 0) {
    for (int i = 0; i < n; ++i) {
      const uint32_t slot = static_cast<uint32_t>(wc[i].wr_id >> 48);
      const uint16_t gen = static_cast<uint16_t>(wc[i].wr_id >> 32);
      Channel* ch = slot < kMaxChannels ? slots_[slot].ch.load(std::memory_order_acquire) : nullptr;
      if (ch == nullptr || slots_[slot].gen != gen) continue;  // its channel is gone
      ch->on_completion(wc[i]);
    }
  }
  mu.unlock();
}

void VerbsTransport::report_send_done(uint64_t wr_id, Code code) {
  done_.push(wr_id, code);
  if (armed_.load(std::memory_order_seq_cst)) kick();
}

void VerbsTransport::note_backlog(Channel* c) {
  std::lock_guard<std::mutex> g(backlog_mu_);
  if (std::find(backlogged_.begin(), backlogged_.end(), c) == backlogged_.end()) {
    backlogged_.push_back(c);
  }
  has_backlog_.store(true, std::memory_order_seq_cst);
  if (armed_.load(std::memory_order_seq_cst)) kick();
}

void VerbsTransport::break_conn(VerbsConn* c) {
  if (c->broken_.exchange(true)) return;
  has_broken_.store(true, std::memory_order_seq_cst);
  kick();
}

void VerbsTransport::kick() { net::ring_eventfd(awake_fd_.get()); }

// --- the poller ---

void VerbsTransport::close_conn(VerbsConn* c, std::span<Completion> out, size_t* n,
                                const char* why) {
  if (c->closed_.load()) return;
  c->closed_ns_ = now_ns();
  c->dead_.store(true, std::memory_order_release);
  c->closed_.store(true, std::memory_order_release);
  const NodeId peer = c->peer();
  // The peer sees EOF at once; the control thread lets go of the socket.
  ::shutdown(c->fd(), SHUT_RDWR);
  for (auto& ch : c->channels_) ch->fail();
  std::shared_ptr<VerbsConn> keep;
  for (auto& sp : conns_.snapshot()) {
    if (sp.get() == c) keep = sp;
  }
  if (conns_.remove(c, peer) && peer != kNoNode) {
    LT_DEBUG("rc: connection to node %u closed: %s", peer, why);
    conns_.report_lost(peer, out, n);
  }
  if (keep) closing_.push_back(std::move(keep));
}

// Takes c's channels out of the slot, QP-number and backlog tables (the
// undoing of add_channels).
void VerbsTransport::remove_channels(VerbsConn* c) {
  {
    std::lock_guard<SpinLock> cq(send_cq_mu_);
    std::lock_guard<SpinLock> ocq(ocq_->lock());
    std::lock_guard<std::mutex> g(slots_mu_);
    for (auto& ch : c->channels_) {
      if (ch->slot() == 0) continue;
      slots_[ch->slot()].ch.store(nullptr, std::memory_order_release);
      free_slots_.push_back(ch->slot());
      ch->set_slot(0, 0);
    }
  }
  {
    std::lock_guard<SpinLock> g(qpn_mu_);
    for (auto& ch : c->channels_) by_qpn_.erase(ch->qp().local().qpn);
  }
  std::lock_guard<std::mutex> g(backlog_mu_);
  for (auto& ch : c->channels_) {
    backlogged_.erase(std::remove(backlogged_.begin(), backlogged_.end(), ch.get()),
                      backlogged_.end());
  }
}

// Closed connections keep their channels in the table until the flushes of
// what they had in flight came back (or kClosingGraceNs), so a late
// completion never meets a freed channel.
void VerbsTransport::sweep_closed(bool all) {
  const uint64_t now = now_ns();
  for (size_t i = 0; i < closing_.size();) {
    VerbsConn* c = closing_[i].get();
    poll_send_cq();
    poll_onesided_cq();
    bool drained = true;
    for (auto& ch : c->channels_) drained = drained && ch->in_flight() == 0;
    if (!all && !drained && now - c->closed_ns_ < kClosingGraceNs) {
      ++i;
      continue;
    }
    remove_channels(c);
    qps_.fetch_sub(c->channels_.size());
    for (auto& ch : c->channels_) dead_channels_.push_back({std::move(ch), now});
    c->channels_.clear();
    closing_[i] = std::move(closing_.back());
    closing_.pop_back();
  }
  while (!dead_channels_.empty() &&
         (all || now - dead_channels_.front().since_ns > kDeadChannelNs)) {
    dead_channels_.erase(dead_channels_.begin());
  }
}

size_t VerbsTransport::poll(std::span<Completion> out) {
  size_t n = conns_.take_pending(out, 0);
  if (conns_.changed()) conns_.refresh();
  // Events come only while armed (prepare_sleep drains any that come later).
  if (armed_.load(std::memory_order_relaxed)) handle_events();
  poll_send_cq();
  n = done_.drain(out, n);
  n = poll_recv(out, n);
  if (has_backlog_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> g(backlog_mu_);
    for (size_t i = 0; i < backlogged_.size();) {
      backlogged_[i]->pump();
      if (backlogged_[i]->has_backlog()) {
        ++i;
      } else {
        backlogged_[i] = backlogged_.back();
        backlogged_.pop_back();
      }
    }
    has_backlog_.store(!backlogged_.empty(), std::memory_order_release);
  }
  // Read first: an exchange on every poll is a locked instruction.
  if (has_broken_.load(std::memory_order_relaxed) && has_broken_.exchange(false)) {
    std::vector<VerbsConn*> broken;
    for (auto& sp : conns_.snapshot()) {
      if (sp->broken_.load() && !sp->closed_.load()) broken.push_back(sp.get());
    }
    for (VerbsConn* c : broken) close_conn(c, out, &n, "a work request failed");
  }
  if (!closing_.empty() || !dead_channels_.empty()) {
    if (const uint64_t now = now_ns(); now >= next_sweep_ns_) {
      sweep_closed(false);
      next_sweep_ns_ = now + 10'000'000;
    }
  }
  return n;
}

}  // namespace lt::transport::verbs
