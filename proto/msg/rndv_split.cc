// Split rendezvous: a placed message large enough (Caps::split_min_bytes)
// is copied by both ends at once. The sender offers its buffer in MsgRts
// (src_addr, src_rkey: registered for remote reads); the receiver's MsgPull
// asks it to place only the head (head_len) and reads the tail itself while
// the sender writes, then says MsgPulled. On one host that is two CPUs
// copying instead of one (UCX's shared-memory transport streams through
// two copies for the same reason).
//
// Each side has two parts in flight, counted in Request::split with the
// request's generation:
//  - sender: its own write (serve_pull) and the receiver's MsgPulled;
//  - receiver: its own read (read_split_tail) and the sender's answer
//    (MsgPlaced, MsgData, or a withdrawal).
// Whoever ends the last part completes the request; the request rests in
// PLACING between the parts, so a peer-loss sweep can still fail it and no
// timeout can withdraw a buffer the other end may be copying.
#include "common/log.h"
#include "proto/engine.h"

namespace lt::proto {

using transport::WorkRequest;

// The sender: offers the message's own buffer for a split where the
// transport reading it natively allows one. Nothing is offered if the
// registration fails; the receiver then has the sender place it all.
void Engine::offer_split(Request* r, transport::Transport* via, uint32_t gen, MsgRts* m) {
  if (via == nullptr) return;
  const transport::Caps& c = via->caps();
  if (!c.placement || !c.one_sided || c.split_min_bytes == 0 || m->len < c.split_min_bytes ||
      m->len > UINT32_MAX) {
    return;
  }
  auto mr = via->register_memory(std::span<std::byte>(const_cast<std::byte*>(r->send_buf), m->len),
                                 transport::Access::kRemoteRead);
  if (!mr.is_ok() || mr->rkey == 0) return;
  r->place_t = via;  // dropped at finish
  r->place_mr = *mr;
  r->split_local = Code::kOk;
  // Published with the request's other fields by send_request.
  r->split.store(split_word(gen, kSplitSend, 2), std::memory_order_release);
  m->src_addr = reinterpret_cast<uintptr_t>(r->send_buf);
  m->src_rkey = mr->rkey;
}

// The sender's write (or its MsgData) went with status `s`: its part ends.
// Until the receiver's MsgPulled the send stays PLACING: the receiver may be
// reading the buffer, so neither a timeout nor anything else hands it back
// to the caller, but the peer's loss fails it.
void Engine::end_split_send(Request* r, uint32_t gen, Status s) {
  r->split_local = s.code();
  r->word.store(req_word(gen, kStPlacing), std::memory_order_release);
  if (r->end_split_part(gen, kSplitSend) && r->move(gen, kStPlacing, kStClaimed)) {
    finish(r, r->split_local);
  }
}

// MsgPulled: the receiver has read its part of our buffer.
void Engine::serve_pulled(NodeId from, const MsgHeader& h) {
  Request* r = client_.requests.slot(h.req_id);
  const uint32_t gen = req_gen(h.req_id);
  if (r == nullptr || r->peer.load() != from || !r->split_running(gen, kSplitSend)) {
    late_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (r->end_split_part(gen, kSplitSend) && r->move(gen, kStPlacing, kStClaimed)) {
    finish(r, r->split_local);
  }
}

// The receiver: how many leading bytes the sender should place (the rest we
// read); 0 for no split. Half each, the head a whole number of pages.
uint64_t Engine::split_head(NodeId from, uint64_t len, RndvSrc src) const {
  if (src.rkey == 0 || src.addr > UINT64_MAX - len || !peers_.valid(from)) return 0;
  transport::Transport* t = peers_.via(from);
  if (t == nullptr) return 0;
  const transport::Caps& c = t->caps();
  if (!c.one_sided || c.split_min_bytes == 0 || len < c.split_min_bytes) return 0;
  return (len / 2) & ~uint64_t{4095};
}

// The receiver's part: reads [head, len) of the sender's buffer into `dst`
// (the receive's, taken before the pull went), tells the sender, and ends
// the part. A failed read fails the receive once the sender's answer is in.
void Engine::read_split_tail(Request* r, ReqId id, NodeId from, uint64_t sender_req, std::byte* dst,
                             uint64_t len, uint64_t head, RndvSrc src) {
  EndpointRef ep;
  Status s = endpoint(from, default_deadline(), &ep);
  if (s.is_ok()) {
    WorkRequest wr;
    wr.op = transport::Op::kRead;
    wr.num_sge = 1;
    wr.sge[0] = {dst + head, static_cast<uint32_t>(len - head), 0};
    wr.remote = {src.addr + head, src.rkey};
    auto p = ep->post(std::span<const WorkRequest>(&wr, 1));
    s = !p ? p.status() : *p == 1 ? Status::ok() : Status(Code::kNoResource);
    if (s.is_ok()) count_tx(from, std::span<const WorkRequest>(&wr, 1));
  }
  if (s.is_ok()) {
    split_recvs_.fetch_add(1, std::memory_order_relaxed);  // one per large message
  } else {
    LT_DEBUG("split read from node %u: %s", from, s.text());
  }
  MsgHeader done = make_header(MsgOp::kMsgPulled, sender_req);
  (void)send(from, &done, sizeof(done), nullptr, 0, default_deadline(), true);
  const uint32_t gen = req_gen(id);
  r->split_local = s.code();
  if (r->end_split_part(gen, kSplitRecv) && r->move(gen, kStPlacing, kStClaimed)) {
    end_split_recv(r, id);
  }
}

// The sender's answer to a split receive (claimed by complete()): its
// outcome is kept, and the receive completes only if our read is done too.
// False: not a split (complete() goes on as usual).
bool Engine::split_reply(Request* r, ReqId id, NodeId from, MsgOp op, Status s,
                         std::span<const std::byte> b) {
  const uint32_t gen = req_gen(id);
  if (!r->split_running(gen, kSplitRecv)) return false;
  r->split_withdrawn = op == MsgOp::kMsgData && !s.is_ok();
  if (!r->split_withdrawn) {
    r->split_remote = (s.is_ok() ? complete_recv(r, from, op, b) : s).code();  // msg/rndv.cc
  }
  r->word.store(req_word(gen, kStPlacing), std::memory_order_release);
  if (r->end_split_part(gen, kSplitRecv) && r->move(gen, kStPlacing, kStClaimed)) {
    end_split_recv(r, id);
  }
  return true;
}

// Both parts of a split receive are done (the caller claimed it): complete
// it, or, if the sender withdrew the message, wait for the next one.
void Engine::end_split_recv(Request* r, ReqId id) {
  if (r->split_withdrawn) {
    drop_placement(r);
    r->word.store(req_word(req_gen(id), kStPending), std::memory_order_release);
    match_recv(r, id);
    return;
  }
  finish(r, r->split_remote != Code::kOk ? r->split_remote : r->split_local);
}

}  // namespace lt::proto
