// The caller's side of LITE-style RPC: LT_RPC and its async form. Credits
// bound the calls outstanding at one server (its ring for us); the reply
// returns one (dispatch.cc) and fills the caller's buffer.
#include "proto/engine.h"

namespace lt::proto {

Result<ReqId> Engine::rpc_async(NodeId node, uint32_t func_id, const void* in, size_t in_len,
                                void* out, size_t out_cap, size_t* out_len) {
  LT_RETURN_IF_ERROR(usable());
  if (func_id > kMaxRpcFunc || out_len == nullptr || (in == nullptr && in_len != 0) ||
      (out == nullptr && out_cap != 0) || in_len > max_payload_ - sizeof(RpcReq)) {
    return Code::kInvalidArg;
  }
  if (!peers_.valid(node)) return Code::kPeerDown;
  if (node == self()) return rpc_self(func_id, in, in_len, out, out_cap, out_len);
  if (!peers_.owns(node)) {
    // First call to a node new in its slot: reaching it claims the slot
    // (and its credits).
    EndpointRef ep;
    LT_RETURN_IF_ERROR(endpoint(node, default_deadline(), &ep));
  }
  int32_t used = credits_.take_rpc(node);
  if (used == Credits::kRpcQuota) {
    sched_.count_quota_refusal();
    return Code::kQuota;
  }
  if (used < 0) return Code::kNoResource;
  ReqId id = 0;
  auto r = alloc_request(ReqKind::kRpc, node, &id, in_len);
  if (!r) {
    credits_.untake_rpc(node);
    return r.status();
  }
  (*r)->out = static_cast<std::byte*>(out);
  (*r)->out_len = out_cap;
  (*r)->rpc_len = out_len;
  RpcReq q{make_header(MsgOp::kRpcReq, id), func_id, static_cast<uint32_t>(used)};
  // Into the server's ring for us where there is one (rpc/rpc_ring.cc).
  bool ask = false;
  if (Status s; rpc_by_ring(*r, id, node, q, in, in_len, &s, &ask)) {
    if (!s.is_ok()) credits_.untake_rpc(node);
    return s.is_ok() ? Result<ReqId>(id) : Result<ReqId>(s);
  }
  // With kRpcCorkDepth calls to this server already outstanding, their
  // replies are on the way and this call queues behind them there anyway:
  // a stream transport may hold it until the next progress pass (which
  // handles those replies, or any wait) and send several calls at once.
  bool more = used >= kRpcCorkDepth;
  Status s = send_request(*r, node, &q, sizeof(q), in, in_len, more, true);
  if (!s.is_ok()) {
    credits_.untake_rpc(node);
    return s;
  }
  if (ask) ask_ring(node);
  return id;
}

// A call to this node. A handler runs here, in the caller's thread; the
// slot first, so a handler that ran is never reported refused. A server-loop
// function's queue takes the request as if a peer had sent it, and its
// answer (reply_rpc) completes the call in place.
Result<ReqId> Engine::rpc_self(uint32_t func_id, const void* in, size_t in_len, void* out,
                               size_t out_cap, size_t* out_len) {
  std::shared_ptr<RpcHandler> fn = client_.rpcs.handler(func_id);
  RpcQueue* queue = fn ? nullptr : client_.rpcs.queue(func_id);
  ReqId id = 0;
  auto r = alloc_request(queue != nullptr ? ReqKind::kRpc : ReqKind::kPlain, self(), &id, in_len);
  if (!r) return r.status();
  const std::span<const std::byte> req(static_cast<const std::byte*>(in), in_len);
  if (queue != nullptr) {
    (*r)->out = static_cast<std::byte*>(out);
    (*r)->out_len = out_cap;
    (*r)->rpc_len = out_len;
    queue_rpc(queue, self(), id, req);
    return id;
  }
  if (!fn) return finish_now(*r, id, Code::kNoHandler);
  size_t n = 0;
  Status s = (*fn)(self(), req, std::span<std::byte>(static_cast<std::byte*>(out), out_cap), &n);
  if (s.is_ok()) *out_len = n;
  return finish_now(*r, id, s);
}

// The answer to a call this node made to its own server loop: no message,
// and no credit was taken. A call that gave up meanwhile is not claimed.
void Engine::reply_self(uint64_t caller_req, const void* out, size_t len, Status s) {
  if (client_.requests.slot(caller_req) == nullptr) return;
  MsgHeader rh = make_header(MsgOp::kRpcReply, caller_req, s.code());
  Request* r = claim_for_reply(self(), rh, false);
  if (r == nullptr) return;
  if (s.is_ok()) s = fill_recv(r, self(), {static_cast<const std::byte*>(out), len}, false);
  finish(r, s);
}

}  // namespace lt::proto
