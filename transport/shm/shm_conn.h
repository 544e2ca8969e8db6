// The shm transport's connection: one peer's segment (two rings and their
// control blocks), its bells, and the send and one-sided paths any thread
// takes (shm_conn.cc). Private to transport/shm/: the transport
// (shm_transport.cc) and its connection setup (shm_connect.cc) share it.
#pragma once

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/cpu_hint.h"
#include "common/log.h"
#include "common/net.h"
#include "common/siphash.h"
#include "common/spinlock.h"
#include "common/time.h"
#include "transport/mapped_region.h"
#include "transport/shm/shm_gather.h"
#include "transport/shm/shm_lane.h"
#include "transport/shm/shm_ring.h"
#include "transport/shm/shm_transport.h"

namespace lt::transport::shm {

inline constexpr size_t kMaxPostBatch = 32;
inline constexpr uint64_t kEventCheckNs = 200000;  // socket/accept checks while not armed
inline constexpr uint32_t kClockPolls = 16;        // polls per clock read while spinning
inline constexpr uint64_t kSweepNs = 1000000000ull;
inline constexpr uint64_t kHelloTimeoutNs = 5000000000ull;
inline constexpr size_t kMaxRemoteMaps = 64;  // mapped peer regions cached per connection
// One-sided ops up to this size run under the connection's map lock
// (ShmConn::one_sided); larger ones hold a reference to the region instead.
inline constexpr size_t kAccessUnderLockBytes = 256;
inline constexpr uint64_t kMinFragRecord = 1024;

// epoll tags: connections are 8-byte aligned pointers; a bell sets bit 1.
inline constexpr uint64_t kListenTag = 0;
inline constexpr uint64_t kAwakeTag = 1;
inline constexpr uint64_t kBellBit = 2;

// rkey of an alloc_memory region: low 24 bits the memfd's descriptor number in
// the owner, bits 24..31 its Access, bits 32..63 the low 32 bits of its inode
// (a descriptor number reused for another file fails that check).
inline constexpr uint64_t kRkeyFdMask = (1u << 24) - 1;
inline uint64_t make_rkey(int fd, Access a, uint64_t ino) {
  return (ino & 0xffffffffull) << 32 | uint64_t{static_cast<uint8_t>(a)} << 24 |
         (static_cast<uint64_t>(fd) & kRkeyFdMask);
}
inline int rkey_fd(uint64_t rkey) { return static_cast<int>(rkey & kRkeyFdMask); }
inline Access rkey_access(uint64_t rkey) { return static_cast<Access>((rkey >> 24) & 0xff); }
inline uint32_t rkey_ino(uint64_t rkey) { return static_cast<uint32_t>(rkey >> 32); }
// rkey of register_memory'd ordinary memory (Caps::placement): no inode, every
// descriptor bit set, the Access in bits 24..31; `addr` is then the owner's
// virtual address and the op a cross-memory copy (process_vm_writev/readv).
inline uint64_t make_place_rkey(Access a) {
  return uint64_t{static_cast<uint8_t>(a)} << 24 | kRkeyFdMask;
}
inline bool is_place_rkey(uint64_t rkey) {
  return rkey_ino(rkey) == 0 && static_cast<uint64_t>(rkey_fd(rkey)) == kRkeyFdMask;
}

inline bool is_pow2(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

// A connection's stamp salt: random, bit 63 set (a stamp is never a small
// number that payload bytes or an earlier lap would likely hold).
inline uint64_t new_salt() { return random_u64() | (uint64_t{1} << 63); }

inline void drain_fd(int fd) {
  uint64_t v;
  ssize_t r = ::read(fd, &v, sizeof(v));
  (void)r;
}

// One SEQPACKET packet and the descriptors that came with it (closed when
// `fds` goes away). *trunc: the packet or its descriptors did not fit.
inline ssize_t recv_packet(int fd, void* buf, size_t cap, std::vector<net::Fd>* fds, bool* trunc) {
  iovec iov{buf, cap};
  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * 4)];
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = cbuf;
  m.msg_controllen = sizeof(cbuf);
  ssize_t r = ::recvmsg(fd, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (r < 0) return r;
  for (cmsghdr* h = CMSG_FIRSTHDR(&m); h != nullptr; h = CMSG_NXTHDR(&m, h)) {
    if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS) continue;
    size_t k = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < k; ++i) {
      int f;
      std::memcpy(&f, CMSG_DATA(h) + i * sizeof(int), sizeof(f));
      fds->emplace_back(f);
    }
  }
  *trunc = (m.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0;
  return r;
}

