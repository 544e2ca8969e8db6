// A channel's one-sided operations (channel.h): RDMA READ, WRITE and
// atomics posted by the calling thread, alone or chained with a guard word,
// and waited for by that thread polling the send CQ itself.
#include <infiniband/verbs.h>
#include <sched.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "common/log.h"
#include "common/time.h"
#include "transport/verbs/channel.h"
#include "transport/verbs/mem_pool.h"
#include "transport/verbs/verbs_transport.h"

namespace lt::transport::verbs {

// Polls the channel's CQ (as any thread may) until request `seq` completed.
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
    // Done, and its Wqe already taken by a later request: the channel
    // posted depth_ more since (another thread's stream of fragments while
    // this one slept). It failed only if the connection broke (on_completion
    // breaks it before it moves done_seq_).
    if (static_cast<int32_t>(done_seq_.load(std::memory_order_acquire) - (seq + 1)) >= 0) {
      if (w.done.load(std::memory_order_acquire) == uint64_t{seq} + 1) {  // completed just now
        return static_cast<Code>(w.status.load(std::memory_order_relaxed));
      }
      return conn_->broken_.load(std::memory_order_acquire) ? Code::kPeerDown : Code::kOk;
    }
    poll_cq();
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
// completes (with an error) whether signaled or not. Room comes back with
// completions; a channel that has none for kNoRoomNs (its QP stuck, or an
// accounting bug) fails the op rather than hang its caller.
Status Channel::post_and_wait(ibv_send_wr* chain, uint32_t n) {
  constexpr uint64_t kNoRoomNs = 2'000'000'000ull;
  uint32_t seq = 0;
  uint64_t waiting_since = 0;
  for (;;) {
    {
      std::lock_guard<SpinLock> g(mu_);
      if (failed()) return Code::kPeerDown;
      const uint32_t next = next_seq_.load(std::memory_order_relaxed);
      if (room_locked(0) && next + n - done_seq_.load(std::memory_order_acquire) < depth_) {
        seq = next;
        for (uint32_t k = 0; k < n; ++k) {
          Wqe& w = wqes_[(seq + k) % depth_];
          w.user_wr_id = 0;
          w.ring_end = ring_head_;
          w.report = false;
          w.msg = false;
          w.done.store(0, std::memory_order_relaxed);
          chain[k].wr_id = make_wr_id(seq + k);
          chain[k].next = k + 1 < n ? &chain[k + 1] : nullptr;
          chain[k].send_flags = k + 1 < n ? 0 : IBV_SEND_SIGNALED;
        }
        ibv_send_wr* bad = nullptr;
        // Counted before the post: the completions may come at once.
        count_posted(n);
        next_seq_.store(seq + n, std::memory_order_release);
        if (ibv_post_send(qp_->raw(), chain, &bad) != 0) {
          next_seq_.store(seq, std::memory_order_release);  // mu_ held: nobody posted since
          count_done(n);
          return Code::kPeerDown;
        }
        since_signal_ = 0;
        if (t_->fault_due()) break_qp_for_test();
        break;
      }
    }
    const uint64_t now = now_ns();
    if (waiting_since == 0) waiting_since = now;
    if (now - waiting_since > kNoRoomNs) {
      LT_WARN("rc: no room to post to node %u for 2 s (%u requests in flight, %s)", conn_->peer(),
              in_flight(), cq_room() ? "its CQ has room" : "its CQ is full");
      return Code::kNoResource;
    }
    poll_cq();
    sched_yield();
  }
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
