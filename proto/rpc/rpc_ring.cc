// RPC by write-with-immediate into rings (rpc/rpc_ring.h): set-up, a call
// into the server's ring, the server's handling of a ring request and its
// reply into the caller's reply ring, and the caller's handling of that.
#include "proto/rpc/rpc_ring.h"

#include <cstring>

#include "common/log.h"
#include "proto/engine.h"

namespace lt::proto {

using transport::MemRegion;
using transport::WorkRequest;

RingSide& RpcRings::get(std::unique_ptr<Ptr[]>& t, transport::NodeId node) {
  Ptr& p = t[node & mask_];
  if (RingSide* s = p.load(std::memory_order_acquire)) return *s;
  std::lock_guard<std::mutex> g(make_mu_);
  if (RingSide* s = p.load(std::memory_order_acquire)) return *s;
  owned_.push_back(std::make_unique<RingSide>());
  p.store(owned_.back().get(), std::memory_order_release);
  return *owned_.back();
}

void RpcRings::forget(transport::NodeId node) {
  for (RingSide* s : {find_out(node), find_in(node)}) {
    if (s == nullptr) continue;
    std::lock_guard<std::mutex> g(s->mu);
    // `node`'s, or an older node's of the same slot (a newer node took it).
    if (s->node.load(std::memory_order_relaxed) > node) continue;
    reset(*s);
  }
}

// Unusable, every slot free; its memory stays. mu held.
void RpcRings::reset(RingSide& s) {
  s.state.store(RingSide::kNone, std::memory_order_release);
  s.node.store(0, std::memory_order_release);
  s.theirs.store(0, std::memory_order_relaxed);
  for (auto& r : s.slot_req) r.store(0, std::memory_order_relaxed);
  s.free.store((uint64_t{1} << kRingSlots) - 1, std::memory_order_release);
}

namespace {
// The transport to `p` can carry rings: it posts writes with immediate of a
// whole slot like messages.
bool ring_capable(const transport::Transport* via) {
  return via != nullptr && via->caps().async_write_imm_max >= kRingSlotBytes;
}

// Makes `side`'s own ring on `via` for `node` (memory kept from an earlier
// node of the slot when it was made on the same transport). mu held.
bool make_ring(RingSide& side, transport::Transport* via, NodeId node) {
  if (side.mine.addr != nullptr && side.via != via) return false;  // another transport's
  if (side.mine.addr == nullptr) {
    auto m =
        via->alloc_memory(uint64_t{kRingSlots} * kRingSlotBytes, transport::Access::kRemoteWrite);
    if (!m) return false;
    side.mine = *m;
    side.via = via;
  }
  side.node.store(node, std::memory_order_release);  // publishes `mine` to handle_ring
  return true;
}
}  // namespace

// The first call to `node` over a ring-capable transport asks for a ring;
// calls go as messages until the offer comes.
void Engine::ask_ring(NodeId node) {
  transport::Transport* via = peers_.via(node);
  if (!ring_capable(via)) return;
  RingSide& o = rings_.out(node);
  {
    std::lock_guard<std::mutex> g(o.mu);
    const NodeId had = o.node.load(std::memory_order_relaxed);
    if (had == node && o.state.load(std::memory_order_relaxed) != RingSide::kNone) return;
    if (had > node) return;               // a newer node holds the slot
    if (had != node) RpcRings::reset(o);  // an older node's: its slots are void
    if (!make_ring(o, via, node)) return;
    o.theirs.store(0, std::memory_order_relaxed);
    o.state.store(RingSide::kAsked, std::memory_order_release);
  }
  RpcRingMsg q{make_header(MsgOp::kRpcRingReq, 0), o.mine.rkey, kRingSlots, kRingSlotBytes};
  if (!send(node, &q, sizeof(q), nullptr, 0, default_deadline(), false).is_ok()) {
    std::lock_guard<std::mutex> g(o.mu);
    if (o.node.load(std::memory_order_relaxed) == node) o.state.store(RingSide::kNone);
  }
}

void Engine::serve_ring(NodeId from, const MsgHeader& h, std::span<const std::byte> b) {
  auto m = load<RpcRingMsg>(b);
  if (m.slots != kRingSlots || m.slot_bytes != kRingSlotBytes || m.rkey == 0) return;
  transport::Transport* via = peers_.via(from);
  if (static_cast<MsgOp>(h.op) == MsgOp::kRpcRingOffer) {  // we asked: the server's ring
    RingSide* o = rings_.find_out(from);
    if (o == nullptr) return;
    std::lock_guard<std::mutex> g(o->mu);
    if (o->node.load(std::memory_order_relaxed) != from || o->via != via ||
        o->state.load(std::memory_order_relaxed) != RingSide::kAsked) {
      return;
    }
    o->theirs.store(m.rkey, std::memory_order_relaxed);
    o->state.store(RingSide::kReady, std::memory_order_release);
    return;
  }
  if (!ring_capable(via)) return;  // the client calls by message
  RingSide& in = rings_.in(from);
  {
    std::lock_guard<std::mutex> g(in.mu);
    if (!make_ring(in, via, from)) return;
    in.theirs.store(m.rkey, std::memory_order_relaxed);
    in.state.store(RingSide::kReady, std::memory_order_release);
  }
  RpcRingMsg offer{make_header(MsgOp::kRpcRingOffer, 0), in.mine.rkey, kRingSlots, kRingSlotBytes};
  (void)send(from, &offer, sizeof(offer), nullptr, 0, default_deadline(), true);
}

// Writes [prefix][hdr][data] into slot `slot` of the peer's ring `rkey`.
Status Engine::ring_write(NodeId to, uint64_t rkey, uint32_t slot, uint32_t imm, const void* hdr,
                          size_t hlen, const void* data, size_t dlen, bool reply) {
  EndpointRef ep;
  LT_RETURN_IF_ERROR(endpoint(to, default_deadline(), &ep));
  std::byte head[kRingPrefix + sizeof(RpcReq)];
  const uint32_t len = static_cast<uint32_t>(hlen + dlen);
  std::memset(head, 0, kRingPrefix);
  std::memcpy(head, &len, sizeof(len));
  std::memcpy(head + kRingPrefix, hdr, hlen);
  WorkRequest wr;
  wr.op = transport::Op::kWriteImm;
  wr.imm = imm;
  wr.num_sge = dlen != 0 ? 2 : 1;
  wr.sge[0] = {head, static_cast<uint32_t>(kRingPrefix + hlen), 0};
  wr.sge[1] = {static_cast<const std::byte*>(data), static_cast<uint32_t>(dlen), 0};
  wr.remote = {uint64_t{slot} * kRingSlotBytes, rkey};
  if (reply) wr.flags |= transport::kWrMustQueue;
  return post_all(to, ep.get(), std::span<const transport::WorkRequest>(&wr, 1),
                  default_deadline());
}

// A call into `node`'s ring when one is ready and has a free slot; false:
// send it as a message, and then (*ask) ask for the ring. The call goes
// first: a new server serves it before it makes the ring (a registration
// there, for its first ring), and this side makes its own while the call is
// on its way.
bool Engine::rpc_by_ring(Request* r, ReqId id, NodeId node, const RpcReq& q, const void* in,
                         size_t in_len, Status* s, bool* ask) {
  RingSide* o = rings_.find_out(node);
  if (o == nullptr || o->node.load(std::memory_order_acquire) != node ||
      o->state.load(std::memory_order_acquire) != RingSide::kReady) {
    *ask = true;
    return false;
  }
  if (kRingPrefix + sizeof(q) + in_len > kRingSlotBytes || o->via != peers_.via(node)) return false;
  const int slot = o->take();
  if (slot < 0) return false;
  o->slot_req[slot].store(id, std::memory_order_release);
  r->word.store(r->word.load(std::memory_order_relaxed), std::memory_order_release);
  *s = ring_write(node, o->theirs.load(std::memory_order_relaxed), static_cast<uint32_t>(slot),
                  ring_imm(false, slot, q.func), &q, sizeof(q), in, in_len, false);
  if (s->is_ok()) ring_calls_.fetch_add(1, std::memory_order_relaxed);
  if (!s->is_ok()) {
    o->slot_req[slot].store(0, std::memory_order_relaxed);
    o->give(slot);
    drop_unsent(r);
  }
  return true;
}

// The server's side: a reply goes into the caller's reply slot when it fits.
bool Engine::reply_by_ring(NodeId to, int slot, const MsgHeader& rh, const std::byte* data,
                           size_t n) {
  if (slot < 0) return false;
  RingSide* in = rings_.find_in(to);
  if (in == nullptr || in->node.load(std::memory_order_acquire) != to ||
      in->state.load(std::memory_order_acquire) != RingSide::kReady ||
      kRingPrefix + sizeof(rh) + n > kRingSlotBytes) {
    return false;
  }
  if (!ring_write(to, in->theirs.load(std::memory_order_relaxed), static_cast<uint32_t>(slot),
                  ring_imm(true, static_cast<uint32_t>(slot), 0), &rh, sizeof(rh), data, n, true)
           .is_ok()) {
    return false;
  }
  ring_replies_.store(ring_replies_.load(std::memory_order_relaxed) + 1,
                      std::memory_order_relaxed);  // the progress token holder's only
  return true;
}

// A zero-length arrival carrying a ring immediate: a request in our ring for
// `from`, or a reply in our reply ring from it.
void Engine::handle_ring(NodeId from, uint32_t imm) {
  const bool reply = (imm & kImmReply) != 0;
  const uint32_t slot = (imm >> kImmSlotShift) & kImmSlotMask;
  RingSide* side = reply ? rings_.find_out(from) : rings_.find_in(from);
  MsgHeader h;
  uint32_t len = 0;
  if ((imm & kImmRing) == 0 || slot >= kRingSlots || side == nullptr ||
      side->node.load(std::memory_order_acquire) != from ||
      (std::memcpy(&len, side->slot(slot), sizeof(len)), len > kRingSlotBytes - kRingPrefix)) {
    malformed_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  auto b = std::span<const std::byte>(side->slot(slot) + kRingPrefix, len);
  const MsgOp want = reply ? MsgOp::kRpcReply : MsgOp::kRpcReq;
  if (!decode_header(b, &h).is_ok() || static_cast<MsgOp>(h.op) != want ||
      (!reply && load<RpcReq>(b).func != (imm & 0xffff)) ||
      (reply && side->slot_req[slot].load(std::memory_order_acquire) != h.req_id)) {
    malformed_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  note_cpu(from, h);
  if (reply) {
    complete(from, h, b);
    ring_done(from, h.req_id, static_cast<int>(slot));  // the reply is out of the slot now
  } else {
    served_.store(served_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    serve_rpc(from, h, b, static_cast<int>(slot));
  }
}

// A reply to one of our calls came (by ring or message): its slot, if it
// had one, is free again. `hint`: the slot a ring reply came in, tried
// first; the others are read before one is exchanged, so a reply costs one
// locked instruction and not one per slot.
void Engine::ring_done(NodeId from, uint64_t req_id, int hint) {
  RingSide* o = rings_.find_out(from);
  if (o == nullptr || o->node.load(std::memory_order_acquire) != from) return;
  auto free_if_ours = [&](uint32_t s) {
    ReqId want = req_id;
    if (o->slot_req[s].load(std::memory_order_relaxed) != req_id ||
        !o->slot_req[s].compare_exchange_strong(want, 0, std::memory_order_acq_rel)) {
      return false;
    }
    o->give(static_cast<int>(s));
    return true;
  };
  if (hint >= 0 && free_if_ours(static_cast<uint32_t>(hint))) return;
  for (uint32_t s = 0; s < kRingSlots; ++s) {
    if (free_if_ours(s)) return;
  }
}

}  // namespace lt::proto
