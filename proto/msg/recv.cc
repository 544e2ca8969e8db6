// Receiving messages (LT_recv): receives and arrivals meet in the port
// table (ports.h), FIFO on both sides. An eager message is copied into the
// receive; a staged one is read natively from the sender's stage; a
// rendezvous one is pulled (rndv.cc).
#include <cstring>

#include "common/small_copy.h"
#include "common/trace_points.h"
#include "proto/engine.h"

namespace lt::proto {

using transport::WorkRequest;

Status Engine::fill_recv(Request* r, NodeId from, std::span<const std::byte> data, bool set_src) {
  *r->rpc_len = data.size();
  if (set_src) *r->msg_src = from;
  if (data.size() > r->out_len) return Code::kTruncated;
  if (!data.empty()) copy_small(r->out, data.data(), data.size());
  return Status::ok();
}

Result<ReqId> Engine::recv_async(uint32_t port, void* buf, size_t cap, NodeId* src, size_t* len) {
  LT_RETURN_IF_ERROR(usable());
  if (src == nullptr || len == nullptr || (buf == nullptr && cap != 0)) return Code::kInvalidArg;
  if (take_waiting(port, buf, cap, src, len)) return kDoneReqId;
  ReqId id = 0;
  auto r = receive_request(ReqKind::kRecv, port, buf, cap, src, len, &id);
  if (!r) return r.status();
  match_recv(*r, id);
  return id;
}

// A receive that finds an eager message waiting on its port, and room for
// it, takes it at the call: no request slot, no completion, no wait (a
// streaming receiver that fell behind, a server taking a burst). With QoS
// classes on, receives pass their class's gate as requests, so they are
// counted as before.
//
// A message kept inline is copied out where it lies, under the port's lock
// (at most MsgBytes::kInline bytes); a larger one is moved out first and
// copied after the lock.
bool Engine::take_waiting(uint32_t port, void* buf, size_t cap, NodeId* src, size_t* len) {
  if (!client_.ports.any_waiting() || sched_.enabled()) return false;
  Unexpected u;
  NodeId from = 0;
  bool credit_due = false, in_place = false;
  {
    std::lock_guard<SpinLock> g(client_.ports.mutex());
    Port& p = client_.ports.get_locked(port);
    if (p.unexpected.empty()) return false;
    const Unexpected& f = p.unexpected.front();
    if (f.rts || f.len > cap) return false;  // a pull, or a truncation: the request path
    from = f.src;
    credit_due = credits_.count_consumed(from, from == self() || f.credit_now);
    in_place = f.len <= MsgBytes::kInline;
    if (in_place) {
      if (f.len != 0) copy_small(buf, f.data.view().data(), f.len);
      *len = f.len;
      client_.ports.drop_front_locked(p);
    } else {
      u = client_.ports.take_locked(p);
    }
  }
  if (!in_place) {
    std::span<const std::byte> data = u.data.view();
    copy_small(buf, data.data(), data.size());
    *len = data.size();
  }
  *src = from;
  if (credit_due) send_credit(from);
  return true;
}

Result<Request*> Engine::receive_request(ReqKind kind, uint32_t port, void* buf, size_t cap,
                                         NodeId* src, size_t* len, ReqId* id) {
  auto r = alloc_request(kind, 0, id);
  if (!r) return r;
  Request* req = *r;
  req->out = static_cast<std::byte*>(buf);
  req->out_len = cap;
  req->rpc_len = len;
  req->msg_src = src;
  req->msg_port = port;
  return req;
}

// Matches a pending receive with the oldest message waiting on its port, or
// queues it. An eager message is copied in at once; a rendezvous one is
// pulled from its sender (the receive then waits on that node).
void Engine::match_recv(Request* req, ReqId id) {
  Unexpected u;
  bool credit_due = false;
  {
    std::lock_guard<SpinLock> g(client_.ports.mutex());
    Port* p = &client_.ports.get_locked(req->msg_port);
    if (p->unexpected.empty()) {
      p->posted.push_back({id, req});  // its peer is 0 from receive_request
      return;
    }
    const Unexpected& f = p->unexpected.front();
    // Claim before taking the message, so a racing cancel cannot lose it. A
    // receive that pulls its message becomes PLACING: it cannot be withdrawn
    // until the data is in (or the sender is lost), since the pull has
    // consumed the sender's message. Its peer is set first, so a peer loss
    // finds it.
    const bool pulls = f.rts && f.stage_rkey == 0;
    if (pulls) req->peer.store(f.src);
    if (!req->move(req_gen(id), kStPending, pulls ? kStPlacing : kStClaimed)) return;
    u = client_.ports.take_locked(*p);
    if (!u.rts) credit_due = credits_.count_consumed(u.src, u.src == self() || u.credit_now);
  }
  if (!u.rts) {
    deliver_eager(req, u.src, u.data.view());
    if (credit_due) send_credit(u.src);
    return;
  }
  if (u.stage_rkey != 0) {
    return deliver_staged(req, u.src, u.len, u.stage_rkey, u.stage_off, u.credit_now);
  }
  start_pull(req, id, u.src, u.sender_req, u.len, u.src_ref);
}

// Copies an eager message into a claimed receive and completes it.
void Engine::deliver_eager(Request* r, NodeId from, std::span<const std::byte> data) {
  finish(r, fill_recv(r, from, data));
  LT_TRACE_POINT('f');
}

// Completes a claimed receive with a message staged at its sender: read it
// natively into the receive's buffer, then let the sender free it.
void Engine::deliver_staged(Request* r, NodeId from, uint64_t len, uint64_t rkey, uint64_t off,
                            bool credit_now) {
  Status s;
  *r->rpc_len = len;
  *r->msg_src = from;
  if (len > r->out_len) {
    s = Code::kTruncated;
  } else if (len > 0) {
    EndpointRef ep;
    s = endpoint(from, default_deadline(), &ep);
    transport::Transport* via = peers_.via(from);
    if (s.is_ok() && (len > UINT32_MAX || via == nullptr || !via->caps().one_sided)) {
      s = Code::kMalformed;
    }
    if (s.is_ok()) {
      WorkRequest wr;
      wr.op = transport::Op::kRead;
      wr.num_sge = 1;
      wr.sge[0] = {r->out, static_cast<uint32_t>(len), 0};
      wr.remote = {off, rkey};
      auto p = ep->post(std::span<const WorkRequest>(&wr, 1));
      s = !p ? p.status() : *p == 1 ? Status::ok() : Status(Code::kNoResource);
      if (s.is_ok()) count_tx(from, std::span<const WorkRequest>(&wr, 1));
    }
  }
  finish(r, s);
  MsgStaged done{make_header(MsgOp::kMsgStaged, 0), off};
  (void)send(from, &done, sizeof(done), nullptr, 0, default_deadline(), true);
  credit_consumed(from, credit_now);
}

void Engine::serve_msg(NodeId from, const MsgHeader& h, std::span<const std::byte> b) {
  switch (static_cast<MsgOp>(h.op)) {
    case MsgOp::kMsgEager:
    case MsgOp::kMsgRts:
      return arrive(from, h, b);
    case MsgOp::kMsgPull:
      return serve_pull(from, h, b);  // rndv.cc
    case MsgOp::kMsgCredit:
      return credits_.apply_msg(from, load<MsgCredit>(b).count);
    case MsgOp::kMsgStaged:
      return stage_.free(from, load<MsgStaged>(b).stage_off);
    case MsgOp::kMsgPulled:
      return serve_pulled(from, h);  // rndv_split.cc
    default:
      malformed_.fetch_add(1, std::memory_order_relaxed);
  }
}

// A message (eager, or a rendezvous request) arrived: to the oldest posted
// receive of its port, or into the port's unexpected store.
void Engine::arrive(NodeId from, const MsgHeader& h, std::span<const std::byte> b) {
  LT_TRACE_POINT('v');
  const bool rts = h.op == static_cast<uint8_t>(MsgOp::kMsgRts);
  const bool credit_now = (h.flags & kFlagCreditNow) != 0;
  uint32_t port = rts ? load<MsgRts>(b).port : load<MsgEager>(b).port;
  credits_.apply_msg(from, rts ? load<MsgRts>(b).credits : load<MsgEager>(b).credits);
  Request* r = nullptr;
  std::unique_lock<SpinLock> g(client_.ports.mutex());
  Port& p = client_.ports.get_locked(port);
  if (!claim_posted(p.posted, &r)) {
    Unexpected& u = client_.ports.keep_new_locked(p);
    u.src = from;
    u.rts = rts;
    u.credit_now = credit_now;
    if (rts) {
      auto m = load<MsgRts>(b);
      u.len = m.len;
      u.sender_req = h.req_id;
      u.stage_rkey = m.stage_rkey;
      u.stage_off = m.stage_off;
      u.src_ref = {m.src_addr, m.src_rkey};
    } else {
      auto data = b.subspan(sizeof(MsgEager));
      u.len = data.size();
      u.data.assign(data, client_.ports.byte_cache());
    }
    return;
  }
  if (!rts) {
    bool credit_due = credits_.count_consumed(from, from == self() || credit_now);
    g.unlock();
    deliver_eager(r, from, b.subspan(sizeof(MsgEager)));
    if (credit_due) send_credit(from);
    return;
  }
  g.unlock();
  auto m = load<MsgRts>(b);
  if (m.stage_rkey != 0) {
    return deliver_staged(r, from, m.len, m.stage_rkey, m.stage_off, credit_now);
  }
  pull_matched(r, from, h.req_id, m.len, {m.src_addr, m.src_rkey});  // rndv.cc
}

}  // namespace lt::proto
