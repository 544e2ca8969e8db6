// 64-bit atomics on 8-byte aligned LMR words (LT_fetch_add,
// LT_compare_swap): native where the owner is reachable one-sided and its
// atomic domain allows that transport's kind (TransportSet::AtomicDomain),
// done here for this node's LMRs, otherwise executed by the owner on
// request. The owner's domain makes every path to a word one kind: CPU
// atomics (apply_atomic, and shm peers'), or the device's (rc peers', and
// this node's own through local_atomic) where the two do not mix.
#include "proto/engine.h"
#include "proto/rma/native_ops.h"

namespace lt::proto {

using transport::WorkRequest;

namespace {
uint64_t apply_atomic(std::byte* p, AtomicKind kind, uint64_t operand, uint64_t compare) {
  std::atomic_ref<uint64_t> w(*reinterpret_cast<uint64_t*>(p));
  if (kind == AtomicKind::kFetchAdd) return w.fetch_add(operand, std::memory_order_acq_rel);
  uint64_t expected = compare;
  w.compare_exchange_strong(expected, operand, std::memory_order_acq_rel);
  return expected;  // the prior value, whether or not the swap happened
}

// The 8-byte atomic on word `off` of the region `rkey` names, its prior value into *old.
WorkRequest atomic_wr(AtomicKind kind, uint64_t off, uint64_t rkey, uint64_t operand,
                      uint64_t compare, uint64_t* old) {
  WorkRequest wr;
  wr.op = kind == AtomicKind::kFetchAdd ? transport::Op::kFetchAdd : transport::Op::kCmpSwap;
  wr.num_sge = 1;
  wr.sge[0] = {reinterpret_cast<std::byte*>(old), sizeof(uint64_t), 0};
  wr.remote = {off, rkey};
  wr.operand = operand;
  wr.compare = compare;
  return wr;
}
}  // namespace

// An atomic on this node's LMR `l` (checked): by the device in the kDevice
// domain, where `l` is reachable by it (else no peer's device atomic can
// reach it either), otherwise a CPU atomic.
Status Engine::local_atomic(LocalLmr& l, uint64_t off, AtomicKind kind, uint64_t operand,
                            uint64_t compare, uint64_t* old) {
  transport::Transport* dev = transports_.atomics_device();
  const uint64_t rkey = dev == nullptr      ? 0
                        : l.from == dev     ? l.region.rkey
                        : l.exporter == dev ? l.exported.rkey
                                            : 0;
  if (rkey == 0) {
    *old = apply_atomic(l.mem + off, kind, operand, compare);
    return Status::ok();
  }
  return dev->local_atomic(atomic_wr(kind, off, rkey, operand, compare, old));
}

// The part of an atomic that needs no request (aligned, rights checked).
bool Engine::atomic_now_on(const Mapping& m, uint64_t off, AtomicKind kind, uint64_t operand,
                           uint64_t compare, uint64_t* old, Status* s) {
  if (m.owner == self()) {
    *s = lmrs_.with_checked(m.ref(), kRightAtomic, off, sizeof(uint64_t), [&](LocalLmr& l) {
      return local_atomic(l, off, kind, operand, compare, old);
    });
    return true;
  }
  const transport::Op op =
      kind == AtomicKind::kFetchAdd ? transport::Op::kFetchAdd : transport::Op::kCmpSwap;
  NativeOps ops;
  uint64_t rkey = 0;
  const transport::MappedRegion* v = kept_view(m, &rkey);
  if (v != nullptr && peers_.native_atomics(m.owner)) {
    ops.set_atomic(op, off, rkey, operand, compare, old);
    *s = view_op(m, rkey, *v, ops);
    return true;
  }
  EndpointRef ep;
  if (!native_endpoint(m, &ep, &rkey) || !peers_.native_atomics(m.owner)) return false;
  ops.set_atomic(op, off, rkey, operand, compare, old);
  *s = native_op(m, rkey, ep.get(), ops);
  return true;
}

bool Engine::atomic_now(LmrHandle h, uint64_t off, bool fetch_add, uint64_t operand,
                        uint64_t compare, uint64_t* old, Status* s) {
  if (expelled_.load(std::memory_order_relaxed)) return (*s = Code::kClosed), true;
  MappingRef m;
  *s = client_.handles.check(h, kRightAtomic, off, sizeof(uint64_t), &m);
  if (!s->is_ok()) return true;
  if (off % sizeof(uint64_t) != 0) return (*s = Code::kAlign), true;
  return sched_.gated(sizeof(uint64_t), m->owner, default_deadline(), s, [&] {
    return atomic_now_on(*m, off, fetch_add ? AtomicKind::kFetchAdd : AtomicKind::kCompareSwap,
                         operand, compare, old, s);
  });
}

Result<ReqId> Engine::atomic_async(LmrHandle h, uint64_t off, AtomicKind kind, uint64_t operand,
                                   uint64_t compare, uint64_t* old) {
  if (old == nullptr) return Code::kInvalidArg;
  MappingRef m;
  LT_RETURN_IF_ERROR(client_.handles.check(h, kRightAtomic, off, sizeof(uint64_t), &m));
  if (off % sizeof(uint64_t) != 0) return Code::kAlign;
  // The slot first: an atomic done at once must not be followed by a
  // refusal (a caller retrying a fetch_add would add twice).
  ReqId id = 0;
  auto r = alloc_request(ReqKind::kAtomic, 0, &id);
  if (!r) return r.status();
  if (Status s; atomic_now_on(*m, off, kind, operand, compare, old, &s)) {
    return finish_now(*r, id, s);
  }
  (*r)->peer.store(m->owner);
  (*r)->out = reinterpret_cast<std::byte*>(old);
  (*r)->out_len = sizeof(uint64_t);
  AtomicReq q{make_header(MsgOp::kAtomicReq, id), m->ref(), off, operand, compare,
              static_cast<uint32_t>(kind),        0};
  LT_RETURN_IF_ERROR(send_request(*r, m->owner, &q, sizeof(q), nullptr, 0));
  return id;
}

Result<ReqId> Engine::fetch_add_async(LmrHandle h, uint64_t off, uint64_t add, uint64_t* old) {
  return atomic_async(h, off, AtomicKind::kFetchAdd, add, 0, old);
}

Result<ReqId> Engine::compare_swap_async(LmrHandle h, uint64_t off, uint64_t expected,
                                         uint64_t desired, uint64_t* old) {
  return atomic_async(h, off, AtomicKind::kCompareSwap, desired, expected, old);
}

void Engine::serve_atomic(NodeId from, const MsgHeader& h, std::span<const std::byte> b) {
  auto q = load<AtomicReq>(b);
  auto kind = static_cast<AtomicKind>(q.kind);
  if (q.pad != 0 || (kind != AtomicKind::kFetchAdd && kind != AtomicKind::kCompareSwap) ||
      (kind == AtomicKind::kFetchAdd && q.compare != 0)) {
    return reply_status(from, h.req_id, Code::kMalformed);
  }
  uint64_t old = 0;
  Status s = lmrs_.with_checked(q.lmr, kRightAtomic, q.offset, 8, [&](LocalLmr& l) -> Status {
    if (q.offset % 8 != 0) return Code::kAlign;
    return local_atomic(l, q.offset, kind, q.operand, q.compare, &old);
  });
  if (!s.is_ok()) return reply_status(from, h.req_id, s);
  AtomicReply rep{make_header(MsgOp::kAtomicReply, h.req_id), old};
  (void)send(from, &rep, sizeof(rep), nullptr, 0, default_deadline(), true);
}

}  // namespace lt::proto
