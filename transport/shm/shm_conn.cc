// ShmConn: the producer side (ring writes, fragmentation, the backlog) and
// post(); one-sided operations are in shm_access.cc.
#include "transport/shm/shm_conn.h"

#include <cinttypes>
#include <cstring>

#include "common/small_copy.h"
#include "common/tls.h"
#include "common/trace_points.h"

namespace lt::transport::shm {

namespace {

// Where this thread's own main-ring messages are, so that a lane post does
// not overtake them (post_express): the one connection it has posted them
// to (its serial; 0: none), and the ring position past the last one
// (kUnplaced while it waits in the backlog). A thread that has posted
// main-ring messages to two connections no longer tracks them, and its
// express posts all go by the main ring: correct, and a rare case (an RPC
// caller that also sends messages to several nodes).
constexpr uint64_t kUnplaced = ~uint64_t{0};
struct MainPosts {
  uint64_t conn;
  uint64_t end;
  bool several;
};
LT_TLS_FAST constinit thread_local MainPosts t_main{0, 0, false};

}  // namespace

uint64_t ShmConn::next_serial() {
  static std::atomic<uint64_t> n{0};
  return n.fetch_add(1, std::memory_order_relaxed) + 1;
}

// Under send_lock_, after a message of this thread went into the main ring
// or its backlog.
void ShmConn::note_main_post_locked() {
  if (t_main.conn != serial_) {
    if (t_main.conn != 0) t_main.several = true;
    t_main.conn = serial_;
  }
  t_main.end = backlog_.empty() ? tx_head_ : kUnplaced;
}

// True when no message of this thread waits in the main ring for the
// consumer: a lane post cannot overtake one. The consumer's tail moves once
// it has handled the records before it (release_rx).
bool ShmConn::lane_keeps_order() {
  if (t_main.conn == 0) return true;
  if (t_main.several) return false;
  if (t_main.conn != serial_) return true;
  if (t_main.end == kUnplaced ||
      aref(tx_ctrl_->tail).load(std::memory_order_acquire) < t_main.end) {
    return false;
  }
  t_main.conn = 0;  // all taken
  return true;
}

// A record that does not fit before the window's end goes at ring offset 0,
// after a pad to the ring's end (the pad's room is position space: the bytes
// beyond the window are skipped, not written).
bool ShmConn::single_fits_locked(size_t len) {
  uint64_t rec = record_bytes(len);
  uint64_t idx = tx_head_ & mask_;
  while (rec > contig_locked(idx) && !room_locked(ring_ - idx + rec) && widen_locked()) {
  }
  return room_locked(rec <= contig_locked(idx) ? rec : ring_ - idx + rec);
}

// Room for a one-record message of `len` bytes at ring offset *idx, its
// header written: the caller copies the payload after the header and
// publishes the record. False when the ring has no room now.
// Inlined into both writers (a call here cost the RPC path a few percent).
[[gnu::always_inline]] inline bool ShmConn::reserve_single_locked(size_t len, uint32_t imm,
                                                                  uint64_t* idx_out) {
  uint64_t rec = record_bytes(len);
  fit_window_locked(rec);
  uint64_t idx = tx_head_ & mask_, pad = ring_ - idx;
  bool wrap = rec > contig_locked(idx);
  while (wrap && !room_locked(pad + rec) && widen_locked()) wrap = rec > contig_locked(idx);
  if (!room_locked(wrap ? pad + rec : rec)) return false;
  if (wrap) {
    write_pad_locked(idx, pad);
    idx = 0;
  }
  write_header(idx, RecKind::kMsg, len, imm, 0);
  *idx_out = idx;
  return true;
}

bool ShmConn::write_single_locked(const Gather& g, size_t len, uint32_t imm) {
  uint64_t idx = 0;
  if (!reserve_single_locked(len, imm, &idx)) return false;
  g.copy(tx_ring_ + idx + kRecHdr, g.base, len);
  publish_record(idx, record_bytes(len));
  LT_TRACE_POINT('w');
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
    fit_window_locked(rec);
    uint64_t idx = tx_head_ & mask_, contig = contig_locked(idx);
    if (contig < rec && contig < min_rec) {  // too little before the window's end: pad
      if (!room_locked(ring_ - idx)) {
        if (widen_locked()) continue;  // its start is still lent out
        break;
      }
      write_pad_locked(idx, ring_ - idx);
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

// Poller, once a sweep, with the connection's current share of the ring
// budget: narrows a wider window to it after a whole sweep interval without a
// wide record, then frees the ring's pages beyond the share once the
// consumer has taken every record that may lie there; a window within the
// share goes back to the hot window after a sweep without widening. The madvise runs
// under the send lock (a poster waits for it) so that no poster widens the
// window into pages being freed; it happens once per narrowing, a sweep
// interval apart at most.
void ShmConn::trim_window(uint64_t window) {
  if (!send_lock_.try_lock()) return;
  bool bell = false;
  // The share changed (connections came or went). A larger one applies at
  // once; a smaller one as a narrowing, once no wide record is in the way.
  min_win_ = std::min(window, ring_);
  if (win_ < hot_window()) win_ = hot_window();
  if (win_ > min_win_ && wide_records_ == trim_seen_) {
    win_ = min_win_;
    punch_ = true;
    // Records beyond the new window lie before the head. If the head itself
    // is beyond it, the next record there is the pad to the ring's end: write
    // it now, so an idle connection's consumer passes it and the pages go.
    const uint64_t idx = tx_head_ & mask_;
    punch_at_ = tx_head_;
    if (contig_locked(idx) == 0) {
      punch_at_ += ring_ - idx;
      if (backlog_.empty() && room_locked(ring_ - idx)) write_pad_locked(idx, ring_ - idx);
      bell = publish_locked();
    }
  } else if (win_ > hot_window() && win_ <= min_win_ && widened_ == widen_seen_) {
    win_ = hot_window();  // a sweep without widening: back to the start (its pages stay)
  }
  trim_seen_ = wide_records_;
  widen_seen_ = widened_;
  if (punch_ && aref(tx_ctrl_->tail).load(std::memory_order_acquire) >= punch_at_) {
    punch_ = false;
    if (min_win_ < ring_ && ::madvise(tx_ring_ + min_win_, ring_ - min_win_, MADV_REMOVE) != 0) {
      LT_DEBUG("shm: freeing ring pages of node %u's connection: %s", peer_.load(),
               strerror(errno));
    }
  }
  send_lock_.unlock();
  if (bell) net::ring_eventfd(peer_bell_.get());
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
  if (wr.op != Op::kSend && wr.op != Op::kWriteImm) return region_op_len(wr, len);
  if (wr.num_sge > kMaxSge) return Code::kInvalidArg;
  size_t l = 0;
  for (int i = 0; i < wr.num_sge; ++i) l += wr.sge[i].len;
  if (wr.op == Op::kSend && l > max_msg_) return Code::kInvalidArg;
  *len = l;
  return Status::ok();
}

// What post() does for a lone kSend that fits one record, with nothing
// queued before it, and nothing else: the checks, the lock, the record, the
// bell. Whatever it does not take (a full ring, a backlog, a dead
// connection) is left to post(), which queues it or says why.
bool ShmConn::post_short(const void* hdr, size_t hlen, const void* data, size_t dlen) {
  LT_TRACE_POINT('t');
  const size_t len = hlen + dlen;
  if (len > max_single_ || len > max_msg_ || dead_.load(std::memory_order_acquire)) return false;
  lock_tx();
  uint64_t idx = 0;
  const bool ok = backlog_.empty() && reserve_single_locked(len, 0, &idx);
  if (ok) {
    std::byte* at = tx_ring_ + idx + kRecHdr;
    copy_small(at, hdr, hlen);
    if (dlen != 0) copy_small(at + hlen, data, dlen);
    publish_record(idx, record_bytes(len));
    note_main_post_locked();
    LT_TRACE_POINT('w');
  }
  if (unlock_tx()) net::ring_eventfd(peer_bell_.get());
  LT_TRACE_POINT('u');
  return ok;
}

bool ShmConn::post_express(const void* hdr, size_t hlen, const void* data, size_t dlen) {
  LT_TRACE_POINT('t');
  if (hlen + dlen > max_msg_ || dead_.load(std::memory_order_acquire)) return false;
  bool bell = false;
  if (!lane_keeps_order() || !lane_.post(hdr, hlen, data, dlen, &bell)) {
    return post_short(hdr, hlen, data, dlen);
  }
  LT_TRACE_POINT('w');
  if (bell) net::ring_eventfd(peer_bell_.get());
  LT_TRACE_POINT('u');
  return true;
}

Result<size_t> ShmConn::post(std::span<const WorkRequest> wrs) {
  LT_TRACE_POINT('t');
  if (dead_.load(std::memory_order_acquire)) return Code::kPeerDown;
  if (Result<size_t> r = 0; post_small_accesses(wrs, &r)) return r;  // shm_access.cc
  const size_t limit = std::min(wrs.size(), kMaxPostBatch);
  size_t count = 0, guards = 0;
  Status err;
  bool locked = false, bell = false, guard_failed = false;
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
      note_main_post_locked();
      continue;
    }
    if (locked) bell |= unlock_tx();  // one-sided ops may open files: no lock held
    locked = false;
    bool refused = false;
    err = one_sided(wr, len, &refused, &bell);
    if (!err.is_ok() || refused) break;
    if (guard_differs(wr)) {
      guard_failed = true;
      break;
    }
    if (is_guard(wr) && guards == count) ++guards;
  }
  if (locked) bell |= unlock_tx();
  if (bell) net::ring_eventfd(peer_bell_.get());
  LT_TRACE_POINT('u');
  if (guard_failed) return Code::kBadHandle;  // what came before it is done; nothing after
  // After nothing but guards, the op's failure is the post's.
  if (count == guards && !err.is_ok()) return err;
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

}  // namespace lt::transport::shm
