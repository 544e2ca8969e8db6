// LITE's server loop: requests for a function registered with a queue wait
// there until a thread takes one (LT_recvRPC) and answers it by token
// (LT_replyRPC). Requests and receives are matched FIFO under the queue's
// own lock.
#include <cstring>

#include "proto/engine.h"

namespace lt::proto {

Status Engine::register_rpc_queue(uint32_t func_id) { return client_.rpcs.add_queue(func_id); }

// A request arrived for a server-loop function: to the oldest receive that
// can hold it (too small ones fail with the needed size), else it waits.
void Engine::queue_rpc(RpcQueue* queue, NodeId from, uint64_t caller_req,
                       std::span<const std::byte> in) {
  Request* r = nullptr;
  {
    std::lock_guard<std::mutex> g(queue->mu);
    while (r == nullptr && claim_posted(queue->posted, &r)) {
      if (in.size() > r->out_len) {
        // Too small: that receive fails with the needed size; the request
        // goes to the next receive, or waits.
        *r->rpc_len = in.size();
        *r->msg_src = from;
        finish(r, Code::kTruncated);
        r = nullptr;
      }
    }
    if (r == nullptr) {
      QueuedRpc w;
      w.src = from;
      w.caller_req = caller_req;
      w.data.assign(in, client_.ports.byte_cache());
      queue->keep(std::move(w));
      return;
    }
  }
  deliver_rpc(r, from, caller_req, in);
}

// Completes a claimed server-loop receive with one request: kTruncated
// (request left queued by the caller) or the bytes and a reply token.
void Engine::deliver_rpc(Request* r, NodeId from, uint64_t caller_req,
                         std::span<const std::byte> in) {
  Status s = fill_recv(r, from, in);
  if (s.is_ok()) *r->rpc_token = client_.reply_tokens.add({from, caller_req});
  finish(r, s);
}

Result<ReqId> Engine::recv_rpc_async(uint32_t func_id, void* buf, size_t cap, NodeId* src,
                                     size_t* len, uint64_t* token) {
  LT_RETURN_IF_ERROR(usable());
  if (src == nullptr || len == nullptr || token == nullptr || (buf == nullptr && cap != 0)) {
    return Code::kInvalidArg;
  }
  RpcQueue* queue = client_.rpcs.queue(func_id);
  if (queue == nullptr) return Code::kInvalidArg;
  if (take_waiting_call(queue, buf, cap, src, len, token)) return kDoneReqId;
  ReqId id = 0;
  // The function id stands for the port: its queue, for unpost.
  auto r = receive_request(ReqKind::kRpcRecv, func_id, buf, cap, src, len, &id);
  if (!r) return r.status();
  Request* req = *r;
  req->rpc_token = token;
  QueuedRpc w;
  {
    std::lock_guard<std::mutex> g(queue->mu);
    if (!queue->has_waiting()) {
      queue->posted.push_back({id, req});
      return id;
    }
    req->move(req_gen(id), kStPending, kStClaimed);
    if (const QueuedRpc& f = queue->first_waiting(); f.data.view().size() > cap) {
      *len = f.data.view().size();
      *src = f.src;
      finish(req, Code::kTruncated);  // the request stays first in line
      return id;
    }
    w = queue->take();
  }
  deliver_rpc(req, w.src, w.caller_req, w.data.view());
  return id;
}

// A server-loop receive that finds a request waiting, with room for it,
// takes it at the call: no request slot, completion or wait, as a message
// receive does (recv.cc), and with QoS classes off for the same reason.
bool Engine::take_waiting_call(RpcQueue* queue, void* buf, size_t cap, NodeId* src, size_t* len,
                               uint64_t* token) {
  if (!queue->may_have_waiting() || sched_.enabled()) return false;
  QueuedRpc w;
  {
    std::lock_guard<std::mutex> g(queue->mu);
    if (!queue->has_waiting() || queue->first_waiting().data.view().size() > cap) return false;
    w = queue->take();
  }
  std::span<const std::byte> in = w.data.view();
  if (!in.empty()) std::memcpy(buf, in.data(), in.size());
  *src = w.src;
  *len = in.size();
  *token = client_.reply_tokens.add({w.src, w.caller_req});
  return true;
}

Status Engine::reply_rpc(uint64_t token, const void* out, size_t len, Status s) {
  LT_RETURN_IF_ERROR(usable());
  if ((out == nullptr && len != 0) || len > max_payload_ - sizeof(MsgHeader)) {
    return Code::kInvalidArg;
  }
  ReplyTokens::Caller c;
  if (!client_.reply_tokens.take(token, &c)) return Code::kBadHandle;
  if (c.src == self()) {
    reply_self(c.caller_req, out, len, s);
    return Status::ok();
  }
  MsgHeader rh = make_header(MsgOp::kRpcReply, c.caller_req, s.code());
  return send(c.src, &rh, sizeof(rh), s.is_ok() ? out : nullptr, s.is_ok() ? len : 0,
              default_deadline(), true, false, true);
}

// Takes a cancelled receive (a message one, or a server loop's RPC one) out
// of its posted FIFO, so that receives timing out on a quiet port or
// function do not pile up.
void Engine::unpost(Request* r, ReqId id) {
  if (r->kind == ReqKind::kRecv) return client_.ports.unpost(r->msg_port, id);
  RpcQueue* queue = client_.rpcs.queue(r->msg_port);
  if (queue == nullptr) return;
  std::lock_guard<std::mutex> g(queue->mu);
  erase_posted(queue->posted, id);
}

}  // namespace lt::proto
