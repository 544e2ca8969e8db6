// ShmTransport itself: setup, memory (alloc_memory regions peers map, register_memory for
// placement), the poller (rings, bells, arming) and release_rx.
#include <sched.h>
#include <sys/epoll.h>

#include <cinttypes>
#include <cstdio>
#include <random>

#include "common/trace_points.h"
#include "transport/factory.h"
#include "transport/shm/shm_conn.h"

namespace lt::transport::shm {

ShmTransport::ShmTransport(const ShmConfig& config) : config_(config) {}

ShmTransport::~ShmTransport() {
  conns_.for_each_locked([](ShmConn& c) { c.mark_dead(); });
  std::lock_guard<std::mutex> g(seg_mu_);
  for (auto& [k, s] : segs_) {
    ::munmap(s.addr, s.len);
    ::close(s.fd);
  }
}

Status ShmTransport::init() {
  const uint32_t r = config_.ring_bytes;
  if (!is_pow2(r) || r < kMinRingBytes || r > kMaxRingBytes) {
    LT_ERROR("shm.ring_bytes %u: want a power of two in [%u, %u]", r, kMinRingBytes, kMaxRingBytes);
    return Code::kInvalidArg;
  }
  if (config_.max_msg_bytes == 0) {
    LT_ERROR("shm.max_msg_bytes must not be 0");
    return Code::kInvalidArg;
  }
  max_single_ = r / 4 - kRecHdr;
  caps_.reliable = true;
  caps_.one_sided = true;
  caps_.rkey_checked = true;
  caps_.write_imm = true;
  caps_.atomics64 = true;
  caps_.guarded_reads = true;  // a poster does each op itself, in order
  caps_.guard_before = true;
  caps_.views = true;               // ShmConn::view: the regions it maps for posts
  caps_.needs_registration = true;  // peers reach only alloc_memory regions
  caps_.max_inline = static_cast<uint32_t>(max_single_);
  caps_.max_msg = config_.max_msg_bytes;
  caps_.eager_max = config_.eager_max_bytes;
  caps_.max_batch = kMaxPostBatch;
  if (config_.cma != 0) {
    // Cross-memory attach (placement writes) needs process_vm_writev; a
    // seccomp filter or a kernel without it refuses even our own memory.
    uint64_t src = 0x5a5a, dst = 0;
    iovec l{&dst, sizeof(dst)}, rr{&src, sizeof(src)};
    if (::process_vm_readv(::getpid(), &l, 1, &rr, 1, 0) == sizeof(dst) && dst == src) {
      caps_.placement = true;
      caps_.place_min_bytes = config_.cma_min_bytes;
      caps_.split_min_bytes = config_.split_min_bytes;
    } else {
      LT_DEBUG("shm: no cross-memory attach (%s); large messages are staged", strerror(errno));
    }
  }

  {
    net::Fd probe(::memfd_create("ltier-probe", MFD_CLOEXEC));
    struct stat st;
    if (!probe.valid() || ::fstat(probe.get(), &st) != 0) {
      LT_ERROR("shm: memfd_create: %s", strerror(errno));
      return Code::kSys;
    }
    memfd_dev_ = st.st_dev;
  }
  epfd_.reset(::epoll_create1(EPOLL_CLOEXEC));
  awake_fd_.reset(::eventfd(1, EFD_NONBLOCK | EFD_CLOEXEC));  // readable: not armed
  if (!epfd_.valid() || !awake_fd_.valid()) return Code::kSys;
  LT_RETURN_IF_ERROR(add_to_epoll(awake_fd_.get(), kAwakeTag));

  uint64_t rnd = 0;
  if (::getrandom(&rnd, sizeof(rnd), 0) != sizeof(rnd)) {
    rnd = now_ns() ^ reinterpret_cast<uintptr_t>(this);
  }
  char name[64];
  std::snprintf(name, sizeof(name), "ltier-%d-%016" PRIx64, static_cast<int>(::getpid()), rnd);
  abstract_name_ = name;
  listen_fd_.reset(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!listen_fd_.valid()) return Code::kSys;
  sockaddr_un a;
  socklen_t alen = abstract_addr(abstract_name_, &a);
  if (::bind(listen_fd_.get(), reinterpret_cast<sockaddr*>(&a), alen) != 0 ||
      ::listen(listen_fd_.get(), 128) != 0) {
    LT_ERROR("shm: cannot listen on @%s: %s", name, strerror(errno));
    return Code::kSys;
  }
  LT_RETURN_IF_ERROR(add_to_epoll(listen_fd_.get(), kListenTag));
  address_ = "shm:" + std::to_string(::getpid()) + ":" + abstract_name_;
  return Status::ok();
}

Status ShmTransport::add_to_epoll(int fd, uint64_t tag) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.u64 = tag;
  if (::epoll_ctl(epfd_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) return Code::kSys;
  return Status::ok();
}

// The hello key is not used: an shm hello comes over a unix socket from a
// process of the same user (checked with SO_PEERCRED), which could read this
// process's memory anyway.
void ShmTransport::set_identity(NodeId self, uint64_t cluster_token, const Mac&) {
  token_.store(cluster_token, std::memory_order_release);
  self_.store(self, std::memory_order_release);
}

Result<MemRegion> ShmTransport::register_memory(std::span<std::byte> mem, Access a) {
  MemRegion r{mem.data(), mem.size(), 0, 0};
  {
    std::lock_guard<std::mutex> g(seg_mu_);
    for (auto& [k, s] : segs_) {
      if (mem.data() >= s.addr && mem.size() <= s.len &&
          static_cast<size_t>(mem.data() - s.addr) <= s.len - mem.size()) {
        r.rkey = k;
        return r;
      }
    }
  }
  Access remote = static_cast<Access>(
      static_cast<uint8_t>(a) & static_cast<uint8_t>(Access::kRemoteRead | Access::kRemoteWrite));
  if (caps_.placement && remote != Access::kLocal) r.rkey = make_place_rkey(remote);
  return r;
}

Result<MemRegion> ShmTransport::alloc_memory(size_t len, Access a) {
  if (len == 0) return Code::kInvalidArg;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  if (len > SIZE_MAX - page) return Code::kInvalidArg;
  const size_t size = (len + page - 1) / page * page;
  net::Fd fd(::memfd_create("ltier-mem", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) {
    LT_WARN("shm: memfd_create: %s", strerror(errno));
    return Code::kSys;
  }
  if (fd.get() > static_cast<int>(kRkeyFdMask)) return Code::kNoResource;
  if (::ftruncate(fd.get(), static_cast<off_t>(size)) != 0) return Code::kNoMemory;
  struct stat st;
  if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0 ||
      ::fstat(fd.get(), &st) != 0) {
    return Code::kSys;
  }
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) return Code::kNoMemory;
  uint64_t rkey = make_rkey(fd.get(), a, static_cast<uint64_t>(st.st_ino));
  std::lock_guard<std::mutex> g(seg_mu_);
  segs_[rkey] = Segment{fd.release(), static_cast<std::byte*>(p), size};
  return MemRegion{static_cast<std::byte*>(p), size, 0, rkey};
}

