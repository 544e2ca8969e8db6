#include "transport/shm/shm_transport.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <random>

#include "common/log.h"
#include "common/time.h"
#include "transport/factory.h"
#include "transport/shm/shm_ring.h"

namespace lt::transport::shm {

namespace {
constexpr size_t kMaxPostBatch = 32;
constexpr uint64_t kEventCheckNs = 200000;  // socket/accept checks while not armed
constexpr uint32_t kClockPolls = 16;        // polls per clock read while spinning
constexpr uint64_t kSweepNs = 1000000000ull;
constexpr uint64_t kHelloTimeoutNs = 5000000000ull;
constexpr size_t kMaxRemoteMaps = 64;  // mapped peer regions cached per connection
constexpr uint64_t kMinFragRecord = 1024;

// epoll tags: connections are 8-byte aligned pointers; a bell sets bit 1.
constexpr uint64_t kListenTag = 0;
constexpr uint64_t kAwakeTag = 1;
constexpr uint64_t kBellBit = 2;

// rkey of an alloc_memory region: low 24 bits the memfd's descriptor number in
// the owner, bits 24..31 its Access, bits 32..63 the low 32 bits of its inode
// (a descriptor number reused for another file fails that check).
constexpr uint64_t kRkeyFdMask = (1u << 24) - 1;
uint64_t make_rkey(int fd, Access a, uint64_t ino) {
  return (ino & 0xffffffffull) << 32 | uint64_t{static_cast<uint8_t>(a)} << 24 |
         (static_cast<uint64_t>(fd) & kRkeyFdMask);
}
int rkey_fd(uint64_t rkey) { return static_cast<int>(rkey & kRkeyFdMask); }
Access rkey_access(uint64_t rkey) { return static_cast<Access>((rkey >> 24) & 0xff); }
uint32_t rkey_ino(uint64_t rkey) { return static_cast<uint32_t>(rkey >> 32); }
// rkey of register_memory'd ordinary memory (Caps::placement): no inode, every
// descriptor bit set, the Access in bits 24..31; `addr` is then the owner's
// virtual address and the op a cross-memory copy (process_vm_writev/readv).
uint64_t make_place_rkey(Access a) { return uint64_t{static_cast<uint8_t>(a)} << 24 | kRkeyFdMask; }
bool is_place_rkey(uint64_t rkey) {
  return rkey_ino(rkey) == 0 && static_cast<uint64_t>(rkey_fd(rkey)) == kRkeyFdMask;
}

bool is_pow2(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

void ring_bell(int fd) {
  uint64_t one = 1;
  ssize_t r = ::write(fd, &one, sizeof(one));
  (void)r;  // EAGAIN only when the counter is near overflow: it is readable anyway
}

// A connection's stamp salt: random, bit 63 set (a stamp is never a small
// number that payload bytes or an earlier lap would likely hold).
uint64_t new_salt() {
  std::random_device rd;
  uint64_t v = (uint64_t{rd()} << 32) ^ rd() ^ now_ns();
  return v | (uint64_t{1} << 63);
}

void drain_fd(int fd) {
  uint64_t v;
  ssize_t r = ::read(fd, &v, sizeof(v));
  (void)r;
}

// One SEQPACKET packet and the descriptors that came with it (closed when
// `fds` goes away). *trunc: the packet or its descriptors did not fit.
ssize_t recv_packet(int fd, void* buf, size_t cap, std::vector<net::Fd>* fds, bool* trunc) {
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

bool send_packet(int fd, const void* buf, size_t len, const int* fds, size_t nfds) {
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

bool peer_cred(int fd, ucred* out) {
  socklen_t l = sizeof(*out);
  return ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, out, &l) == 0 && l == sizeof(*out);
}

socklen_t abstract_addr(const std::string& name, sockaddr_un* a) {
  *a = sockaddr_un{};
  a->sun_family = AF_UNIX;
  a->sun_path[0] = '\0';
  std::memcpy(a->sun_path + 1, name.data(), name.size());
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

constexpr size_t kMaxNameBytes = sizeof(sockaddr_un::sun_path) - 1;

// "shm:<pid>:<name>" -> name. The pid is informational: the kernel's
// SO_PEERCRED is what the transport trusts.
bool parse_address(const std::string& s, std::string* name) {
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

// Part of a message: sges (or a backlog copy) seen as one byte string whose
// first byte is message offset `base`.
struct Gather {
  const std::byte* p[kMaxSge] = {};
  size_t n[kMaxSge] = {};
  int k = 0;
  size_t base = 0;

  void copy(std::byte* dst, size_t off, size_t len) const {
    off -= base;
    for (int i = 0; i < k && len > 0; ++i) {
      if (off >= n[i]) {
        off -= n[i];
        continue;
      }
      size_t m = std::min(len, n[i] - off);
      std::memcpy(dst, p[i] + off, m);
      dst += m;
      len -= m;
      off = 0;
    }
  }
};

Gather gather_of(const WorkRequest& wr) {
  Gather g;
  for (int i = 0; i < wr.num_sge; ++i) {
    if (wr.sge[i].len == 0) continue;
    g.p[g.k] = wr.sge[i].addr;
    g.n[g.k] = wr.sge[i].len;
    ++g.k;
  }
  return g;
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

}  // namespace

// A peer's alloc_memory region, mapped here; unmapped when the last user lets go.
struct RemoteMap {
  std::byte* addr = nullptr;
  size_t len = 0;
  RemoteMap(std::byte* a, size_t l) : addr(a), len(l) {}
  RemoteMap(const RemoteMap&) = delete;
  RemoteMap& operator=(const RemoteMap&) = delete;
  ~RemoteMap() { ::munmap(addr, len); }
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
    if (seg_ != nullptr) ::munmap(seg_, seg_len_);
  }
  ShmConn(const ShmConn&) = delete;
  ShmConn& operator=(const ShmConn&) = delete;

  // Points the rings at a mapped segment: ring 0 carries connector -> acceptor.
  void attach(std::byte* seg, size_t len, uint32_t ring_bytes, uint64_t salt, net::Fd my_bell,
              net::Fd peer_bell) {
    seg_ = seg;
    salt_ = salt;
    seg_len_ = len;
    ring_ = ring_bytes;
    mask_ = ring_bytes - 1;
    max_rec_ = ring_bytes / 4;
    max_frag_ = max_rec_ - kRecHdr;
    auto* ctrl = reinterpret_cast<RingCtrl*>(seg + sizeof(SegHeader));
    std::byte* ring0 = seg + kCtrlBytes;
    std::byte* ring1 = ring0 + ring_bytes;
    tx_ctrl_ = connector_ ? &ctrl[0] : &ctrl[1];
    rx_ctrl_ = connector_ ? &ctrl[1] : &ctrl[0];
    tx_ring_ = connector_ ? ring0 : ring1;
    rx_ring_ = connector_ ? ring1 : ring0;
    my_bell_ = std::move(my_bell);
    peer_bell_ = std::move(peer_bell);
  }
  bool mapped() const { return seg_ != nullptr; }
  bool identified() const { return connector_ || hello_done_; }

  void mark_dead() {
    if (!dead_.exchange(true, std::memory_order_acq_rel)) ::shutdown(sock_.get(), SHUT_RDWR);
  }

  Result<size_t> post(std::span<const WorkRequest> wrs);

  // Unmaps the peer's regions (ops in flight keep theirs until they finish).
  void drop_remote_maps() {
    std::vector<std::pair<uint64_t, std::shared_ptr<RemoteMap>>> old;
    {
      std::lock_guard<SpinLock> g(map_lock_);
      old.swap(maps_);
    }
  }

  // Poller: flushes the backlog if the send lock is free. True when it wrote
  // something or could not look (a poster holds the lock).
  bool flush_from_poller() {
    if (!send_lock_.try_lock()) return true;
    bool wrote = has_backlog_.load(std::memory_order_relaxed) && flush_locked();
    bool bell = publish_locked();
    send_lock_.unlock();
    if (bell) ring_bell(peer_bell_.get());
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

  // Poller: hands consumed ring bytes back to the producer.
  void publish_tail() {
    if (rx_pos_ == rx_released_) return;
    rx_released_ = rx_pos_;
    aref(rx_ctrl_->tail).store(rx_pos_, std::memory_order_seq_cst);
    uint32_t& w = rx_ctrl_->want_space;
    if (aref(w).load(std::memory_order_seq_cst) != 0 &&
        aref(w).exchange(0, std::memory_order_seq_cst) != 0) {
      ring_bell(peer_bell_.get());
    }
  }

  ShmTransport* t_;
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

 private:
  struct Pending {  // a message or its unsent rest: bytes [base, total) in buf
    std::unique_ptr<std::byte[]> buf;
    size_t base = 0, total = 0, off = 0;
    uint32_t imm = 0;
  };

  Status check(const WorkRequest& wr, size_t* len) const;
  Status one_sided(const WorkRequest& wr, size_t len, bool* refused, bool* bell);
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
  // for a bell. A seq_cst read-modify-write of the last stamp (its value
  // unchanged), then a seq_cst load of want_data, pair with the consumer's
  // seq_cst store of want_data and load of the next stamp (try_arm): one
  // side sees the other. (Not a fence: gcc refuses those under TSan, and a
  // locked instruction costs less than mfence here.)
  bool publish_locked() {
    if (tx_head_ == tx_published_) return false;
    tx_published_ = tx_head_;
    stamp_at(tx_ring_, last_idx_).fetch_or(0, std::memory_order_seq_cst);
    uint32_t& w = tx_ctrl_->want_data;
    return aref(w).load(std::memory_order_seq_cst) != 0 &&
           aref(w).exchange(0, std::memory_order_seq_cst) != 0;
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
    RecHeader h{
        0, static_cast<uint32_t>(len), imm, static_cast<uint32_t>(total), static_cast<uint8_t>(k),
        {}};
    std::memcpy(tx_ring_ + idx + sizeof(h.stamp),
                reinterpret_cast<const std::byte*>(&h) + sizeof(h.stamp),
                sizeof(h) - sizeof(h.stamp));
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

bool ShmConn::single_fits_locked(size_t len) {
  uint64_t rec = record_bytes(len);
  uint64_t contig = ring_ - (tx_head_ & mask_);
  return room_locked(rec <= contig ? rec : contig + rec);
}

bool ShmConn::write_single_locked(const Gather& g, size_t len, uint32_t imm) {
  uint64_t rec = record_bytes(len);
  uint64_t idx = tx_head_ & mask_, contig = ring_ - idx;
  if (!room_locked(rec <= contig ? rec : contig + rec)) return false;
  if (rec > contig) {
    write_pad_locked(idx, contig);
    idx = 0;
  }
  write_header(idx, RecKind::kMsg, len, imm, 0);
  g.copy(tx_ring_ + idx + kRecHdr, g.base, len);
  publish_record(idx, rec);
  return true;
}

// Writes the fragments of message bytes [off, total) that fit now; returns the
// new offset. Fragments shrink to the room there is rather than wait for a
// whole one, but never below kMinFragRecord (or a quarter ring).
size_t ShmConn::write_frags_locked(const Gather& g, size_t total, uint32_t imm, size_t off) {
  const uint64_t min_rec = std::min<uint64_t>(kMinFragRecord, max_rec_);
  while (off < total) {
    uint64_t p = std::min<uint64_t>(total - off, max_frag_);
    uint64_t rec = record_bytes(p);
    uint64_t idx = tx_head_ & mask_, contig = ring_ - idx;
    if (contig < rec && contig < min_rec) {  // too little before the end: pad
      if (!room_locked(contig)) break;
      write_pad_locked(idx, contig);
      continue;
    }
    uint64_t room = std::min(rec, contig);
    if (!room_locked(room)) {
      uint64_t free = ring_ - (tx_head_ - tx_tail_);
      if (free < min_rec) break;
      room = free;
    }
    if (room < rec) {
      p = room - kRecHdr;
      rec = room;
    }
    write_header(idx, off == 0 ? RecKind::kFragFirst : RecKind::kFrag, p, off == 0 ? imm : 0,
                 off == 0 ? total : 0);
    g.copy(tx_ring_ + idx + kRecHdr, off, p);
    publish_record(idx, rec);
    off += p;
  }
  return off;
}

// Backlog policy: a message that fits in one record goes into the ring or is
// refused (back-pressure), unless kWrMustQueue. A larger message is accepted
// whenever the backlog is empty: what the ring cannot take now waits there.
// So the backlog holds at most one message plus kWrMustQueue ones, and while
// it is not empty everything else is refused, which keeps the order.
bool ShmConn::enqueue_locked(const Gather& g, size_t len, uint32_t imm, bool must_queue) {
  if (!backlog_.empty()) return must_queue && to_backlog_locked(g, len, imm, 0);
  if (len <= max_single_) {
    if (write_single_locked(g, len, imm)) return true;
    return must_queue && to_backlog_locked(g, len, imm, 0);
  }
  size_t off = write_frags_locked(g, len, imm, 0);
  return off == len || to_backlog_locked(g, len, imm, off);
}

bool ShmConn::to_backlog_locked(const Gather& g, size_t len, uint32_t imm, size_t off) {
  Pending p;
  p.buf.reset(new (std::nothrow) std::byte[std::max<size_t>(len - off, 1)]);
  if (p.buf == nullptr) return false;  // refused: back-pressure
  g.copy(p.buf.get(), off, len - off);
  p.base = off;
  p.off = off;
  p.total = len;
  p.imm = imm;
  backlog_.push_back(std::move(p));
  has_backlog_.store(true, std::memory_order_seq_cst);
  return true;
}

bool ShmConn::flush_locked() {
  bool wrote = false;
  while (!backlog_.empty()) {
    Pending& p = backlog_.front();
    Gather g;
    g.k = 1;
    g.p[0] = p.buf.get();
    g.n[0] = p.total - p.base;
    g.base = p.base;
    if (p.off == 0 && p.total <= max_single_) {
      if (!write_single_locked(g, p.total, p.imm)) break;
    } else {
      size_t o = write_frags_locked(g, p.total, p.imm, p.off);
      wrote |= o != p.off;
      p.off = o;
      if (o < p.total) break;
    }
    wrote = true;
    backlog_.pop_front();
  }
  if (backlog_.empty()) has_backlog_.store(false, std::memory_order_release);
  return wrote;
}

Status ShmConn::check(const WorkRequest& wr, size_t* len) const {
  if (wr.num_sge > kMaxSge) return Code::kInvalidArg;
  size_t l = 0;
  for (int i = 0; i < wr.num_sge; ++i) l += wr.sge[i].len;
  switch (wr.op) {
    case Op::kSend:
      if (l > max_msg_) return Code::kInvalidArg;
      break;
    case Op::kWrite:
    case Op::kWriteImm:
    case Op::kRead:
      break;
    case Op::kFetchAdd:
    case Op::kCmpSwap:
      if (wr.num_sge < 1 || wr.sge[0].len < 8 || wr.sge[0].addr == nullptr) {
        return Code::kInvalidArg;
      }
      l = 8;
      break;
    default:
      return Code::kInvalidArg;
  }
  *len = l;
  return Status::ok();
}

Result<std::shared_ptr<RemoteMap>> ShmConn::remote_map(uint64_t rkey) {
  {
    std::lock_guard<SpinLock> g(map_lock_);
    for (auto& [k, m] : maps_) {
      if (k == rkey) return m;
    }
  }
  // First use of this region: open the owner's memfd through /proc (same uid)
  // and check that it is the file the rkey names.
  if (rkey_ino(rkey) == 0) return Code::kBadHandle;
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/fd/%d", static_cast<int>(peer_pid_), rkey_fd(rkey));
  net::Fd f(::open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY));
  if (!f.valid() && errno == ELOOP) f.reset(::open(path, O_RDWR | O_CLOEXEC | O_NOCTTY));
  if (!f.valid()) {
    LT_DEBUG("shm: rkey %#" PRIx64 " of node %u: cannot open %s: %s", rkey, peer_.load(), path,
             strerror(errno));
    return Code::kBadHandle;
  }
  struct stat st;
  int seals = ::fcntl(f.get(), F_GET_SEALS);
  if (::fstat(f.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_dev != memfd_dev_ ||
      static_cast<uint32_t>(st.st_ino) != rkey_ino(rkey) || st.st_uid != ::geteuid() ||
      st.st_size <= 0 || seals < 0 || !(seals & F_SEAL_SHRINK)) {
    LT_DEBUG("shm: rkey %#" PRIx64 " of node %u names no alloc_memory region", rkey, peer_.load());
    return Code::kBadHandle;
  }
  size_t len = static_cast<size_t>(st.st_size);
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, f.get(), 0);
  if (p == MAP_FAILED) {
    LT_WARN("shm: mapping a region of node %u (%zu bytes): %s", peer_.load(), len, strerror(errno));
    return Code::kNoMemory;
  }
  auto m = std::make_shared<RemoteMap>(static_cast<std::byte*>(p), len);
  std::shared_ptr<RemoteMap> evicted;  // unmapped after the lock is dropped
  std::lock_guard<SpinLock> g(map_lock_);
  for (auto& [k, old] : maps_) {
    if (k == rkey) return old;  // another thread mapped it meanwhile; ours goes
  }
  if (maps_.size() >= kMaxRemoteMaps) {
    evicted = std::move(maps_.front().second);
    maps_.erase(maps_.begin());
  }
  maps_.emplace_back(rkey, m);
  return m;
}

// Native one-sided op, done here and now. Checks come first so a refused op
// touches nothing. kWriteImm also queues a zero-length record with the imm;
// the written bytes are in place before that record is published.
// kWrite (or kRead) of ordinary peer memory named by a placement rkey: one
// copy by the kernel between the two address spaces. The peer registered the
// range; the kernel refuses what is not mapped there (kOutOfBounds).
Status ShmConn::place(const WorkRequest& wr, size_t len) const {
  if (!t_->caps_.placement) return Code::kBadHandle;
  if (wr.op != Op::kWrite && wr.op != Op::kRead) return Code::kUnsupported;
  Access need = wr.op == Op::kWrite ? Access::kRemoteWrite : Access::kRemoteRead;
  if (!has_access(rkey_access(wr.remote.rkey), need)) return Code::kPerm;
  if (len == 0) return Status::ok();
  if (wr.remote.addr > UINTPTR_MAX - len) return Code::kOutOfBounds;
  iovec local[kMaxSge];
  int n = 0;
  for (int i = 0; i < wr.num_sge; ++i) {
    if (wr.sge[i].len == 0) continue;
    local[n++] = {const_cast<std::byte*>(wr.sge[i].addr), wr.sge[i].len};
  }
  size_t done = 0;
  while (done < len) {
    // Resume after a partial copy: skip what went already.
    iovec l[kMaxSge];
    int ln = 0;
    size_t skip = done;
    for (int i = 0; i < n; ++i) {
      if (skip >= local[i].iov_len) {
        skip -= local[i].iov_len;
        continue;
      }
      l[ln++] = {static_cast<std::byte*>(local[i].iov_base) + skip, local[i].iov_len - skip};
      skip = 0;
    }
    iovec r{reinterpret_cast<void*>(static_cast<uintptr_t>(wr.remote.addr) + done), len - done};
    ssize_t k = wr.op == Op::kWrite
                    ? ::process_vm_writev(peer_pid_, l, static_cast<unsigned long>(ln), &r, 1, 0)
                    : ::process_vm_readv(peer_pid_, l, static_cast<unsigned long>(ln), &r, 1, 0);
    if (k > 0) {
      done += static_cast<size_t>(k);
      continue;
    }
    int e = k == 0 ? EFAULT : errno;
    if (e == EINTR) continue;
    LT_DEBUG("shm: cross-memory %s of %zu bytes at node %u: %s",
             wr.op == Op::kWrite ? "write" : "read", len, peer_.load(), strerror(e));
    switch (e) {
      case EFAULT:
        return Code::kOutOfBounds;
      case ESRCH:
        return Code::kPeerDown;
      case EPERM:
        return Code::kPerm;
      case ENOMEM:
        return Code::kNoMemory;
      default:
        return Code::kSys;
    }
  }
  return Status::ok();
}

Status ShmConn::one_sided(const WorkRequest& wr, size_t len, bool* refused, bool* bell) {
  if (is_place_rkey(wr.remote.rkey)) return place(wr, len);
  std::shared_ptr<RemoteMap> m;
  std::byte* target = nullptr;
  if (len > 0) {
    auto r = remote_map(wr.remote.rkey);
    if (!r.is_ok()) return r.status();
    m = std::move(r.value());
    Access need = wr.op == Op::kRead       ? Access::kRemoteRead
                  : wr.op == Op::kWrite    ? Access::kRemoteWrite
                  : wr.op == Op::kWriteImm ? Access::kRemoteWrite
                                           : Access::kRemoteAtomic;
    if (!has_access(rkey_access(wr.remote.rkey), need)) return Code::kPerm;
    if (wr.remote.addr > m->len || len > m->len - wr.remote.addr) return Code::kOutOfBounds;
    target = m->addr + wr.remote.addr;
  }
  switch (wr.op) {
    case Op::kWrite:
      if (len > 0) gather_of(wr).copy(target, 0, len);
      return Status::ok();
    case Op::kRead:
      for (int i = 0; i < wr.num_sge; ++i) {
        if (wr.sge[i].len == 0) continue;
        std::memcpy(const_cast<std::byte*>(wr.sge[i].addr), target, wr.sge[i].len);
        target += wr.sge[i].len;
      }
      return Status::ok();
    case Op::kFetchAdd:
    case Op::kCmpSwap: {
      if (wr.remote.addr % 8 != 0) return Code::kAlign;
      std::atomic_ref<uint64_t> word(*reinterpret_cast<uint64_t*>(target));
      uint64_t old;
      if (wr.op == Op::kFetchAdd) {
        old = word.fetch_add(wr.operand, std::memory_order_seq_cst);
      } else {
        old = wr.compare;
        word.compare_exchange_strong(old, wr.operand, std::memory_order_seq_cst);
      }
      std::memcpy(const_cast<std::byte*>(wr.sge[0].addr), &old, sizeof(old));
      return Status::ok();
    }
    case Op::kWriteImm: {
      lock_tx();
      // Room first, so that a refusal writes nothing; then the bytes, then
      // the record that announces them (its stamp publishes it at once).
      const bool must_queue = (wr.flags & kWrMustQueue) != 0;
      if (!must_queue && !(backlog_.empty() && single_fits_locked(0))) {
        *bell |= unlock_tx();
        *refused = true;
        return Status::ok();
      }
      if (len > 0) gather_of(wr).copy(target, 0, len);
      if (!enqueue_locked(Gather{}, 0, wr.imm, must_queue)) *refused = true;  // no memory
      *bell |= unlock_tx();
      return Status::ok();
    }
    default:
      return Code::kInvalidArg;
  }
}

Result<size_t> ShmConn::post(std::span<const WorkRequest> wrs) {
  if (dead_.load(std::memory_order_acquire)) return Code::kPeerDown;
  const size_t limit = std::min(wrs.size(), kMaxPostBatch);
  size_t count = 0;
  Status err;
  bool locked = false, bell = false;
  for (; count < limit; ++count) {
    const WorkRequest& wr = wrs[count];
    size_t len = 0;
    err = check(wr, &len);
    if (!err.is_ok()) break;
    bool must_queue = (wr.flags & kWrMustQueue) != 0;
    if (wr.op == Op::kSend) {
      if (!locked) lock_tx();
      locked = true;
      if (!enqueue_locked(gather_of(wr), len, 0, must_queue)) break;  // back-pressure
      continue;
    }
    if (locked) bell |= unlock_tx();  // one-sided ops may open files: no lock held
    locked = false;
    bool refused = false;
    err = one_sided(wr, len, &refused, &bell);
    if (!err.is_ok() || refused) break;
  }
  if (locked) bell |= unlock_tx();
  if (bell) ring_bell(peer_bell_.get());
  if (count == 0 && !err.is_ok()) return err;
  bool kick = false;
  for (size_t i = 0; i < count; ++i) {
    if (!(wrs[i].flags & kWrSignaled)) continue;
    // Done at post: the bytes are in the ring or the backlog, or the remote
    // memory has been written. Reported through the next poll().
    Completion c;
    c.kind = CqKind::kSendDone;
    c.wr_id = wrs[i].wr_id;
    c.peer = peer_.load(std::memory_order_relaxed);
    std::lock_guard<SpinLock> g(t_->done_lock_);
    t_->send_done_.push_back(c);
    t_->done_count_.fetch_add(1, std::memory_order_seq_cst);
    kick = true;
  }
  // Work for a poller that may be asleep: a completion, or a backlog only its
  // poll() flushes.
  if (kick || has_backlog_.load(std::memory_order_seq_cst)) {
    if (t_->armed_.load(std::memory_order_seq_cst)) t_->kick();
  }
  return count;
}

namespace {
class ShmEndpoint final : public Endpoint {
 public:
  explicit ShmEndpoint(std::shared_ptr<ShmConn> c) : c_(std::move(c)) {}
  Result<size_t> post(std::span<const WorkRequest> wrs) override { return c_->post(wrs); }
  NodeId peer() const override { return c_->peer_.load(std::memory_order_relaxed); }
  bool alive() const override { return !c_->dead_.load(std::memory_order_acquire); }

 private:
  std::shared_ptr<ShmConn> c_;
};
}  // namespace

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
  caps_.write_imm = true;
  caps_.atomics64 = true;
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

void ShmTransport::set_identity(NodeId self, uint64_t cluster_token) {
  token_.store(cluster_token, std::memory_order_release);
  self_.store(self, std::memory_order_release);
}

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
  // serves, and this one is dropped.
  auto served = conns_.add_dialed(peer.node, conn, [&]() -> Status {
    uint64_t tag = reinterpret_cast<uintptr_t>(conn.get());
    LT_RETURN_IF_ERROR(add_to_epoll(conn->my_bell_.get(), tag | kBellBit));
    if (!add_to_epoll(conn->sock_.get(), tag).is_ok()) {
      ::epoll_ctl(epfd_.get(), EPOLL_CTL_DEL, conn->my_bell_.get(), nullptr);
      return Code::kSys;
    }
    return Status::ok();
  });
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

// A connection segment for `peer`: two rings of shm.ring_bytes after the
// header and their control blocks, sealed, so the peer can never shrink it
// under us, and mapped here.
Result<ShmTransport::NewSegment> ShmTransport::new_segment(NodeId peer) {
  const uint32_t r = config_.ring_bytes;
  NewSegment out;
  out.len = kCtrlBytes + 2 * size_t{r};
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
  const size_t seg_len = kCtrlBytes + 2 * size_t{r};
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

// Delivers what the ring holds. True when it consumed anything.
bool ShmTransport::read_ring(ShmConn* c, std::span<Completion> out, size_t* n) {
  bool progress = false;
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
          Completion& cq = out[(*n)++];
          cq = Completion{};
          cq.kind = CqKind::kRecv;
          cq.peer = c->peer_.load(std::memory_order_relaxed);
          cq.len = h.len;
          cq.imm = h.imm;
          cq.rx = at + kRecHdr;
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
            Completion& cq = out[(*n)++];
            cq = Completion{};
            cq.kind = CqKind::kRecv;
            cq.peer = c->peer_.load(std::memory_order_relaxed);
            cq.len = static_cast<uint32_t>(c->stage_total_);
            cq.imm = c->stage_imm_;
            cq.rx = c->stage_.get();
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

void ShmTransport::kick() { ring_bell(awake_fd_.get()); }

// Going to sleep: ask every producer to ring our bell, then look once more
// (our flag store and stamp load are seq_cst and the producer fences between
// its stamp store and its flag load, so one of the two sides sees the other). Drain the awake fd
// first, so that a kick() from a poster after armed_ is set is not lost.
void ShmTransport::try_arm() {
  if (conns_.changed() || conns_.has_pending()) return;
  drain_fd(awake_fd_.get());
  armed_.store(true, std::memory_order_seq_cst);
  bool work = done_count_.load(std::memory_order_seq_cst) != 0;
  for (auto& sp : conns_.snapshot()) {
    ShmConn* c = sp.get();
    if (c->closed_ || !c->mapped()) continue;
    aref(c->rx_ctrl_->want_data).store(1, std::memory_order_seq_cst);
    if (c->rx_ready(std::memory_order_seq_cst) || c->hup_) {
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

void ShmTransport::sweep_unidentified(uint64_t now) {
  // A connection that has not said hello within the deadline is dropped, so
  // idle strangers cannot hold sockets forever.
  auto identified = [](const ShmConn& c) { return c.identified(); };
  for (ShmConn* c : conns_.stale(now, kHelloTimeoutNs, identified)) {
    size_t none = 0;
    close_conn(c, {}, &none, "no hello in time");
  }
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
    active = true;
  }
  // The clock (tens of ns on a VM) is read every kClockPolls-th poll: a
  // caller spinning here polls far more often than the spin and event
  // intervals need. While armed the poller sleeps between polls: read it.
  uint64_t now = clock_ns_;
  if (++polls_ % kClockPolls == 0 || now == 0 || armed_.load(std::memory_order_relaxed)) {
    now = clock_ns_ = now_ns();
  }
  if (armed_.load(std::memory_order_relaxed) || now >= next_events_ns_) {
    active |= handle_events(out, &n);
    next_events_ns_ = now + kEventCheckNs;
    if (now >= next_sweep_ns_) {
      sweep_unidentified(now);
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
    if (c->hup_ && !c->closed_ && n < out.size() && !c->rx_ready()) {
      close_conn(c, out, &n, "closed by peer");
    }
  }
  if (++rr_ >= k) rr_ = 0;
  if (n > 0) active = true;
  if (active) {
    idle_since_ns_ = now;
    if (armed_.load(std::memory_order_relaxed)) disarm();
  } else if (!armed_.load(std::memory_order_relaxed) &&
             now - idle_since_ns_ >= uint64_t{config_.spin_us} * 1000) {
    try_arm();
  }
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
