#include "transport/verbs/channel.h"

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <sched.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "common/log.h"
#include "common/time.h"
#include "transport/verbs/mem_pool.h"
#include "transport/verbs/verbs_transport.h"

namespace lt::transport::verbs {

Channel::Channel(VerbsTransport* t, VerbsConn* conn, std::unique_ptr<RcQp> qp, MemRegion ring,
                 MemRegion bounce, uint32_t depth)
    : t_(t),
      conn_(conn),
      qp_(std::move(qp)),
      ring_(ring),
      bounce_(bounce),
      depth_(depth),
      wqes_(new Wqe[depth]) {}

Channel::~Channel() {
  qp_.reset();
  t_->local_pools().free(ring_);
  t_->local_pools().free(bounce_);
}

uint32_t Channel::in_flight() const {
  std::lock_guard<SpinLock> g(const_cast<SpinLock&>(mu_));
  return next_seq_ - done_seq_.load(std::memory_order_relaxed);
}

void Channel::fail() {
  if (failed_.exchange(true, std::memory_order_acq_rel)) return;
  qp_->to_error();
}

bool Channel::room_locked(uint32_t len) const {
  if (next_seq_ - done_seq_.load(std::memory_order_relaxed) >= depth_ - 1) return false;
  if (!t_->cq_room()) return false;
  if (len == 0) return true;
  const uint32_t size = static_cast<uint32_t>(ring_.len);
  const uint32_t pos = ring_head_ % size;
  const uint32_t pad = pos + len > size ? size - pos : 0;
  return (ring_head_ - ring_tail_) + pad + len <= size;
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
  const uint32_t seq = next_seq_;
  Wqe& w = wqes_[seq % depth_];
  w.user_wr_id = wr_id;
  w.ring_end = ring_head_;
  w.report = report && last;
  w.done.store(0, std::memory_order_relaxed);
  const uint32_t queued = seq + 1 - done_seq_.load(std::memory_order_relaxed);
  const bool signal = w.report || queued >= depth_ / 2 || (ring_head_ - ring_tail_) >= size / 2 ||
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
  if (int rc = ibv_post_send(qp_->raw(), &wr, &bad); rc != 0) {
    LT_WARN("rc: ibv_post_send to node %u: %s", conn_->peer(), std::strerror(rc));
    return Code::kPeerDown;
  }
  if (signal) since_signal_ = 0;
  next_seq_ = seq + 1;
  t_->count_posted(1);
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
  std::lock_guard<SpinLock> g(mu_);
  if (backlog_.empty() && len <= frag && room_locked(len <= t_->caps().max_inline ? 0 : len)) {
    LT_RETURN_IF_ERROR(post_whole_locked(wr, to));
    return true;
  }
  // A large message (in fragments), or a reply that may not be refused,
  // waits in the backlog; anything else is back-pressure.
  const bool must = (wr.flags & kWrMustQueue) != 0;
  if (!must && (len <= frag || !backlog_.empty())) return false;
  enqueue_locked(wr, len, to);
  pump_locked();
  t_->note_backlog(this);
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
  bool report = false;
  uint64_t user = 0;
  {
    std::lock_guard<SpinLock> g(mu_);
    // Completions come in order; an unsignaled request completes only when
    // it failed (flushed), and a later signaled one covers it otherwise.
    const uint32_t done = done_seq_.load(std::memory_order_relaxed);
    if (seq - done < next_seq_ - done) {
      ring_tail_ = w.ring_end;
      done_seq_.store(seq + 1, std::memory_order_release);
      t_->count_done(seq + 1 - done);
    }
    report = w.report;
    user = w.user_wr_id;
    w.report = false;
  }
  w.status.store(static_cast<int>(code), std::memory_order_relaxed);
  w.done.store(uint64_t{seq} + 1, std::memory_order_release);
  if (report) t_->report_send_done(user, code);
}

// Polls the send CQ (as any thread may) until request `seq` completed.
// Spins first (polls and yields: on 2 cores the poller, the peer or a
// software device may need this core) for the transport's learned budget,
// twice the usual time an op takes here (verbs.spin_us at least), then
// sleeps in growing steps. A failed channel whose request never completes
// gives up after 2 s (its QP is in error; the completion is a flush the
// device should have made).
Status Channel::wait_for(uint32_t seq) {
  Wqe& w = wqes_[seq % depth_];
  const uint64_t start = now_ns();
  const uint64_t spin_ns = t_->op_gauge().budget_ns();
  uint64_t failed_at = 0;
  for (uint32_t i = 0;; ++i) {
    if (w.done.load(std::memory_order_acquire) == uint64_t{seq} + 1) {
      if (i >= 64) t_->op_gauge().note(now_ns() - start);
      return static_cast<Code>(w.status.load(std::memory_order_relaxed));
    }
    t_->poll_send_cq();
    if (i < 64) continue;
    const uint64_t now = now_ns();
    if (failed()) {
      if (failed_at == 0) failed_at = now;
      if (now - failed_at > 2'000'000'000ull) return Code::kPeerDown;
    }
    if (now - start < spin_ns) {
      sched_yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(now - start < 1'000'000 ? 5 : 50));
    }
  }
}

// Fills `s` (and `sge`) for one one-sided request of `len` bytes at remote
// offset `roff` from/to `local` (lkey).
Status Channel::fill_wr(const WorkRequest& wr, uint64_t roff, uint64_t local, uint32_t lkey,
                        uint32_t len, ibv_sge* sge, ibv_send_wr* s) {
  uint32_t rkey = 0;
  uint64_t raddr = 0;
  if (!decode_rkey(wr.remote.rkey, roff, len, &rkey, &raddr)) return Code::kOutOfBounds;
  *sge = ibv_sge{local, len, lkey};
  *s = ibv_send_wr{};
  s->sg_list = len != 0 ? sge : nullptr;
  s->num_sge = len != 0 ? 1 : 0;
  switch (wr.op) {
    case Op::kRead:
    case Op::kWrite:
      s->opcode = wr.op == Op::kRead ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
      s->wr.rdma.remote_addr = raddr;
      s->wr.rdma.rkey = rkey;
      return Status::ok();
    case Op::kFetchAdd:
    case Op::kCmpSwap:
      s->opcode = wr.op == Op::kFetchAdd ? IBV_WR_ATOMIC_FETCH_AND_ADD : IBV_WR_ATOMIC_CMP_AND_SWP;
      s->wr.atomic.remote_addr = raddr;
      s->wr.atomic.rkey = rkey;
      s->wr.atomic.compare_add = wr.op == Op::kFetchAdd ? wr.operand : wr.compare;
      s->wr.atomic.swap = wr.operand;
      return Status::ok();
    default:
      return Code::kUnsupported;
  }
}

// One signaled one-sided request of `len` bytes at remote offset `roff`
// from/to `local` (lkey). Waits for it.
Status Channel::execute_chunk(const WorkRequest& wr, uint64_t roff, uint64_t local, uint32_t lkey,
                              uint32_t len) {
  ibv_sge sge;
  ibv_send_wr s;
  LT_RETURN_IF_ERROR(fill_wr(wr, roff, local, lkey, len, &sge, &s));
  return post_and_wait(&s, 1);
}

// Posts `n` one-sided work requests chained (one doorbell), only the last
// signaled, and waits for it: RC completes them in order, and a failed one
// completes (with an error) whether signaled or not.
Status Channel::post_and_wait(ibv_send_wr* chain, uint32_t n) {
  uint32_t seq = 0;
  for (;;) {
    {
      std::lock_guard<SpinLock> g(mu_);
      if (failed()) return Code::kPeerDown;
      if (room_locked(0) && next_seq_ + n - done_seq_.load(std::memory_order_relaxed) < depth_) {
        seq = next_seq_;
        for (uint32_t k = 0; k < n; ++k) {
          Wqe& w = wqes_[(seq + k) % depth_];
          w.user_wr_id = 0;
          w.ring_end = ring_head_;
          w.report = false;
          w.done.store(0, std::memory_order_relaxed);
          chain[k].wr_id = make_wr_id(seq + k);
          chain[k].next = k + 1 < n ? &chain[k + 1] : nullptr;
          chain[k].send_flags = k + 1 < n ? 0 : IBV_SEND_SIGNALED;
        }
        ibv_send_wr* bad = nullptr;
        if (ibv_post_send(qp_->raw(), chain, &bad) != 0) return Code::kPeerDown;
        next_seq_ = seq + n;
        since_signal_ = 0;
        break;
      }
    }
    t_->poll_send_cq();
    sched_yield();
  }
  t_->count_posted(n);
  return wait_for(seq + n - 1);
}

// A guarded read (transport.h kWrGuard): the guard word and the data are
// read together into the bounce buffer, one round trip, and the data
// reaches the caller's buffers only when the word matched. Data too large
// for the bounce buffer waits for the guard instead: two round trips.
Status Channel::execute_guarded(const WorkRequest& guard, const WorkRequest& rd) {
  if (guard.op != Op::kRead || guard.num_sge != 1 || guard.sge[0].len != 8 || rd.op != Op::kRead) {
    return Code::kInvalidArg;
  }
  uint64_t total = 0;
  for (int i = 0; i < rd.num_sge; ++i) total += rd.sge[i].len;
  if (total + 8 > bounce_.len) {
    LT_RETURN_IF_ERROR(execute(guard));
    uint64_t word = 0;
    std::memcpy(&word, guard.sge[0].addr, 8);
    if (word != guard.compare) return Code::kBadHandle;
    return execute(rd);
  }
  ibv_sge sge[2];
  ibv_send_wr chain[2]{};
  const WorkRequest* wrs[2] = {&guard, &rd};
  const uint32_t lens[2] = {8, static_cast<uint32_t>(total)};
  std::lock_guard<std::mutex> g(bounce_mu_);
  for (int k = 0; k < 2; ++k) {
    uint32_t rkey = 0;
    uint64_t raddr = 0;
    if (!decode_rkey(wrs[k]->remote.rkey, wrs[k]->remote.addr, lens[k], &rkey, &raddr)) {
      return Code::kOutOfBounds;
    }
    sge[k] = {reinterpret_cast<uint64_t>(bounce_.addr) + (k == 0 ? 0 : 8), lens[k], bounce_.lkey};
    chain[k].sg_list = lens[k] != 0 ? &sge[k] : nullptr;
    chain[k].num_sge = lens[k] != 0 ? 1 : 0;
    chain[k].opcode = IBV_WR_RDMA_READ;
    chain[k].wr.rdma.remote_addr = raddr;
    chain[k].wr.rdma.rkey = rkey;
  }
  LT_RETURN_IF_ERROR(post_and_wait(chain, 2));
  std::memcpy(const_cast<std::byte*>(guard.sge[0].addr), bounce_.addr, 8);
  uint64_t word = 0;
  std::memcpy(&word, bounce_.addr, 8);
  if (word != guard.compare) return Code::kBadHandle;
  const std::byte* src = bounce_.addr + 8;
  for (int i = 0; i < rd.num_sge; ++i) {
    if (rd.sge[i].len != 0) std::memcpy(const_cast<std::byte*>(rd.sge[i].addr), src, rd.sge[i].len);
    src += rd.sge[i].len;
  }
  return Status::ok();
}

// An op and then its guard word (transport.h kWrGuard, Caps::guard_after):
// chained, one doorbell, one round trip; RC executes them in order at the
// target, so the word is read after the op landed. The word, an atomic's
// result and an unregistered write's data go through the bounce buffer; an
// op too large for it is done first and the word read after it.
Status Channel::execute_guard_after(const WorkRequest& op, const WorkRequest& guard) {
  const bool atomic = op.op == Op::kFetchAdd || op.op == Op::kCmpSwap;
  if (guard.op != Op::kRead || guard.num_sge != 1 || guard.sge[0].len != 8 ||
      (!atomic && op.op != Op::kWrite) || op.num_sge < 1) {
    return Code::kInvalidArg;
  }
  uint64_t total = 0;
  for (int i = 0; i < op.num_sge; ++i) total += op.sge[i].len;
  if (atomic) {
    if (op.sge[0].len < 8) return Code::kInvalidArg;
    if (op.remote.addr % 8 != 0) return Code::kAlign;
    total = 8;
  }
  uint64_t word = 0;
  if (total + 8 > bounce_.len || total == 0) {
    LT_RETURN_IF_ERROR(execute(op));
    LT_RETURN_IF_ERROR(execute(guard));
    std::memcpy(&word, guard.sge[0].addr, 8);
    return word == guard.compare ? Status::ok() : Status(Code::kBadHandle);
  }
  std::lock_guard<std::mutex> g(bounce_mu_);
  std::byte* data = bounce_.addr + 8;
  uint64_t laddr = reinterpret_cast<uint64_t>(data);
  uint32_t lkey = bounce_.lkey;
  if (op.op == Op::kWrite) {
    // Registered memory is written from in place (see execute), the rest
    // copied into the bounce buffer.
    uint64_t at = reinterpret_cast<uint64_t>(op.sge[0].addr);
    const uint32_t k =
        op.num_sge == 1 ? t_->pools().lkey_of(op.sge[0].addr, op.sge[0].len, &at) : 0;
    if (k != 0) {
      laddr = at;
      lkey = k;
    } else {
      std::byte* to = data;
      for (int i = 0; i < op.num_sge; ++i) {
        if (op.sge[i].len != 0) std::memcpy(to, op.sge[i].addr, op.sge[i].len);
        to += op.sge[i].len;
      }
    }
  }
  ibv_sge sge[2];
  ibv_send_wr chain[2];
  LT_RETURN_IF_ERROR(
      fill_wr(op, op.remote.addr, laddr, lkey, static_cast<uint32_t>(total), &sge[0], &chain[0]));
  LT_RETURN_IF_ERROR(fill_wr(guard, guard.remote.addr, reinterpret_cast<uint64_t>(bounce_.addr),
                             bounce_.lkey, 8, &sge[1], &chain[1]));
  LT_RETURN_IF_ERROR(post_and_wait(chain, 2));
  if (atomic) std::memcpy(const_cast<std::byte*>(op.sge[0].addr), data, 8);
  std::memcpy(&word, bounce_.addr, 8);
  std::memcpy(const_cast<std::byte*>(guard.sge[0].addr), bounce_.addr, 8);
  return word == guard.compare ? Status::ok() : Status(Code::kBadHandle);
}

Status Channel::execute(const WorkRequest& wr) {
  const bool atomic = wr.op == Op::kFetchAdd || wr.op == Op::kCmpSwap;
  uint64_t total = 0;
  for (int i = 0; i < wr.num_sge; ++i) total += wr.sge[i].len;
  if (atomic) {
    if (wr.num_sge < 1 || wr.sge[0].len < 8) return Code::kInvalidArg;
    total = 8;
  }
  if (wr.remote.rkey == 0) return Code::kBadHandle;
  uint32_t rk = 0;
  uint64_t ra = 0;
  if (!decode_rkey(wr.remote.rkey, wr.remote.addr, total, &rk, &ra)) return Code::kOutOfBounds;
  if (atomic && wr.remote.addr % 8 != 0) return Code::kAlign;
  const bool read = wr.op == Op::kRead || atomic;
  std::lock_guard<std::mutex> g(bounce_mu_);
  uint64_t roff = wr.remote.addr;
  if (total == 0) {
    return execute_chunk(wr, roff, reinterpret_cast<uint64_t>(bounce_.addr), bounce_.lkey, 0);
  }
  for (int i = 0; i < wr.num_sge; ++i) {
    std::byte* local = const_cast<std::byte*>(wr.sge[i].addr);
    uint32_t left = atomic ? 8 : wr.sge[i].len;
    // Registered memory is used in place: the caller's (sge lkey, registered
    // at its virtual address) or an LMR pool's (named by its offset).
    uint64_t laddr = reinterpret_cast<uint64_t>(local);
    uint32_t lkey = t_->pools().lkey_of(local, left, &laddr);
    if (lkey == 0) lkey = wr.sge[i].lkey;
    while (left != 0) {
      const uint32_t n =
          lkey != 0 ? left : static_cast<uint32_t>(std::min<size_t>(left, bounce_.len));
      if (lkey != 0) {
        LT_RETURN_IF_ERROR(execute_chunk(wr, roff, laddr, lkey, n));
      } else {
        if (!read) std::memcpy(bounce_.addr, local, n);
        LT_RETURN_IF_ERROR(
            execute_chunk(wr, roff, reinterpret_cast<uint64_t>(bounce_.addr), bounce_.lkey, n));
        if (read) std::memcpy(local, bounce_.addr, n);
      }
      local += n;
      laddr += n;
      roff += n;
      left -= n;
    }
    if (atomic) break;
  }
  return Status::ok();
}

}  // namespace lt::transport::verbs