void ShmTransport::free_memory(const MemRegion& r) {
  Segment s;
  {
    std::lock_guard<std::mutex> g(seg_mu_);
    auto it = segs_.find(r.rkey);
    if (it == segs_.end() || it->second.addr != r.addr) {
      LT_DEBUG("shm: free_memory of a region this transport did not allocate");
      return;
    }
    s = it->second;
    segs_.erase(it);
  }
  ::munmap(s.addr, s.len);
  ::close(s.fd);
}

// Delivers what the lane holds. True when it took anything.
bool ShmTransport::read_lane(ShmConn* c, std::span<Completion> out, size_t* n) {
  bool took = false;
  while (*n < out.size() && c->lane_.ready()) {
    uint32_t len = 0;
    CpuHint cpu = kCpuUnknown;
    const char* bad = nullptr;
    const std::byte* p = c->lane_.take(&len, &cpu, &bad);
    if (p == nullptr) {
      malformed_.fetch_add(1, std::memory_order_relaxed);
      close_conn(c, out, n, bad);
      return true;
    }
    took = true;
    if (len == ShmLane::kPadTaken) continue;
    LT_TRACE_POINT('d');
    fill_recv_completion(&out[(*n)++], c->peer_.load(std::memory_order_relaxed), p, len, 0, cpu);
    if (!c->lent_ && !c->stage_lent_) lent_.push_back(c);
    c->lent_ = true;
  }
  return took;
}

