// The offload path of one-sided operations: where the transport to an LMR's
// owner has native one-sided access (shm today, verbs RC later), reads,
// writes and atomics go straight to the owner's memory without waking it,
// when the transport to it is the one that made its LMR memory
// (TransportSet::native_memory).
#include "proto/engine.h"

namespace lt::proto {

using transport::WorkRequest;

// The endpoint for native one-sided access to m's memory: the LMR lives in
// a region the owner's one-sided transport made, and that transport serves
// the owner. False: use messages.
bool Engine::native_endpoint(const Mapping& m, EndpointRef* ep) {
  if (m.rkey == 0 || m.owner == self()) return false;
  if (!endpoint(m.owner, default_deadline(), ep).is_ok()) return false;
  return peers_.native(m.owner);
}

// One native op on a peer's LMR (rights and bounds were checked against the
// handle): first the LMR's liveness word, so an op on a freed LMR fails
// with kBadHandle as it would at the owner, then the op itself.
Status Engine::native_op(const Mapping& m, transport::Endpoint* ep, const WorkRequest& wr) {
  uint64_t alive = 0;
  WorkRequest chk;
  chk.op = transport::Op::kRead;
  chk.num_sge = 1;
  chk.sge[0] = {reinterpret_cast<std::byte*>(&alive), sizeof(alive), 0};
  chk.remote = {alive_offset(m.size), m.rkey};
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
