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
// with kBadHandle as it would at the owner, then the op itself.
Status Engine::native_op(const Mapping& m, uint64_t rkey, transport::Endpoint* ep,
                         const WorkRequest& wr) {
  uint64_t alive = 0;
  WorkRequest chk;
  chk.op = transport::Op::kRead;
  chk.num_sge = 1;
  chk.sge[0] = {reinterpret_cast<std::byte*>(&alive), sizeof(alive), 0};
  chk.remote = {alive_offset(m.size), rkey};
  for (const WorkRequest* w : {static_cast<const WorkRequest*>(&chk), &wr}) {
    auto r = ep->post(std::span<const WorkRequest>(w, 1));
    if (!r) {
      if (r.status().code() == Code::kPeerDown) peers_.retire(m.owner);
      return r.status().code() == Code::kOutOfBounds ? Code::kBadHandle : r.status();
    }
    if (*r != 1) return Code::kNoResource;  // one-sided ops never queue; not expected
    if (w == &chk && alive != m.key) return Code::kBadHandle;
  }
  return Status::ok();
}

}  // namespace lt::proto