// Delivers what the lane, then the ring, holds. True when it consumed anything.
bool ShmTransport::read_ring(ShmConn* c, std::span<Completion> out, size_t* n) {
  bool progress = read_lane(c, out, n);
  if (c->closed_) return true;
  const uint64_t ring = c->ring_;
  for (;;) {
    if (*n == out.size() || !c->rx_ready()) break;
    const uint64_t idx = c->rx_pos_ & c->mask_;
    const uint64_t contig = ring - idx;
    // Bytes the producer may have written from here on: up to a ring past
    // what this side has released.
    const uint64_t avail = ring - (c->rx_pos_ - c->rx_released_);
    const std::byte* at = c->rx_ring_ + idx;
    RecHeader h;
    std::memcpy(&h, at, sizeof(h));  // a private copy: the peer cannot change it under us
    const uint64_t rec = record_bytes(h.len);
    const auto kind = static_cast<RecKind>(h.kind);
    const char* bad = nullptr;
    if (kind == RecKind::kPad) {
      if (contig > avail || h.len != contig - kRecHdr) bad = "bad pad record";
    } else if (rec > contig || rec > avail) {
      bad = "record beyond the producer's room";
    }
    if (bad == nullptr) {
      switch (kind) {
        case RecKind::kPad:
          c->rx_pos_ += contig;
          progress = true;
          continue;
        case RecKind::kMsg: {
          LT_TRACE_POINT('d');
          fill_recv_completion(&out[(*n)++], c->peer_.load(std::memory_order_relaxed), at + kRecHdr,
                               h.len, h.imm, h.cpu);
          if (!c->lent_ && !c->stage_lent_) lent_.push_back(c);
          c->lent_ = true;
          c->rx_pos_ += rec;
          progress = true;
          continue;
        }
        case RecKind::kFragFirst:
          // An empty message is never fragmented (and would reassemble
          // into no buffer at all).
          if (c->staging_ || h.total == 0 || h.total > config_.max_msg_bytes || h.len > h.total) {
            bad = "bad first fragment";
            break;
          }
          if (c->stage_lent_) return progress;  // staging still lent out: next poll
          if (c->stage_cap_ < h.total) {
            c->stage_.reset(new (std::nothrow) std::byte[h.total]);
            c->stage_cap_ = c->stage_ ? h.total : 0;
            if (!c->stage_) {
              LT_ERROR("shm: no memory to reassemble a %u-byte message from node %u", h.total,
                       c->peer_.load());
              close_conn(c, out, n, "out of memory");
              return true;
            }
          }
          c->staging_ = true;
          c->stage_len_ = 0;
          c->stage_total_ = h.total;
          c->stage_imm_ = h.imm;
          [[fallthrough]];
        case RecKind::kFrag: {
          if (!c->staging_ || c->stage_len_ + h.len > c->stage_total_ ||
              (kind == RecKind::kFrag && h.len == 0)) {
            bad = "bad fragment";
            break;
          }
          std::memcpy(c->stage_.get() + c->stage_len_, at + kRecHdr, h.len);
          c->stage_len_ += h.len;
          c->rx_pos_ += rec;
          progress = true;
          if (c->stage_len_ == c->stage_total_) {
            fill_recv_completion(&out[(*n)++], c->peer_.load(std::memory_order_relaxed),
                                 c->stage_.get(), static_cast<uint32_t>(c->stage_total_),
                                 c->stage_imm_, h.cpu);
            if (!c->lent_ && !c->stage_lent_) lent_.push_back(c);
            c->stage_lent_ = true;
            c->staging_ = false;
          }
          continue;
        }
        default:
          bad = "unknown record kind";
      }
    }
    malformed_.fetch_add(1, std::memory_order_relaxed);
    close_conn(c, out, n, bad);
    return true;
  }
  if (!c->lent_) c->publish_tail();  // fragments copied out: free their room now
  return progress;
}

// Hands every connection its share of shm.ring_budget_bytes (ShmConn::trim_window).
void ShmTransport::trim_windows() {
  const auto& list = conns_.snapshot();
  const uint64_t window = window_for(list.size());
  for (const auto& c : list) {
    if (c->mapped() && !c->closed_) c->trim_window(window);
  }
}

void ShmTransport::kick() { net::ring_eventfd(awake_fd_.get()); }

// Going to sleep (prepare_sleep): ask every producer to ring our bell, then
// look once more (our flag store and stamp load are seq_cst and the producer
// fences between its stamp store and its flag load, so one of the two sides
// sees the other). Drain the awake fd first, so that a kick() from a poster
// after armed_ is set is not lost.
void ShmTransport::try_arm() {
  if (conns_.changed() || conns_.has_pending()) return;
  drain_fd(awake_fd_.get());
  armed_.store(true, std::memory_order_seq_cst);
  bool work = done_count_.load(std::memory_order_seq_cst) != 0;
  for (auto& sp : conns_.snapshot()) {
    ShmConn* c = sp.get();
    if (c->closed_ || !c->mapped()) continue;
    aref(c->rx_ctrl_->want_data).store(1, std::memory_order_seq_cst);
    if (c->lane_.arm() || c->rx_ready(std::memory_order_seq_cst) || c->hup_) {
      work = true;
    }
    if (c->has_backlog_.load(std::memory_order_seq_cst)) {
      aref(c->tx_ctrl_->want_space).store(1, std::memory_order_seq_cst);
      if (c->flush_from_poller()) work = true;
    }
  }
  if (work) disarm();
}

void ShmTransport::disarm() {
  armed_.store(false, std::memory_order_seq_cst);
  for (auto& sp : conns_.snapshot()) {
    ShmConn* c = sp.get();
    if (c->closed_ || !c->mapped()) continue;
    aref(c->rx_ctrl_->want_data).store(0, std::memory_order_relaxed);
    c->lane_.disarm();
    aref(c->tx_ctrl_->want_space).store(0, std::memory_order_relaxed);
  }
  kick();
}

