// The offload path of one-sided operations: where the transport to an LMR's
// owner has native one-sided access (shm, rc), reads, writes and atomics go
// straight to the owner's memory without waking it, with the key the owner
// made for that transport (its memory transport's, or its exporter's:
// TransportSet::native_slot).
#include "common/tls.h"
#include "proto/engine.h"
#include "proto/rma/native_ops.h"
#include "proto/rma/view_cache.h"

namespace lt::proto {

using transport::WorkRequest;

namespace {

// This thread's views (rma/view_cache.h): a pointer reached in one load on
// every op, to a cache made at the thread's first view and freed when the
// thread exits (t_views_owner, reached only then).
LT_TLS_FAST constinit thread_local ViewCache* t_views = nullptr;
LT_TLS_FAST constinit thread_local bool t_views_gone = false;
struct ViewCacheOwner {
  std::unique_ptr<ViewCache> cache;
  ~ViewCacheOwner() {
    t_views = nullptr;
    t_views_gone = true;  // a thread on its way out keeps posting its ops
  }
};
thread_local ViewCacheOwner t_views_owner;

const transport::MappedRegion* cached_view(const void* engine, NodeId owner, uint64_t rkey) {
  return t_views != nullptr ? t_views->find(engine, owner, rkey) : nullptr;
}

// The region `rkey` names at `owner`, mapped here (Caps::views), from this
// thread's cache or else from the endpoint; null: none, post instead.
const transport::MappedRegion* view_of(const void* engine, NodeId owner, uint64_t rkey,
                                       transport::Endpoint* ep) {
  if (const transport::MappedRegion* v = cached_view(engine, owner, rkey)) return v;
  if (t_views_gone) return nullptr;
  auto v = ep->view(rkey);
  if (v == nullptr || !v->live()) return nullptr;
  if (t_views == nullptr) {
    t_views_owner.cache = std::make_unique<ViewCache>();
    t_views = t_views_owner.cache.get();
  }
  return t_views->put(engine, owner, rkey, std::move(v));
}

}  // namespace

// The view this thread keeps of m's region, with its key, when the owner's
// transport maps it here (Caps::views) and the owner is not known to be
// down: an op then needs no endpoint at all (a connection seen closed has
// retired its views). Null: go through native_endpoint.
const transport::MappedRegion* Engine::kept_view(const Mapping& m, uint64_t* rkey) const {
  if (t_views == nullptr) return nullptr;
  const int slot = peers_.native_slot(m.owner);
  if (slot < 0) return nullptr;  // none, or not settled yet
  *rkey = m.rkeys[slot];
  if (*rkey == 0 || peers_.down(m.owner)) return nullptr;
  return t_views->find(this, m.owner, *rkey);
}

// [check, op] on a view of the owner's region: the liveness word, then the
// op only when it matched (native_op's first case).
Status Engine::view_op(const Mapping& m, uint64_t rkey, const transport::MappedRegion& v,
                       NativeOps& ops) {
  uint64_t alive = 0;
  ops.set_check(true, transport::kWrGuard, alive_offset(m.size), rkey, m.key, &alive);
  return applied(m.owner, ops.pair(true), v.apply(ops.pair(true)));
}

// The endpoint and key for native one-sided access to m's memory: the
// transport serving the owner reaches its LMR memory (as the owner's memory
// transport or its exporter) and the LMR has a key for it. A peer that
// reached us before our address book knew it is settled here, once.
// False: use messages.
bool Engine::native_endpoint(const Mapping& m, EndpointRef* ep, uint64_t* rkey) {
  if (m.owner == self()) return false;
  if (!endpoint(m.owner, default_deadline(), ep).is_ok()) return false;
  int slot = peers_.native_slot(m.owner);
  if (slot == PeerTable::kUnsettled) {
    auto info = membership_->peer(m.owner);
    if (!info) return false;
    transport::Transport* via = peers_.via(m.owner);
    slot = transports_.native_slot(*info, via);
    peers_.settle_native(m.owner,
                         PeerTable::native_access(slot, transports_.native_atomics(*info, via)));
  }
  if (slot < 0) return false;
  *rkey = m.rkeys[slot];
  return *rkey != 0;
}

// How recently a mapping's liveness check must have matched for an op to go
// without one (below): half of kGuardFreshNs, so a mapping in steady use
// renews its stamp with a one-round-trip guarded op before it goes stale.
constexpr uint64_t kUncheckedNs = transport::kGuardFreshNs / 2;

// One native op on a peer's LMR (rights and bounds were checked against the
// handle; a handle its master revoked failed that check). The op is checked
// against the LMR's liveness word, so an op on a freed LMR fails with
// kBadHandle as it would at the owner, except while a check matched
// recently:
//  - where the transport keeps freed memory out of use (Caps::guard_after)
//    and the word matched less than kUncheckedNs ago, the op goes alone:
//    one RDMA op, as perftest posts. It lands in this LMR or, racing with
//    LT_free, in its freed, unused memory; a free that does not race with
//    it has revoked the handle first (lmr/directory.cc revoke_mappers);
//  - a read goes with its check in one round trip where the transport can
//    guard it (Caps::guarded_reads): the data reaches the caller only when
//    the word matched; so does any op where the transport does the check
//    and then the op itself within one post (Caps::guard_before, shm: one
//    post instead of two);
//  - a write or an atomic goes with its check after it, in one round trip
//    (Caps::guard_after), when the word matched less than kGuardFreshNs
//    ago: the owner keeps freed memory out of use for longer than that plus
//    the op's delivery time, so the op lands in this LMR or in its freed,
//    unused memory, and the check tells which;
//  - otherwise the check goes first and the op only when it matched.
// Where the transport maps the owner's region here (Caps::views, shm) none
// of that is needed: the op is the caller's own copy or atomic instruction,
// right after a load of the word, every time (no stamp to keep fresh).
// Every matching check stamps the mapping with the time it was posted.
// Times are read from the coarse clock (a few ns against tens for now_ns on
// a VM, which was a fifth of an 8 B op over shm): a stamp is at most one tick
// behind the real time, so an age read from two stamps is padded by a tick
// before it is trusted, and kUncheckedNs is many ticks long.
Status Engine::native_op(const Mapping& m, uint64_t rkey, transport::Endpoint* ep, NativeOps& ops) {
  const transport::Transport* via = peers_.via(m.owner);
  const transport::Caps none;
  const transport::Caps& caps = via != nullptr ? via->caps() : none;
  if (caps.views) {
    if (const transport::MappedRegion* v = view_of(this, m.owner, rkey, ep)) {
      return view_op(m, rkey, *v, ops);
    }
  }
  const uint64_t posted = coarse_now_ns();
  const uint64_t seen = m.alive_seen.v.load(std::memory_order_relaxed);
  // Saturating: a stamp from after `posted` (another thread's) reads as old.
  const uint64_t age = posted >= seen ? posted - seen + coarse_tick_ns() : UINT64_MAX;
  if (caps.guard_after && age < kUncheckedNs) return post_checked(m.owner, ep, ops.op_alone());
  uint64_t alive = 0;
  const bool read = ops.op().op == transport::Op::kRead;
  const bool before = (read && caps.guarded_reads) || caps.guard_before;
  if (before || (!read && caps.guard_after && age < transport::kGuardFreshNs)) {
    ops.set_check(before, transport::kWrGuard, alive_offset(m.size), rkey, m.key, &alive);
    LT_RETURN_IF_ERROR(post_checked(m.owner, ep, ops.pair(before)));
    m.alive_seen.v.store(posted, std::memory_order_relaxed);
    return Status::ok();
  }
  ops.set_check(true, 0, alive_offset(m.size), rkey, m.key, &alive);
  LT_RETURN_IF_ERROR(post_checked(m.owner, ep, ops.check_alone()));
  if (alive != m.key) return Code::kBadHandle;
  m.alive_seen.v.store(posted, std::memory_order_relaxed);
  return post_checked(m.owner, ep, ops.op_alone());
}

// Posts one-sided ops that complete when post returns: all of them, or the
// first failure (an op outside the LMR's registration is a stale handle).
Status Engine::post_checked(NodeId owner, transport::Endpoint* ep,
                            std::span<const WorkRequest> wrs) {
  return applied(owner, wrs, ep->post(wrs));
}

// post_checked's answer from the post's (or a view's apply).
Status Engine::applied(NodeId owner, std::span<const WorkRequest> wrs, Result<size_t> r) {
  if (!r) {
    if (r.status().code() == Code::kPeerDown) peers_.retire(owner);
    return r.status().code() == Code::kOutOfBounds ? Code::kBadHandle : r.status();
  }
  count_tx(owner, wrs.first(*r));
  return *r == wrs.size() ? Status::ok() : Status(Code::kNoResource);  // never queued; not expected
}

}  // namespace lt::proto
