// The offload path of one-sided operations: where the transport to an LMR's
// owner has native one-sided access (shm, rc), reads, writes and atomics go
// straight to the owner's memory without waking it, with the key the owner
// made for that transport (its memory transport's, or its exporter's:
// TransportSet::native_slot).
#include "proto/engine.h"

namespace lt::proto {

using transport::WorkRequest;

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
    slot = transports_.native_slot(*info, peers_.via(m.owner));
    peers_.settle_native(m.owner, slot);
  }
  if (slot < 0) return false;
  *rkey = m.rkeys[slot];
  return *rkey != 0;
}

// One native op on a peer's LMR (rights and bounds were checked against the
// handle): first the LMR's liveness word, so an op on a freed LMR fails
// with kBadHandle as it would at the owner, then the op itself. A read goes
// with its check in one round trip where the transport can guard it
// (Caps::guarded_reads); a write or an atomic must not start before the
// check passed, so it pays the check's round trip first.
Status Engine::native_op(const Mapping& m, uint64_t rkey, transport::Endpoint* ep,
                         const WorkRequest& wr) {
  uint64_t alive = 0;
  WorkRequest pair[2];
  WorkRequest& chk = pair[0];
  chk.op = transport::Op::kRead;
  chk.num_sge = 1;
  chk.sge[0] = {reinterpret_cast<std::byte*>(&alive), sizeof(alive), 0};
  chk.remote = {alive_offset(m.size), rkey};
  const transport::Transport* via = peers_.via(m.owner);
  if (wr.op == transport::Op::kRead && via != nullptr && via->caps().guarded_reads) {
    chk.flags = transport::kWrGuard;
    chk.compare = m.key;
    pair[1] = wr;
    return post_checked(m.owner, ep, std::span<const WorkRequest>(pair, 2));
  }
  LT_RETURN_IF_ERROR(post_checked(m.owner, ep, std::span<const WorkRequest>(&chk, 1)));
  if (alive != m.key) return Code::kBadHandle;
  return post_checked(m.owner, ep, std::span<const WorkRequest>(&wr, 1));
}

// Posts one-sided ops that complete when post returns: all of them, or the
// first failure (an op outside the LMR's registration is a stale handle).
Status Engine::post_checked(NodeId owner, transport::Endpoint* ep,
                            std::span<const WorkRequest> wrs) {
  auto r = ep->post(wrs);
  if (!r) {
    if (r.status().code() == Code::kPeerDown) peers_.retire(owner);
    return r.status().code() == Code::kOutOfBounds ? Code::kBadHandle : r.status();
  }
  return *r == wrs.size() ? Status::ok() : Status(Code::kNoResource);  // never queued; not expected
}

}  // namespace lt::proto
