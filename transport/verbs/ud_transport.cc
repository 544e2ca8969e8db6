// UdTransport itself: the device, the UD QP and its buffers, connections,
// timers and the poller's loop. The send slots and posts are in
// ud_slots.cc, the receive path in ud_rx.cc, a connection's send side in
// ud_tx.cc.
#include "transport/verbs/ud_transport.h"

#include <infiniband/verbs.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/log.h"
#include "common/time.h"
#include "transport/factory.h"

namespace lt::transport::verbs {

namespace {

constexpr uint64_t kChannelTag = 1, kAwakeTag = 2, kTimerTag = 3;
constexpr uint32_t kSendQueueDepth = 1024;

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// Lowers `a` to `v`; true when it did.
bool lower_to(std::atomic<uint64_t>& a, uint64_t v) {
  uint64_t cur = a.load(std::memory_order_acquire);
  while (v < cur) {
    if (a.compare_exchange_weak(cur, v, std::memory_order_acq_rel)) return true;
  }
  return false;
}

}  // namespace

UdTransport::UdTransport(const Config& config) : config_(config.verbs) {}

UdTransport::~UdTransport() {
  if (srq_watched_) dev_->events().unwatch(dev_->srq());
  if (qp_watched_) dev_->events().unwatch(qp_);
  if (qp_ != nullptr && send_region_) say_bye();
  conns_.for_each_locked([](UdConn& c) {
    c.dead_.store(true);
    c.drop_ah();
  });
  {
    std::lock_guard<std::mutex> g(backlog_mu_);
    backlogged_.clear();
  }
  conns_.release_closed();
  if (qp_ != nullptr) ibv_destroy_qp(qp_);
  send_region_.reset();
  rx_region_.reset();
  if (send_mem_ != nullptr) ::munmap(send_mem_, send_len_);
  if (rx_mem_ != nullptr) ::munmap(rx_mem_, rx_len_);
}

Status UdTransport::init(TransportShare* share) {
  const VerbsConfig& c = config_;
  if (c.ud_window < 8 || c.ud_window > kMaxUdWindow || (c.ud_window & (c.ud_window - 1)) != 0 ||
      c.ud_send_slots < 2 * c.ud_window || c.ud_recv_buffers < 16 || c.max_msg_bytes == 0 ||
      c.ud_loss_percent > 50 || c.ud_peer_timeout_ms == 0 || c.ud_congestion > 2) {
    LT_ERROR(
        "ud: verbs.ud_window must be a power of two from 8 to %u, verbs.ud_send_slots at least "
        "twice it, verbs.ud_recv_buffers at least 16, verbs.ud_loss_percent at most 50, "
        "verbs.ud_peer_timeout_ms above 0, verbs.ud_congestion 0, 1 or 2",
        kMaxUdWindow);
    return Code::kInvalidArg;
  }
  loss_percent_ = c.ud_loss_percent;
  LT_RETURN_IF_ERROR(open_device(share));
  LT_RETURN_IF_ERROR(make_qp());
  LT_RETURN_IF_ERROR(make_buffers());
  caps_.reliable = true;   // by ltier's acknowledgements, not the device's
  caps_.write_imm = true;  // carried in the first datagram's header
  caps_.max_msg = c.max_msg_bytes;
  caps_.eager_max = std::min(c.eager_max_bytes, c.max_msg_bytes);
  caps_.max_batch = c.ud_window / 2;
  caps_.lazy_connect = true;
  epfd_.reset(epoll_create1(EPOLL_CLOEXEC));
  awake_fd_.reset(eventfd(1, EFD_NONBLOCK | EFD_CLOEXEC));
  timer_fd_.reset(timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC));
  if (!epfd_.valid() || !awake_fd_.valid() || !timer_fd_.valid()) return Code::kSys;
  for (auto [fd, tag] : {std::pair{dev_->channel_fd(), kChannelTag},
                         {awake_fd_.get(), kAwakeTag},
                         {timer_fd_.get(), kTimerTag}}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = tag;
    if (epoll_ctl(epfd_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) return Code::kSys;
  }
  UdAddress a;
  std::memcpy(a.gid, dev_->gid().data(), 16);
  a.qpn = qp_->qp_num;
  a.lid = dev_->lid();
  a.mtu = mtu_;
  address_ = format_ud_address(a);
  const Choice& choice = dev_->choice();
  LT_INFO("ud: %s port %u GID[%u] %s, QP %u, MTU %u%s", choice.device.c_str(), choice.port,
          choice.gid.index, choice.gid.text.c_str(), a.qpn, mtu_,
          loss_percent_ != 0 ? ", dropping datagrams on purpose (verbs.ud_loss_percent)" : "");
  return Status::ok();
}

Status UdTransport::open_device(TransportShare* share) {
  std::string why;
  auto devices = list_devices(&why);
  auto choice = choose(devices, config_, &why);
  if (!choice) {
    if (devices.empty()) {
      LT_INFO("ud: %s", why.c_str());
    } else {
      LT_ERROR("ud: %s", why.c_str());
    }
    return choice.status();
  }
  mtu_ = std::min<uint32_t>(choice->mtu, 4096);
  if (mtu_ < 256) {
    LT_ERROR("ud: %s port %u has an MTU of %u bytes, too small for ud (256 at least)",
             choice->device.c_str(), choice->port, choice->mtu);
    return Code::kNotFound;
  }
  sq_depth_ = kSendQueueDepth;
  auto dev = VerbsDevice::open(*choice, 2 * sq_depth_, &why, config_.ud_recv_buffers, share);
  if (!dev) {
    LT_ERROR("ud: %s", why.c_str());
    return dev.status();
  }
  dev_ = std::move(*dev);
  return Status::ok();
}

Status UdTransport::make_qp() {
  const Choice& c = dev_->choice();
  ibv_qp_init_attr ia{};
  ia.send_cq = dev_->cq();
  ia.recv_cq = dev_->recv_cq();
  ia.srq = dev_->srq();
  ia.qp_type = IBV_QPT_UD;
  ia.sq_sig_all = 1;
  ia.cap.max_send_wr = sq_depth_;
  ia.cap.max_send_sge = 1;
  qp_ = ibv_create_qp(dev_->pd(), &ia);
  if (qp_ == nullptr) {
    LT_ERROR("ud: ibv_create_qp (UD, %u sends) on %s: %s", sq_depth_, c.device.c_str(),
             std::strerror(errno));
    return Code::kNoResource;
  }
  dev_->events().watch_qp(qp_, &qp_error_);
  qp_watched_ = true;
  return ready_qp();
}

// RESET (a new QP, or one put back after an error) to INIT, RTR and RTS.
Status UdTransport::ready_qp() {
  const Choice& c = dev_->choice();
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = static_cast<uint8_t>(c.port);
  a.qkey = kUdQkey;
  int rc = ibv_modify_qp(qp_, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
  if (rc == 0) {
    a = {};
    a.qp_state = IBV_QPS_RTR;
    rc = ibv_modify_qp(qp_, &a, IBV_QP_STATE);
  }
  if (rc == 0) {
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 0;
    rc = ibv_modify_qp(qp_, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
  }
  if (rc != 0) {
    LT_ERROR("ud: ibv_modify_qp of the UD QP on %s port %u: %s (verbs.device, verbs.port)",
             c.device.c_str(), c.port, std::strerror(rc));
    return Code::kSys;
  }
  return Status::ok();
}

Status UdTransport::make_buffers() {
  std::string why;
  slot_stride_ = round_up(mtu_, 64);
  slots_ = config_.ud_send_slots;
  send_len_ = round_up(slot_stride_ * slots_, 4096);
  rx_stride_ = round_up(kGrhBytes + mtu_, 64);
  rx_len_ = round_up(rx_stride_ * config_.ud_recv_buffers, 4096);
  for (auto [mem, len] : {std::pair{&send_mem_, send_len_}, {&rx_mem_, rx_len_}}) {
    void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return Code::kNoMemory;
    *mem = static_cast<std::byte*>(p);
  }
  auto s = Region::make_local(*dev_, send_mem_, send_len_, &why);
  auto r = s ? Region::make_local(*dev_, rx_mem_, rx_len_, &why) : s.status();
  if (!r) {
    LT_ERROR("ud: %s", why.c_str());
    return r.status();
  }
  send_region_ = std::move(*s);
  rx_region_ = std::move(*r);
  slot_state_.reset(new std::atomic<uint32_t>[slots_]);
  free_slots_.reserve(slots_);
  for (uint32_t i = slots_; i-- > 0;) {
    slot_state_[i].store(0);
    free_slots_.push_back(i);
  }
  for (uint32_t i = 0; i < config_.ud_recv_buffers; ++i) post_recv(i);
  rx_reserve_ = config_.ud_recv_buffers / 2;
  if (config_.ud_congestion != 0) {
    rx_mark_ = std::max<uint32_t>(config_.ud_recv_buffers / 4, 1);
    dev_->events().watch_srq(dev_->srq(), &srq_fired_);
    srq_watched_ = true;
    set_srq_limit();
  }
  stash_.reset(new ibv_wc[1]);
  return Status::ok();
}

void UdTransport::set_identity(NodeId self, uint64_t cluster_token, const Mac& hello_key) {
  hello_key_ = hello_key;
  token_.store(cluster_token, std::memory_order_release);
  self_.store(self, std::memory_order_release);
}

Result<MemRegion> UdTransport::register_memory(std::span<std::byte> mem, Access a) {
  (void)a;  // messages are copied into send slots: nothing to register
  return MemRegion{mem.data(), mem.size(), 0, 0};
}

TransportStats UdTransport::stats() const {
  TransportStats s;
  s.connections = conns_.size();
  s.queue_pairs = 1;
  s.registrations = 2;
  s.retransmits = retransmits_.load(std::memory_order_relaxed);
  s.window_cuts = window_cuts_.load(std::memory_order_relaxed);
  s.mark_cuts = mark_cuts_.load(std::memory_order_relaxed);
  s.marks_sent = marks_sent_.load(std::memory_order_relaxed);
  s.qp_resets = qp_resets_.load(std::memory_order_relaxed);
  s.send_slots = slots_;
  std::lock_guard<SpinLock> g(free_mu_);
  s.send_slots_free = free_slots_.size();
  return s;
}

// --- timers and the poller ---

void UdTransport::set_timerfd(uint64_t at_ns) {
  itimerspec its{};
  if (at_ns != UINT64_MAX) {
    at_ns = std::max<uint64_t>(at_ns, 1);
    its.it_value.tv_sec = static_cast<time_t>(at_ns / 1'000'000'000);
    its.it_value.tv_nsec = static_cast<long>(at_ns % 1'000'000'000);
  }
  timerfd_settime(timer_fd_.get(), TFD_TIMER_ABSTIME, &its, nullptr);
}

void UdTransport::need_timer(uint64_t at_ns) {
  if (lower_to(next_timer_ns_, at_ns) && armed_.load(std::memory_order_seq_cst)) {
    set_timerfd(at_ns);
  }
}

void UdTransport::lower_to_timer(uint64_t at_ns) { lower_to(next_timer_ns_, at_ns); }

void UdTransport::run_timers(uint64_t now, std::span<Completion> out, size_t* n) {
  next_timer_ns_.store(UINT64_MAX, std::memory_order_release);
  uint64_t next = UINT64_MAX;
  const uint64_t timeout = uint64_t{config_.ud_peer_timeout_ms} * 1'000'000;
  std::vector<UdConn*> lost;
  for (const auto& sp : conns_.snapshot()) {
    UdConn* c = sp.get();
    if (c->dead_.load(std::memory_order_acquire)) continue;
    bool gone = false;
    const uint64_t t = c->on_timer(now, timeout, &gone);
    if (gone) {
      lost.push_back(c);
      continue;
    }
    if (t != 0) next = std::min(next, t);
    if (c->rx.ack_due != 0) {
      if (c->rx.ack_due <= now) {
        if (!drop_carried_ack(*c)) send_ack(*c, now);
      } else {
        next = std::min(next, c->rx.ack_due);
      }
    }
  }
  for (UdConn* c : lost) close_conn(c, out, n, "no answer within verbs.ud_peer_timeout_ms");
  lower_to(next_timer_ns_, next);
}

void UdTransport::close_conn(UdConn* c, std::span<Completion> out, size_t* n, const char* why) {
  if (c->rx.closed) return;
  c->rx.closed = true;
  c->dead_.store(true, std::memory_order_release);
  c->close_tx();
  for (int32_t& h : c->rx.held) {
    if (h >= 0) post_recv(static_cast<uint32_t>(h));
    h = -1;
  }
  c->rx.msg = {};
  c->rx.in_msg = false;
  const NodeId peer = c->peer();
  auto it = by_node_.find(peer);
  if (it != by_node_.end() && it->second == c) by_node_.erase(it);
  if (conns_.remove(c, peer) && peer != kNoNode) {
    LT_INFO("ud: connection to node %u closed: %s", peer, why);
    conns_.report_lost(peer, out, n);
  }
}

void UdTransport::kick() { net::ring_eventfd(awake_fd_.get()); }

void UdTransport::handle_events() {
  epoll_event evs[4];
  int k = ::epoll_wait(epfd_.get(), evs, 4, 0);
  for (int i = 0; i < k; ++i) {
    if (evs[i].data.u64 == kChannelTag) dev_->drain_events();
    if (evs[i].data.u64 == kTimerTag) net::drain_eventfd(timer_fd_.get());
    if (evs[i].data.u64 != kAwakeTag && armed_.exchange(false)) kick();
  }
}

bool UdTransport::drop_carried_ack(UdConn& c) {
  UdConn::Rx& r = c.rx;
  if (r.ack_now || r.mark || r.held_count != 0 ||
      c.acked_upto.load(std::memory_order_acquire) != r.next) {
    return false;
  }
  r.ack_due = 0;
  r.unacked = 0;
  return true;
}

// Before the poller sleeps the timer is made exact: a delayed
// acknowledgement that a datagram going back carried is dropped, and a
// connection with nothing in flight needs no retransmission timer, so a
// ping-pong sleeps without a wake-up per message.
void UdTransport::settle_timer(uint64_t now) {
  next_timer_ns_.store(UINT64_MAX, std::memory_order_release);
  const uint64_t timeout = uint64_t{config_.ud_peer_timeout_ms} * 1'000'000;
  uint64_t next = UINT64_MAX;
  for (const auto& sp : conns_.snapshot()) {
    UdConn::Rx& r = sp->rx;
    if (r.closed) continue;
    if (r.ack_due != 0) drop_carried_ack(*sp);
    if (r.ack_due != 0) next = std::min(next, r.ack_due);
    if (const uint64_t t = sp->tx_deadline(now, timeout); t != 0) next = std::min(next, t);
  }
  next = std::min(next, fence_deadline(now));  // a fenced QP looked at again (ud_recover.cc)
  lower_to(next_timer_ns_, next);
}

// Armed only here, never by a spin of empty polls: an armed receive CQ
// makes the device raise an event per datagram, which a caller polling for
// its reply would pay for with nobody asleep to wake.
void UdTransport::prepare_sleep() {
  dev_->events().read();  // the device's own events (async_events.h), before the poller sleeps
  handle_events();        // a stale event or timer expiry would end the sleep at once
  try_arm();
}

// Going to sleep: arm the CQs and the timer, then look once more (a
// completion that came before the arming raises no event).
void UdTransport::try_arm() {
  if (!ready_.empty() || conns_.has_pending() || has_backlog_.load() || has_broken_.load()) return;
  // What an earlier arming stashed still waits for a poll, or a QP in error
  // waits for its flushed sends (recover_qp), which raise no event: stay awake.
  if (stash_n_ != 0 || qp_error_.load() || fence_deadline(now_ns()) == 0) {
    kick();
    return;
  }
  net::drain_eventfd(awake_fd_.get());
  settle_timer(now_ns());
  armed_.store(true, std::memory_order_seq_cst);
  // Send completions only free slots and send-queue room, which a poster
  // short of either asks the poller for (note_backlog): no wake-up per send.
  dev_->arm_recv();
  // A connection may lower the timer while it is set: set it until it holds.
  for (uint64_t set = 0;;) {
    const uint64_t t = next_timer_ns_.load(std::memory_order_acquire);
    if (t == set) break;
    set_timerfd(t);
    set = t;
  }
  poll_send_cq();
  stash_n_ = ibv_poll_cq(dev_->recv_cq(), 1, stash_.get());
  if (stash_n_ < 0) stash_n_ = 0;
  if (stash_n_ != 0 || done_.pending() || has_backlog_.load()) {
    armed_.store(false, std::memory_order_seq_cst);
    kick();
  }
}

size_t UdTransport::poll(std::span<Completion> out) {
  size_t n = 0;
  while (!ready_.empty() && n < out.size()) {
    out[n++] = ready_.front();
    ready_.pop_front();
  }
  n = conns_.take_pending(out, n);
  if (conns_.changed()) refresh_conns();
  // Events come only while armed (prepare_sleep drains any that come later).
  if (armed_.load(std::memory_order_relaxed)) handle_events();
  poll_send_cq();
  n = done_.drain(out, n);
  n = poll_recv(out, n);
  const uint64_t now = now_ns();
  flush_acks(now);
  if (has_backlog_.load(std::memory_order_acquire)) {
    std::vector<std::shared_ptr<UdConn>> pumps;
    {
      std::lock_guard<std::mutex> g(backlog_mu_);
      pumps.swap(backlogged_);
      has_backlog_.store(false, std::memory_order_release);
    }
    for (auto& c : pumps) {
      if (!c->dead_.load()) c->pump();
    }
  }
  if (has_broken_.exchange(false)) {
    for (auto& sp : std::vector<std::shared_ptr<UdConn>>(conns_.snapshot())) {
      if (sp->broken_.load()) close_conn(sp.get(), out, &n, "a malformed stream");
    }
  }
  if (now >= next_timer_ns_.load(std::memory_order_acquire)) run_timers(now, out, &n);
  if (sq_fenced_ || qp_error_.load(std::memory_order_acquire)) recover_qp(now);
  return n;
}

void UdTransport::refresh_conns() {
  by_node_.clear();
  for (const auto& sp : conns_.refresh()) {
    if (!sp->dead_.load()) by_node_[sp->peer()] = sp.get();
  }
}

}  // namespace lt::transport::verbs