inline bool send_packet(int fd, const void* buf, size_t len, const int* fds, size_t nfds) {
  iovec iov{const_cast<void*>(buf), len};
  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * 4)] = {};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  if (nfds > 0) {
    m.msg_control = cbuf;
    m.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
    cmsghdr* h = CMSG_FIRSTHDR(&m);
    h->cmsg_level = SOL_SOCKET;
    h->cmsg_type = SCM_RIGHTS;
    h->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
    std::memcpy(CMSG_DATA(h), fds, sizeof(int) * nfds);
  }
  for (;;) {
    ssize_t r = ::sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r == static_cast<ssize_t>(len)) return true;
    if (r < 0 && errno == EINTR) continue;
    return false;
  }
}

inline bool peer_cred(int fd, ucred* out) {
  socklen_t l = sizeof(*out);
  return ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, out, &l) == 0 && l == sizeof(*out);
}

inline socklen_t abstract_addr(const std::string& name, sockaddr_un* a) {
  *a = sockaddr_un{};
  a->sun_family = AF_UNIX;
  a->sun_path[0] = '\0';
  std::memcpy(a->sun_path + 1, name.data(), name.size());
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

inline constexpr size_t kMaxNameBytes = sizeof(sockaddr_un::sun_path) - 1;

// "shm:<pid>:<name>" -> name. The pid is informational: the kernel's
// SO_PEERCRED is what the transport trusts.
inline bool parse_address(const std::string& s, std::string* name) {
  if (s.rfind("shm:", 0) != 0) return false;
  size_t colon = s.find(':', 4);
  if (colon == std::string::npos || colon == 4) return false;
  for (size_t i = 4; i < colon; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
  }
  std::string n = s.substr(colon + 1);
  if (n.empty() || n.size() > kMaxNameBytes || n.find('\0') != std::string::npos) return false;
  *name = std::move(n);
  return true;
}

#ifndef NDEBUG
// Asserts the one-poller contract of poll/release_rx in debug builds.
class PollerCheck {
 public:
  explicit PollerCheck(std::atomic<bool>* f) : f_(f) { LT_ASSERT(!f_->exchange(true)); }
  ~PollerCheck() { f_->store(false); }

 private:
  std::atomic<bool>* f_;
};
#endif

// A peer's alloc_memory region, mapped here with its rkey's rights;
// unmapped when the last user (a post, a caller's view) lets go.
struct RemoteMap final : MappedRegion {
  RemoteMap(std::byte* a, size_t l, Access access) : MappedRegion(a, l, access) {}
  ~RemoteMap() override { ::munmap(base(), len()); }
};

// One connection to one peer. The producer side (tx ring, backlog) is used by
// any thread under send_lock_; the consumer side (rx ring, staging) only by the
// poller. The segment is mapped for the life of the object, which endpoints
// and the poller's closed_ list keep alive after the connection is closed.
class ShmConn {
 public:
  ShmConn(ShmTransport* t, net::Fd sock, NodeId peer, bool connector, pid_t pid)
      : t_(t),
        sock_(std::move(sock)),
        peer_(peer),
        peer_pid_(pid),
        connector_(connector),
        max_msg_(t->config_.max_msg_bytes),
        max_single_(t->max_single_),
        memfd_dev_(t->memfd_dev_),
        hello_done_(connector) {}
  ~ShmConn() {
    retire_remote_maps();  // views a caller still holds stop being used
    if (seg_ != nullptr) ::munmap(seg_, seg_len_);
  }
  ShmConn(const ShmConn&) = delete;
  ShmConn& operator=(const ShmConn&) = delete;

  // Points the rings and lanes at a mapped segment: ring 0 and lane 0 carry
  // connector -> acceptor.
  void attach(std::byte* seg, size_t len, uint32_t ring_bytes, uint64_t salt, net::Fd my_bell,
              net::Fd peer_bell) {
    seg_ = seg;
    salt_ = salt;
    seg_len_ = len;
    ring_ = ring_bytes;
    mask_ = ring_bytes - 1;
    max_rec_ = ring_bytes / 4;
    max_frag_ = max_rec_ - kRecHdr;
    min_win_ = std::min<uint64_t>(t_->window_for(t_->conns_.size() + 1), ring_);
    win_ = hot_window();
    auto* ctrl = reinterpret_cast<RingCtrl*>(seg + sizeof(SegHeader));
    std::byte* ring0 = seg + kCtrlBytes;
    std::byte* ring1 = ring0 + ring_bytes;
    tx_ctrl_ = connector_ ? &ctrl[0] : &ctrl[1];
    rx_ctrl_ = connector_ ? &ctrl[1] : &ctrl[0];
    tx_ring_ = connector_ ? ring0 : ring1;
    rx_ring_ = connector_ ? ring1 : ring0;
    std::byte* lane0 = ring1 + ring_bytes;
    std::byte* lane1 = lane0 + kLaneBytes;
    if (connector_) {
      lane_.attach(lane0, &ctrl[2], lane1, &ctrl[3], salt);
    } else {
      lane_.attach(lane1, &ctrl[3], lane0, &ctrl[2], salt);
    }
    my_bell_ = std::move(my_bell);
    peer_bell_ = std::move(peer_bell);
  }
  bool mapped() const { return seg_ != nullptr; }
  bool identified() const { return connector_ || hello_done_; }

  void mark_dead() {
    if (!dead_.exchange(true, std::memory_order_acq_rel)) ::shutdown(sock_.get(), SHUT_RDWR);
    retire_remote_maps();  // a dead peer's memory is not reached through views either
  }

  Result<size_t> post(std::span<const WorkRequest> wrs);
  // Endpoint::post_short: one record, or false with nothing written.
  bool post_short(const void* hdr, size_t hlen, const void* data, size_t dlen);
  // Endpoint::post_express: the lane, else post_short. The lane keeps the
  // calling thread's order: a thread with a message of its own still in
  // this connection's main ring (posted, not yet released by the consumer)
  // posts by the main ring too, after it (lane_keeps_order).
  bool post_express(const void* hdr, size_t hlen, const void* data, size_t dlen);
  // The region `rkey` names, mapped (at first use) for the caller's own
  // loads and stores (Endpoint::view); null while the connection is dead or
  // when the rkey names no region of the peer's. Cold path (shm_access.cc).
  std::shared_ptr<const MappedRegion> view(uint64_t rkey);

  // Unmaps the peer's regions (ops in flight and views keep theirs until
  // they let go; views see them retired).
  void drop_remote_maps() {
    std::vector<std::pair<uint64_t, std::shared_ptr<RemoteMap>>> old;
    {
      std::lock_guard<SpinLock> g(map_lock_);
      old.swap(maps_);
    }
    for (auto& [k, m] : old) m->retire();
  }
  void retire_remote_maps() {
    std::lock_guard<SpinLock> g(map_lock_);
    for (auto& [k, m] : maps_) m->retire();
  }

  void trim_window(uint64_t window);

  // Poller: flushes the backlog if the send lock is free. True when it wrote
  // something or could not look (a poster holds the lock).
  bool flush_from_poller() {
    if (!send_lock_.try_lock()) return true;
    bool wrote = has_backlog_.load(std::memory_order_relaxed) && flush_locked();
    bool bell = publish_locked();
    send_lock_.unlock();
    if (bell) net::ring_eventfd(peer_bell_.get());
    return wrote;
  }

  // The stamp that publishes the record at position `pos`.
  uint64_t stamp_of(uint64_t pos) const { return pos ^ salt_; }
  static std::atomic_ref<uint64_t> stamp_at(std::byte* ring, uint64_t idx) {
    return aref(*reinterpret_cast<uint64_t*>(ring + idx));
  }
  // Poller: true when the next record has been published.
  bool rx_ready(std::memory_order mo = std::memory_order_acquire) const {
    return stamp_at(rx_ring_, rx_pos_ & mask_).load(mo) == stamp_of(rx_pos_);
  }

  // Poller: hands consumed ring and lane bytes back to the producer.
  void publish_tail() {
    lane_.release();
    if (rx_pos_ == rx_released_) return;
    rx_released_ = rx_pos_;
    aref(rx_ctrl_->tail).store(rx_pos_, std::memory_order_seq_cst);
    uint32_t& w = rx_ctrl_->want_space;
    if (aref(w).load(std::memory_order_seq_cst) != 0 &&
        aref(w).exchange(0, std::memory_order_seq_cst) != 0) {
      net::ring_eventfd(peer_bell_.get());
    }
  }

  ShmTransport* t_;
  const uint64_t serial_ = next_serial();  // this connection among all of the process's
  net::Fd sock_;
  std::atomic<NodeId> peer_;
  const pid_t peer_pid_;
  const bool connector_;
  const uint32_t max_msg_;
  const uint64_t max_single_;
  const dev_t memfd_dev_;
  std::atomic<bool> dead_{false};
  std::atomic<bool> has_backlog_{false};
  uint64_t created_ns_ = now_ns();

  // Set before the connection is shared (connect, or the poller's hello).
  std::byte* seg_ = nullptr;
  size_t seg_len_ = 0;
  uint64_t ring_ = 0, mask_ = 0, max_rec_ = 0, max_frag_ = 0, salt_ = 0;
  RingCtrl* tx_ctrl_ = nullptr;
  RingCtrl* rx_ctrl_ = nullptr;
  std::byte* tx_ring_ = nullptr;
  std::byte* rx_ring_ = nullptr;
  net::Fd my_bell_, peer_bell_;
  ShmLane lane_;  // its own lock; its rx side is the poller's

  // Poller-only.
  bool hello_done_;
  bool ack_done_ = false;
  bool closed_ = false;
  bool hup_ = false;
  bool lent_ = false;        // rx pointers into the ring are out until release_rx
  bool stage_lent_ = false;  // the staging buffer is out until release_rx
  bool staging_ = false;     // a fragmented message is being reassembled
  uint64_t rx_pos_ = 0, rx_released_ = 0;
  std::unique_ptr<std::byte[]> stage_;
  size_t stage_cap_ = 0, stage_len_ = 0, stage_total_ = 0;
  uint32_t stage_imm_ = 0;

  // Producer side, under send_lock_.
  uint64_t tx_head_ = 0, tx_tail_ = 0, tx_published_ = 0;
  uint64_t last_idx_ = 0;  // ring offset of the last record stamped
  // The window: records go below ring offset win_ (a pad skips the rest of
  // the ring), so a connection that carries small messages touches win_
  // bytes of its ring, not all of it. min_win_ is the connection's share of
  // shm.ring_budget_bytes. The window starts at the hot window (kHotWindow,
  // at most the share) and doubles, up to the share, when a record would
  // wrap to the start before the consumer released it (widen_locked) or
  // when a record wants more (fit_window_locked); a record larger than a
  // quarter of the share widens it beyond. trim_window() narrows a window
  // beyond the share to the share and frees the pages beyond, and one within
  // the share back to the hot window after a sweep without widening.
  uint64_t win_ = 0, min_win_ = 0;
  uint64_t wide_records_ = 0;  // records that wanted more than min_win_, so far
  uint64_t trim_seen_ = 0;     // wide_records_ at the last trim_window()
  uint64_t widened_ = 0;       // widenings within the share, so far
  uint64_t widen_seen_ = 0;    // widened_ at the last trim_window()
  uint64_t punch_at_ = 0;      // punch_: free the pages beyond the window once the tail is here
  bool punch_ = false;

 private:
  struct Pending {  // a message or its unsent rest: bytes [base, total) in buf
    std::unique_ptr<std::byte[]> buf;
    size_t base = 0, total = 0, off = 0;
    uint32_t imm = 0;
  };

  static uint64_t next_serial();
  bool lane_keeps_order();
  void note_main_post_locked();
  Status check(const WorkRequest& wr, size_t* len) const;
  Status one_sided(const WorkRequest& wr, size_t len, bool* refused, bool* bell);
  bool post_small_accesses(std::span<const WorkRequest> wrs, Result<size_t>* out);
  Status place(const WorkRequest& wr, size_t len) const;
  Result<std::shared_ptr<RemoteMap>> remote_map(uint64_t rkey);

  void lock_tx() {
    send_lock_.lock();
    if (has_backlog_.load(std::memory_order_relaxed)) flush_locked();
  }
  bool unlock_tx() {  // true: ring the peer's bell (after the unlock)
    bool bell = publish_locked();
    send_lock_.unlock();
    return bell;
  }
  // The records are out (each by its stamp); true when the consumer asked
  // for a bell (try_arm; stamp_barrier says how the two sides pair).
  bool publish_locked() {
    if (tx_head_ == tx_published_) return false;
    tx_published_ = tx_head_;
    stamp_barrier(*reinterpret_cast<uint64_t*>(tx_ring_ + last_idx_));
    return take_bell_request(tx_ctrl_);
  }
  uint64_t hot_window() const { return std::min(kHotWindow, min_win_); }
  // Widens the window for a record of `rec` bytes so that four of them fit,
  // as in a whole ring (max_rec_ is a quarter of it).
  void fit_window_locked(uint64_t rec) {
    if (rec * 4 > min_win_) {
      ++wide_records_;
      punch_ = false;
    } else if (rec * 4 <= win_) {
      return;
    } else {
      ++widened_;
    }
    while (win_ < rec * 4 && win_ < ring_) win_ <<= 1;
  }
  // The consumer has not released the window's start, where the next record
  // would wrap to: rather than wait for it, the window doubles, up to the
  // share, so that a stream gets the whole share. False at the share.
  bool widen_locked() {
    if (win_ >= min_win_) return false;
    win_ <<= 1;
    ++widened_;
    return true;
  }
  // Bytes a record may take from ring offset idx on. A narrowed window ends a
  // record alignment early, so the pad that follows is inside it too and the
  // pages beyond stay untouched.
  uint64_t contig_locked(uint64_t idx) const {
    const uint64_t end = win_ < ring_ ? win_ - kRecAlign : ring_;
    return end > idx ? end - idx : 0;
  }
  bool room_locked(uint64_t need) {
    if (tx_head_ + need - tx_tail_ <= ring_) return true;
    uint64_t t = aref(tx_ctrl_->tail).load(std::memory_order_seq_cst);
    // A tail outside [head - R, head] is the peer's bug; treat it as "no room".
    if (t > tx_head_ || tx_head_ - t > ring_) return false;
    tx_tail_ = t & ~uint64_t{kRecAlign - 1};
    return tx_head_ + need - tx_tail_ <= ring_;
  }
  // Writes a record's header but its stamp; the payload goes in next, then
  // publish_record() stamps it.
  void write_header(uint64_t idx, RecKind k, uint64_t len, uint32_t imm, uint64_t total) {
    write_record_header(tx_ring_ + idx, k, len, imm, total);
  }
  // The record at tx_head_ (ring offset idx), `bytes` long, is complete.
  // tx_head_ moves first: the consumer may take the record and publish a
  // tail past it at once, and room_locked() reads a tail beyond tx_head_ as
  // the peer's bug (no room).
  void publish_record(uint64_t idx, uint64_t bytes) {
    const uint64_t pos = tx_head_;
    tx_head_ += bytes;
    last_idx_ = idx;
    stamp_at(tx_ring_, idx).store(stamp_of(pos), std::memory_order_release);
  }
  void write_pad_locked(uint64_t idx, uint64_t bytes) {
    write_header(idx, RecKind::kPad, bytes - kRecHdr, 0, 0);
    publish_record(idx, bytes);
  }
  bool single_fits_locked(size_t len);
  bool reserve_single_locked(size_t len, uint32_t imm, uint64_t* idx);
  bool write_single_locked(const Gather& g, size_t len, uint32_t imm);
  size_t write_frags_locked(const Gather& g, size_t total, uint32_t imm, size_t off);
  bool enqueue_locked(const Gather& g, size_t len, uint32_t imm, bool must_queue);
  bool to_backlog_locked(const Gather& g, size_t len, uint32_t imm, size_t off);
  bool flush_locked();

  SpinLock send_lock_;
  std::deque<Pending> backlog_;

  SpinLock map_lock_;
  std::vector<std::pair<uint64_t, std::shared_ptr<RemoteMap>>> maps_;
};

using ShmEndpoint = ConnEndpoint<ShmConn>;

}  // namespace lt::transport::shm