bool ShmTransport::handle_events(std::span<Completion> out, size_t* n) {
  bool active = false;
  epoll_event evs[64];
  int k = ::epoll_wait(epfd_.get(), evs, 64, 0);
  for (int i = 0; i < k; ++i) {
    const uint64_t tag = evs[i].data.u64;
    if (tag == kListenTag) {
      accept_all();
      active = true;
      continue;
    }
    if (tag == kAwakeTag) continue;
    auto* c = reinterpret_cast<ShmConn*>(static_cast<uintptr_t>(tag & ~kBellBit));
    if (c->closed_) continue;
    if (tag & kBellBit) {
      // The rings say what happened. A bell counts as activity: the side
      // that rang it cleared our wake-up request (want_data/want_space), so
      // we must not sleep again without asking anew (try_arm does, after
      // the spin). Staying armed here lost wake-ups: a bell for a record
      // already taken, or for room that was not yet enough, and the next
      // record or room came without one.
      drain_fd(c->my_bell_.get());
      active = true;
      continue;
    }
    on_socket(c, evs[i].events, out, n);
    active = true;
  }
  return active;
}

size_t ShmTransport::poll(std::span<Completion> out) {
#ifndef NDEBUG
  PollerCheck one_poller(&in_poll_);
#endif
  size_t n = 0;
  bool active = false;
  n = conns_.take_pending(out, n);
  if (done_count_.load(std::memory_order_acquire) != 0) {
    std::lock_guard<SpinLock> g(done_lock_);
    while (!send_done_.empty() && n < out.size()) {
      out[n++] = send_done_.front();
      send_done_.pop_front();
      done_count_.fetch_sub(1, std::memory_order_relaxed);
    }
  }
  if (conns_.changed()) {
    conns_.refresh();
    trim_windows();  // the shares changed
    active = true;
  }
  // The clock (tens of ns on a VM) is read every kClockPolls-th poll: a
  // caller spinning here polls far more often than the event interval
  // needs. A poll after a sleep (woken) reads it and looks at the events:
  // a bell, a socket or the listener ended the sleep.
  uint64_t now = clock_ns_;
  const bool woke = woke_.load(std::memory_order_relaxed);
  if (++polls_ % kClockPolls == 0 || now == 0 || woke) now = clock_ns_ = now_ns();
  if (woke || now >= next_events_ns_) {
    if (woke) woke_.store(false, std::memory_order_relaxed);
    active |= handle_events(out, &n);
    next_events_ns_ = now + kEventCheckNs;
    if (now >= next_sweep_ns_) {
      sweep_unidentified(now);
      trim_windows();
      next_sweep_ns_ = now + kSweepNs;
    }
  }
  const auto& list = conns_.snapshot();
  const size_t k = list.size();
  if (rr_ >= k) rr_ = 0;  // the list shrank
  for (size_t j = 0; j < k && n < out.size(); ++j) {
    size_t at = rr_ + j;  // round robin, without a division on every poll
    ShmConn* c = list[at < k ? at : at - k].get();
    if (c->closed_ || !c->mapped()) continue;
    if (c->has_backlog_.load(std::memory_order_acquire)) active |= c->flush_from_poller();
    active |= read_ring(c, out, &n);
    if (c->hup_ && !c->closed_ && n < out.size() && !c->rx_ready() && !c->lane_.ready()) {
      close_conn(c, out, &n, "closed by peer");
    }
  }
  if (++rr_ >= k) rr_ = 0;
  if (n > 0) active = true;
  if (active && armed_.load(std::memory_order_relaxed)) disarm();
  // A connection that closed without an event for the caller (a redundant
  // one, a stranger's) keeps no ring mapped until some later completion.
  if (n == 0 && lent_.empty() && conns_.has_closed()) conns_.release_closed();
  return n;
}

void ShmTransport::release_rx(std::span<const Completion>) {
  for (ShmConn* c : lent_) {
    c->lent_ = false;
    c->stage_lent_ = false;
    if (!c->closed_) c->publish_tail();
  }
  lent_.clear();
  conns_.release_closed();
}

Result<std::unique_ptr<Transport>> make_shm_transport(const ShmConfig& config) {
  auto t = std::make_unique<ShmTransport>(config);
  LT_RETURN_IF_ERROR(t->init());
  return std::unique_ptr<Transport>(std::move(t));
}

}  // namespace lt::transport::shm

namespace lt::transport {
Result<std::unique_ptr<Transport>> make_shm_transport(const ShmConfig& config) {
  return shm::make_shm_transport(config);
}
}  // namespace lt::transport
