#include "transport/verbs/channel.h"

#include <arpa/inet.h>
#include <infiniband/verbs.h>

#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "common/time.h"
#include "common/trace_points.h"
#include "transport/verbs/mem_pool.h"
#include "transport/verbs/onesided_cq.h"
#include "transport/verbs/verbs_transport.h"

namespace lt::transport::verbs {

Channel::Channel(VerbsTransport* t, VerbsConn* conn, std::unique_ptr<RcQp> qp, MemRegion ring,
                 MemRegion bounce, uint32_t depth, OneSidedCq* ocq)
    : t_(t),
      conn_(conn),
      qp_(std::move(qp)),
      ring_(ring),
      bounce_(bounce),
      depth_(depth),
      ocq_(ocq),
      wqes_(new Wqe[depth]) {}

Channel::~Channel() {
  // Messages that never completed (the connection closed under them).
  uint32_t msgs = 0;
  const uint32_t next = next_seq_.load(std::memory_order_relaxed);
  for (uint32_t k = done_seq_.load(std::memory_order_relaxed); wqes_ && k != next; ++k) {
    msgs += wqes_[k % depth_].msg ? 1 : 0;
  }
  if (msgs != 0) t_->msgs_done(msgs);
  qp_.reset();
  t_->local_pools().free(ring_);
  t_->local_pools().free(bounce_);
}

uint32_t Channel::in_flight() const {
  std::lock_guard<SpinLock> g(const_cast<SpinLock&>(mu_));
  return next_seq_.load(std::memory_order_relaxed) - done_seq_.load(std::memory_order_acquire);
}

// verbs.rc_fault_after: what a retry or access error does to a QP, on
// purpose. What it carries then completes with a flush error, which breaks
// the connection (on_completion); the next operation reconnects.
void Channel::break_qp_for_test() {
  LT_WARN("rc: moving the QP to node %u to the error state (verbs.rc_fault_after)", conn_->peer());
  qp_->to_error();
}

void Channel::fail() {
  if (failed_.exchange(true, std::memory_order_acq_rel)) return;
  qp_->to_error();
}

bool Channel::cq_room() const { return ocq_ != nullptr ? ocq_->room() : t_->cq_room(); }

void Channel::count_posted(uint32_t n) {
  if (ocq_ != nullptr) {
    ocq_->count_posted(n);
  } else {
    t_->count_posted(n);
  }
}

void Channel::count_done(uint32_t n) {
  if (ocq_ != nullptr) {
    ocq_->count_done(n);
  } else {
    t_->count_done(n);
  }
}

void Channel::poll_cq() {
  if (ocq_ != nullptr) {
    t_->poll_onesided_cq();
  } else {
    t_->poll_send_cq();
  }
}

bool Channel::room_locked(uint32_t len) const {
  const uint32_t next = next_seq_.load(std::memory_order_relaxed);
  if (next - done_seq_.load(std::memory_order_acquire) >= depth_ - 1) return false;
  if (!cq_room()) return false;
  if (len == 0) return true;
  const uint32_t size = static_cast<uint32_t>(ring_.len);
  const uint32_t pos = ring_head_ % size;
  const uint32_t pad = pos + len > size ? size - pos : 0;
  return (ring_head_ - ring_tail_.load(std::memory_order_acquire)) + pad + len <= size;
}

// One SEND of the parts gathered; `imm` frames it. Copied into the ring
// unless it fits inline. Signaled when asked (report), or when the queue or
// the ring is half full after it.
Status Channel::post_fragment_locked(const std::byte* const* parts, const uint32_t* lens,
                                     int nparts, uint32_t imm, bool last, uint64_t wr_id,
                                     bool report, const Target& to) {
  uint32_t len = 0;
  for (int i = 0; i < nparts; ++i) len += lens[i];
  const bool inline_ok = len <= t_->caps().max_inline;
  ibv_sge sge[kMaxSge];
  int nsge = 0;
  const uint32_t size = static_cast<uint32_t>(ring_.len);
  if (inline_ok) {
    for (int i = 0; i < nparts; ++i) {
      if (lens[i] == 0) continue;
      sge[nsge++] = {reinterpret_cast<uint64_t>(parts[i]), lens[i], 0};
    }
  } else {
    uint32_t pos = ring_head_ % size;
    if (pos + len > size) {
      ring_head_ += size - pos;
      pos = 0;
    }
    std::byte* dst = ring_.addr + pos;
    for (int i = 0; i < nparts; ++i) {
      std::memcpy(dst, parts[i], lens[i]);
      dst += lens[i];
    }
    ring_head_ += len;
    sge[nsge++] = {reinterpret_cast<uint64_t>(ring_.addr + pos), len, ring_.lkey};
  }
  const uint32_t seq = next_seq_.load(std::memory_order_relaxed);
  Wqe& w = wqes_[seq % depth_];
  w.user_wr_id = wr_id;
  w.ring_end = ring_head_;
  w.report = report && last;
  w.msg = true;
  w.done.store(0, std::memory_order_relaxed);
  const uint32_t queued = seq + 1 - done_seq_.load(std::memory_order_acquire);
  const bool signal = w.report || queued >= depth_ / 2 ||
                      (ring_head_ - ring_tail_.load(std::memory_order_acquire)) >= size / 2 ||
                      ++since_signal_ >= 64;
  ibv_send_wr wr{};
  wr.wr_id = make_wr_id(seq);
  wr.sg_list = nsge != 0 ? sge : nullptr;
  wr.num_sge = nsge;
  wr.opcode = to.write ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_SEND_WITH_IMM;
  wr.imm_data = htonl(imm);
  if (to.write) {
    wr.wr.rdma.remote_addr = to.raddr;
    wr.wr.rdma.rkey = to.rkey;
  }
  wr.send_flags = (signal ? IBV_SEND_SIGNALED : 0) | (inline_ok && len != 0 ? IBV_SEND_INLINE : 0);
  ibv_send_wr* bad = nullptr;
  t_->msg_posting();
  // Counted before the post: its completion may come at once.
  count_posted(1);
  next_seq_.store(seq + 1, std::memory_order_release);
  LT_TRACE_POINT('p');
  const int rc = ibv_post_send(qp_->raw(), &wr, &bad);
  LT_TRACE_POINT('q');
  if (rc != 0) {
    LT_WARN("rc: ibv_post_send to node %u: %s", conn_->peer(), std::strerror(rc));
    next_seq_.store(seq, std::memory_order_release);  // mu_ held: nobody posted since
    count_done(1);
    w.msg = false;
    t_->msgs_done(1);
    return Code::kPeerDown;
  }
  if (signal) since_signal_ = 0;
  if (t_->fault_due()) break_qp_for_test();
  return Status::ok();
}

Status Channel::post_whole_locked(const WorkRequest& wr, const Target& to) {
  const std::byte* parts[kMaxSge];
  uint32_t lens[kMaxSge];
  for (int i = 0; i < wr.num_sge; ++i) {
    parts[i] = wr.sge[i].addr;
    lens[i] = wr.sge[i].len;
  }
  return post_fragment_locked(parts, lens, wr.num_sge, to.write ? wr.imm : kImmWhole, true,
                              wr.wr_id, (wr.flags & kWrSignaled) != 0, to);
}

void Channel::enqueue_locked(const WorkRequest& wr, uint32_t len, const Target& to) {
  Pending p;
  p.data.resize(len);
  std::byte* dst = p.data.data();
  for (int i = 0; i < wr.num_sge; ++i) {
    if (wr.sge[i].len != 0) std::memcpy(dst, wr.sge[i].addr, wr.sge[i].len);
    dst += wr.sge[i].len;
  }
  p.wr_id = wr.wr_id;
  p.report = (wr.flags & kWrSignaled) != 0;
  p.to = to;
  p.imm = wr.imm;
  backlog_.push_back(std::move(p));
  backlog_size_.fetch_add(1, std::memory_order_release);
}

Result<bool> Channel::post_message(const WorkRequest& wr) {
  if (failed()) return Status(Code::kPeerDown);
  uint32_t len = 0;
  for (int i = 0; i < wr.num_sge; ++i) len += wr.sge[i].len;
  const uint32_t frag = t_->fragment_bytes();
  // A kWriteImm posted like a message (Caps::async_write_imm_max): one RDMA
  // WRITE_WITH_IMM of at most one fragment, bounds checked here.
  Target to;
  if (wr.op == Op::kWriteImm) {
    if (len > frag) return Status(Code::kInvalidArg);
    if (!decode_rkey(wr.remote.rkey, wr.remote.addr, len, &to.rkey, &to.raddr)) {
      return Status(Code::kOutOfBounds);
    }
    to.write = true;
  }
  std::unique_lock<SpinLock> g(mu_);
  if (backlog_.empty() && len <= frag && room_locked(len <= t_->caps().max_inline ? 0 : len)) {
    LT_RETURN_IF_ERROR(post_whole_locked(wr, to));
    return true;
  }
  // A large message (in fragments), or a reply that may not be refused,
  // waits in the backlog; anything else is back-pressure.
  const bool must = (wr.flags & kWrMustQueue) != 0;
  if (!must && (len <= frag || !backlog_.empty())) return false;
  enqueue_locked(wr, len, to);
  const bool emptied = pump_locked();
  // The poller takes the transport's backlog lock, then mu_ (pump): mu_
  // is let go first here, or the two threads wait on each other for good.
  g.unlock();
  if (!emptied) t_->note_backlog(this);
  return true;
}

// Posts backlog fragments while there is room; true when the backlog emptied.
bool Channel::pump_locked() {
  const uint32_t frag = t_->fragment_bytes();
  while (!backlog_.empty()) {
    Pending& p = backlog_.front();
    const size_t total = p.data.size();
    do {
      const uint32_t n = static_cast<uint32_t>(std::min<size_t>(frag, total - p.sent));
      if (!room_locked(n <= t_->caps().max_inline ? 0 : n)) return false;
      const bool whole = p.sent == 0 && n == total;
      const uint32_t imm = p.to.write    ? p.imm
                           : whole       ? kImmWhole
                           : p.sent == 0 ? kImmFirst | static_cast<uint32_t>(total)
                                         : kImmMore;
      const std::byte* part = p.data.data() + p.sent;
      const bool last = p.sent + n == total;
      if (!post_fragment_locked(&part, &n, 1, imm, last, p.wr_id, p.report, p.to).is_ok()) {
        backlog_.clear();
        backlog_size_.store(0, std::memory_order_release);
        return true;
      }
      p.sent += n;
    } while (p.sent < total);
    backlog_.pop_front();
    backlog_size_.fetch_sub(1, std::memory_order_release);
  }
  return true;
}

void Channel::pump() {
  std::lock_guard<SpinLock> g(mu_);
  if (failed()) {
    backlog_.clear();
    backlog_size_.store(0, std::memory_order_release);
    return;
  }
  pump_locked();
}

void Channel::on_completion(const ibv_wc& wc) {
  const uint32_t seq = static_cast<uint32_t>(wc.wr_id);
  Wqe& w = wqes_[seq % depth_];
  Code code = Code::kOk;
  if (wc.status != IBV_WC_SUCCESS) {
    code = wc.status == IBV_WC_REM_ACCESS_ERR || wc.status == IBV_WC_LOC_PROT_ERR ? Code::kPerm
                                                                                  : Code::kPeerDown;
    if (wc.status != IBV_WC_WR_FLUSH_ERR) {
      LT_WARN("rc: a work request to node %u failed: %s", conn_->peer(),
              ibv_wc_status_str(wc.status));
    }
    t_->break_conn(conn_);
  }
  // Completions come in order, one thread at a time (the transport's
  // send-CQ lock); an unsignaled request completes only when it failed
  // (flushed), and a later signaled one covers it otherwise. No mu_: a
  // poster may hold it inside ibv_post_send, where Soft-RoCE does the
  // request's work. A poster fills a Wqe before it moves next_seq_ past it
  // and reuses one only once done_seq_ has moved past it, so everything is
  // read here before done_seq_ moves.
  const uint32_t done = done_seq_.load(std::memory_order_relaxed);
  if (seq - done >= next_seq_.load(std::memory_order_acquire) - done) return;  // stale
  const bool report = w.report;
  const uint64_t user = w.user_wr_id;
  w.report = false;
  uint32_t msgs = 0;
  for (uint32_t k = done; k != seq + 1; ++k) {
    Wqe& d = wqes_[k % depth_];
    msgs += d.msg ? 1 : 0;
    d.msg = false;
  }
  ring_tail_.store(w.ring_end, std::memory_order_release);
  w.status.store(static_cast<int>(code), std::memory_order_relaxed);
  w.done.store(uint64_t{seq} + 1, std::memory_order_release);
  done_seq_.store(seq + 1, std::memory_order_release);
  count_done(seq + 1 - done);
  if (msgs != 0) t_->msgs_done(msgs);
  if (report) t_->report_send_done(user, code);
}

}  // namespace lt::transport::verbs
