// Routing what arrives: a request from a peer goes to the part that serves
// it (serve), a reply to the request it answers (complete). Each case is one
// call into the file that owns the operation.
#include "common/log.h"
#include "proto/engine.h"

namespace lt::proto {

using transport::Completion;
using transport::CqKind;

void Engine::handle(const Completion& c) {
  if (c.kind == CqKind::kPeerLost) {
    peer_gone(c.peer, false);
    return;
  }
  if (c.kind == CqKind::kSendDone) {
    sent_by_ref(c.wr_id, c.status);  // peers.cc: only those are signaled
    return;
  }
  if (c.kind != CqKind::kRecv) return;
  // A node new in its slot (its hello named it; the membership may not have
  // told us yet) takes the slot over; one older than the slot's holder is
  // gone, and what it sent last is dropped.
  if (!peers_.owns(c.peer) && !claim_peer(c.peer)) return;
  if (c.src_cpu != kCpuUnknown) peer_cpu_.note(c.peer, c.src_cpu);
  if (c.len == 0) {  // only a write-with-immediate into an RPC ring has no message
    handle_ring(c.peer, c.imm);
    return;
  }
  auto b = std::span<const std::byte>(c.rx, c.len);
  MsgHeader h;
  if (!decode_header(b, &h).is_ok()) {
    if (malformed_.fetch_add(1) == 0) LT_WARN("dropping malformed message from node %u", c.peer);
    return;
  }
  if (c.src_cpu == kCpuUnknown) note_cpu(c.peer, h);
  if (h.op >= static_cast<uint8_t>(MsgOp::kReply)) {
    complete(c.peer, h, b);
    // A reply by message to a call made into a ring frees its slot.
    if (h.op == static_cast<uint8_t>(MsgOp::kRpcReply)) ring_done(c.peer, h.req_id);
  } else {
    serve(c.peer, h, b);
  }
}

// The CPU hint a tcp or verbs message's header carries (shm hints its
// records itself), kept when the sender shares this machine's CPUs: another
// machine's CPU numbers name none of ours.
void Engine::note_cpu(NodeId from, const MsgHeader& h) {
  if (CpuHint cpu = cpu_of(h); cpu != kCpuUnknown && peers_.on_this_machine(from)) {
    peer_cpu_.note(from, cpu);
  }
}

void Engine::serve(NodeId from, const MsgHeader& h, std::span<const std::byte> b) {
  // Only the progress token holder serves: a plain increment (no locked
  // instruction per message), read racily by the progress loop and stats().
  served_.store(served_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  switch (static_cast<MsgOp>(h.op)) {
    case MsgOp::kReadReq:
      return serve_read(from, h, b);  // rma/rma.cc
    case MsgOp::kWriteReq:
    case MsgOp::kMemsetReq:
      return serve_write(from, h, b);
    case MsgOp::kMemcpyReq:
      return serve_memcpy(from, h, b);
    case MsgOp::kAtomicReq:
      return serve_atomic(from, h, b);  // rma/atomics.cc
    case MsgOp::kAllocReq:
      return serve_alloc(from, h, b);  // lmr/directory.cc
    case MsgOp::kFreeReq:
      return serve_free(from, h, b);
    case MsgOp::kMapReq:
      return serve_map(from, h, b);
    case MsgOp::kRevokeReq:
      return serve_revoke(from, h, b);
    case MsgOp::kMsgEager:
    case MsgOp::kMsgRts:
    case MsgOp::kMsgStaged:
    case MsgOp::kMsgPull:
    case MsgOp::kMsgPulled:
    case MsgOp::kMsgCredit:
      return serve_msg(from, h, b);  // msg/recv.cc
    case MsgOp::kRpcReq:
      return serve_rpc(from, h, b);  // rpc/rpc_server.cc
    case MsgOp::kRpcRingReq:
    case MsgOp::kRpcRingOffer:
      return serve_ring(from, h, b);  // rpc/rpc_ring.cc
    default:
      malformed_.fetch_add(1, std::memory_order_relaxed);
  }
}

Request* Engine::claim_for_reply(NodeId from, const MsgHeader& h, bool msg_data) {
  Request* r = client_.requests.slot(h.req_id);
  const uint32_t gen = req_gen(h.req_id);
  // A message's data may complete a PLACING receive, a plain reply a write
  // still SENDING (its bytes arrived before its kSendDone); anything else a
  // PENDING request. The peer must be the one it was sent to.
  const bool plain = h.op == static_cast<uint8_t>(MsgOp::kReply);
  bool claimed = r->peer.load() == from && (r->move(gen, kStPending, kStClaimed) ||
                                            (msg_data && r->move(gen, kStPlacing, kStClaimed)) ||
                                            (plain && r->move(gen, kStSending, kStClaimed)));
  if (!claimed) {
    late_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  return r;
}

namespace {
// A reply of `op` to a request of `kind` must be this op; the status to
// finish with otherwise.
Status expect_op(MsgOp op, MsgOp want) { return op == want ? Status::ok() : Code::kMalformed; }
}  // namespace

void Engine::complete(NodeId from, const MsgHeader& h, std::span<const std::byte> b) {
  if (client_.requests.slot(h.req_id) == nullptr) {
    late_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  auto op = static_cast<MsgOp>(h.op);
  // The server freed our ring slot, whether or not the call is still waited for.
  if (op == MsgOp::kRpcReply) credits_.return_rpc(from);
  const bool msg_data = op == MsgOp::kMsgData || op == MsgOp::kMsgPlaced;
  // The message is consumed here even if its receive was cancelled.
  if (msg_data) credit_consumed(from, (h.flags & kFlagCreditNow) != 0);
  Request* r = claim_for_reply(from, h, msg_data);
  if (r == nullptr) return;
  Status s = static_cast<Code>(h.status);
  if (r->kind == ReqKind::kRecv && split_reply(r, h.req_id, from, op, s, b)) return;
  if (r->kind == ReqKind::kRecv && op == MsgOp::kMsgData && !s.is_ok()) {
    // The sender withdrew its rendezvous message: wait for the next one.
    drop_placement(r);
    r->word.store(req_word(req_gen(h.req_id), kStPending), std::memory_order_release);
    match_recv(r, h.req_id);
    return;
  }
  if (s.is_ok()) {
    auto body = b.subspan(sizeof(MsgHeader));
    switch (r->kind) {
      case ReqKind::kRead:
      case ReqKind::kCopyRead:
        s = op != MsgOp::kReply || body.size() != r->out_len ? Status(Code::kMalformed)
                                                             : Status::ok();
        if (s.is_ok()) std::memcpy(r->out, body.data(), r->out_len);
        break;
      case ReqKind::kAlloc:
        if ((s = expect_op(op, MsgOp::kAllocReply)).is_ok()) r->alloc = load<AllocReply>(b);
        break;
      case ReqKind::kMap:
        if ((s = expect_op(op, MsgOp::kMapReply)).is_ok()) r->mapr = load<MapReply>(b);
        break;
      case ReqKind::kRecv:
        s = complete_recv(r, from, op, b);  // msg/rndv.cc
        break;
      case ReqKind::kSendRndv:
      case ReqKind::kRpcRecv:  // completed locally, never by a peer's reply
        s = Code::kMalformed;
        break;
      case ReqKind::kRpc:
        if ((s = expect_op(op, MsgOp::kRpcReply)).is_ok()) s = fill_recv(r, from, body, false);
        break;
      case ReqKind::kAtomic:
        if ((s = expect_op(op, MsgOp::kAtomicReply)).is_ok()) {
          uint64_t old = load<AtomicReply>(b).old;
          std::memcpy(r->out, &old, sizeof(old));
        }
        break;
      case ReqKind::kPlain:
        if (op != MsgOp::kReply || !body.empty()) s = Code::kMalformed;
        break;
    }
  }
  if (s.is_ok() && r->kind == ReqKind::kCopyRead && copy_second_half(r, h, &s)) return;
  finish(r, s);
}

}  // namespace lt::proto
