// Sending messages (LT_send, LT_send_async): eager up to the serving
// transport's eager_max (copied; the buffer is free at return), staged over
// a one-sided transport without placement (copied into the stage; complete
// at once), rendezvous otherwise (the receiver pulls, or the sender places
// the bytes into its buffer: rndv.cc). Every send holds a message credit
// (credits.h) from the start; a failure anywhere gives it back.
#include <cstring>
#include <vector>

#include "common/trace_points.h"
#include "proto/engine.h"

namespace lt::proto {

Result<ReqId> Engine::send_async(NodeId node, uint32_t port, const void* buf, size_t len) {
  return send_impl(node, port, buf, len, false);
}

Status Engine::send_now(NodeId node, uint32_t port, const void* buf, size_t len) {
  auto r = send_impl(node, port, buf, len, true);
  return r.is_ok() ? Status::ok() : r.status();
}

// An eager or staged message is complete once posted: it takes no request
// slot and returns kDoneReqId, so a stream of async sends costs no slot,
// completion or wait per message (ucp_tag_send_nbx returns no request for
// the same reason). no_request: the caller blocks anyway (LT_send); a
// message that must be pulled then gives kUnsupported with nothing taken.
Result<ReqId> Engine::send_impl(NodeId node, uint32_t port, const void* buf, size_t len,
                                bool no_request) {
  LT_RETURN_IF_ERROR(usable());
  if ((buf == nullptr && len != 0) || len > max_payload_ - sizeof(MsgEager)) {
    return Code::kInvalidArg;
  }
  if (!peers_.valid(node)) return Code::kPeerDown;
  // The peer first: a dead one is PEER_DOWN even when no credit is left.
  // The endpoint is held for the whole send: its post needs no second lookup.
  transport::Transport* via = nullptr;
  EndpointRef ep;
  if (node != self()) {
    LT_RETURN_IF_ERROR(endpoint(node, default_deadline(), &ep));
    via = peers_.via(node);
  }
  // Credits bound what this sender can leave unconsumed at the receiver, so
  // the receiver's store of unexpected messages stays bounded; the tenant's
  // cap (if any) bounds them over all receivers.
  bool credit_now = false;
  if (Code c = credits_.take_msg(node, len, &credit_now); c != Code::kOk) {
    if (c == Code::kQuota) sched_.count_quota_refusal();
    return c;
  }
  MsgCreditGuard credit(credits_, node, credit_now);
  LT_TRACE_POINT('n');
  if (via == nullptr) return send_to_self(port, buf, len, credit);
  const transport::Caps& caps = via->caps();
  if (len <= caps.eager_max)
    return send_eager(node, ep.get(), caps.gathers, port, buf, len, credit);
  // Staged when the transport reads natively but cannot place (no
  // cross-memory attach), or places at a cost a second copy undercuts
  // (Caps::place_min_bytes): placement is one copy and needs no stage, so
  // it goes by the pull below. The stage's key is the memory transport's,
  // so only that one reads it. A stage that looks full may have releases
  // from its readers waiting in a transport nobody polled yet (the progress
  // thread stays parked while callers are busy): one pass, then look again.
  if (caps.one_sided && (!caps.placement || len < caps.place_min_bytes) &&
      via == transports_.memory()) {
    uint64_t off = 0;
    if (stage_.alloc(node, len, &off) || (progress(), stage_.alloc(node, len, &off))) {
      return send_staged(node, ep.get(), port, buf, len, off, credit);
    }
  }
  if (no_request) return Code::kUnsupported;  // goes by the pull: the caller uses send_async
  return send_rndv(node, via, port, buf, len, credit);
}

// A message complete at its post has nothing to wait for, so it takes no
// request slot. With QoS on it still passes its class's gate (paced and
// counted; no RTT sample: a post's own duration says nothing of the path).
Status Engine::admit_send(NodeId node, uint64_t bytes) {
  if (!sched_.enabled()) return Status::ok();
  qos::Ticket t;
  t.peer = node;
  LT_RETURN_IF_ERROR(sched_.admit(bytes, default_deadline(), &t));
  sched_.retire(t);
  return Status::ok();
}

// To this node: delivered here, whatever the size (one copy).
Result<ReqId> Engine::send_to_self(uint32_t port, const void* buf, size_t len,
                                   MsgCreditGuard& credit) {
  LT_RETURN_IF_ERROR(admit_send(self(), len));  // first: once the message is out, the call succeeds
  MsgEager m{make_header(MsgOp::kMsgEager, 0), port, 0};
  std::vector<std::byte> msg(sizeof(m) + len);
  std::memcpy(msg.data(), &m, sizeof(m));
  if (len) std::memcpy(msg.data() + sizeof(m), buf, len);
  serve_msg(self(), m.h, msg);
  credit.sent();
  return kDoneReqId;
}

// Under a stream (half the credits a large message may use unconsumed there:
// the receiver is behind, and this message queues behind those anyway) the
// message is posted with kWrMore where that helps (Caps::gathers: tcp sends
// it with the ones that follow in one system call). It is held at most
// until the next progress pass, which CorkWatch keeps within ParkTimer's
// window; when no pass is sure to come that soon, it goes now.
Result<ReqId> Engine::send_eager(NodeId node, transport::Endpoint* ep, bool gathers, uint32_t port,
                                 const void* buf, size_t len, MsgCreditGuard& credit) {
  LT_RETURN_IF_ERROR(admit_send(node, len));
  MsgEager m{credit.header(MsgOp::kMsgEager, 0), port, credit.take_owed()};
  const bool hold = gathers && credits_.msg_in_use(node) > credits_.msg_hold_depth();
  LT_RETURN_IF_ERROR(send_on(node, ep, &m, sizeof(m), buf, len, default_deadline(), false, hold));
  credit.sent();
  if (hold && !sched_.defers_posts() && !corks_.held_back()) ep->flush();
  return kDoneReqId;
}

// Copied into the stage and complete now; the receiver reads the copy
// natively and frees it with MsgStaged.
Result<ReqId> Engine::send_staged(NodeId node, transport::Endpoint* ep, uint32_t port,
                                  const void* buf, size_t len, uint64_t stage_off,
                                  MsgCreditGuard& credit) {
  if (Status s = admit_send(node, len); !s.is_ok()) {
    stage_.free(node, stage_off);
    return s;
  }
  std::memcpy(stage_.base() + stage_off, buf, len);
  MsgRts m{credit.header(MsgOp::kMsgRts, 0),
           port,
           credit.take_owed(),
           len,
           stage_.rkey(),
           stage_off,
           0,
           0};
  Status s = send_on(node, ep, &m, sizeof(m), nullptr, 0, default_deadline(), false);
  if (!s.is_ok()) {
    stage_.free(node, stage_off);
    return s;
  }
  credit.sent();
  return kDoneReqId;
}

// Rendezvous: the request waits for the receiver's pull (rndv.cc), and the
// buffer stays the caller's until it completes.
Result<ReqId> Engine::send_rndv(NodeId node, transport::Transport* via, uint32_t port,
                                const void* buf, size_t len, MsgCreditGuard& credit) {
  ReqId id = 0;
  auto r = alloc_request(ReqKind::kSendRndv, node, &id, len);
  if (!r) return r.status();
  (*r)->send_buf = static_cast<const std::byte*>(buf);
  (*r)->out_len = len;
  (*r)->spin_extra_us.store(rendezvous_spin_us(len), std::memory_order_relaxed);
  MsgRts m{credit.header(MsgOp::kMsgRts, id), port, credit.take_owed(), len, 0, 0, 0, 0};
  offer_split(*r, via, req_gen(id), &m);  // rndv_split.cc
  LT_RETURN_IF_ERROR(send_request(*r, node, &m, sizeof(m), nullptr, 0));
  credit.sent();
  return id;
}

}  // namespace lt::proto
