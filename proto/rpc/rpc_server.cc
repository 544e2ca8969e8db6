// The server's side of RPC: handlers registered per function id (LT_regRPC)
// run on the progress token holder (no lock, no reference count on that
// path) or on the worker pool; a function with a server-loop queue instead
// hands the request to rpc_loop.cc.
#include "proto/engine.h"

namespace lt::proto {

Status Engine::register_rpc(uint32_t func_id, RpcHandler h) {
  return client_.rpcs.add_handler(func_id, std::move(h));
}

// The reply scratch of the progress token holder, made on first use (not
// zeroed: its pages stay untouched until a reply needs them).
std::span<std::byte> Engine::rpc_scratch() {
  if (!rpc_out_) {
    rpc_out_cap_ = max_payload_ - sizeof(MsgHeader);
    rpc_out_.reset(new std::byte[rpc_out_cap_]);
  }
  return {rpc_out_.get(), rpc_out_cap_};
}

void Engine::run_rpc(NodeId from, uint64_t caller_req, const RpcHandler& fn,
                     std::span<const std::byte> in, std::span<std::byte> out, int ring_slot) {
  size_t n = 0;
  Status s = fn(from, in, out, &n);
  if (s.is_ok() && n > out.size()) s = Code::kInternal;
  MsgHeader rh = make_header(MsgOp::kRpcReply, caller_req, s.code());
  if (reply_by_ring(from, ring_slot, rh, s.is_ok() ? out.data() : nullptr, s.is_ok() ? n : 0)) {
    return;
  }
  (void)send(from, &rh, sizeof(rh), s.is_ok() ? out.data() : nullptr, s.is_ok() ? n : 0,
             default_deadline(), true, false, true);
}

void Engine::serve_rpc(NodeId from, const MsgHeader& h, std::span<const std::byte> b,
                       int ring_slot) {
  auto q = load<RpcReq>(b);
  auto in = b.subspan(sizeof(RpcReq));
  // The config, not the pool: join() starts the pool while the progress
  // thread may already serve.
  if (config_.engine.rpc_workers == 0) {
    if (const RpcHandler* f = client_.rpcs.fast(q.func); f != nullptr) {
      return run_rpc(from, h.req_id, *f, in, rpc_scratch(), ring_slot);
    }
  } else if (std::shared_ptr<RpcHandler> fn = client_.rpcs.handler(q.func); fn) {
    rpc_workers_.push(
        {from, h.req_id, std::move(fn), std::vector<std::byte>(in.begin(), in.end())});
    return;
  }
  RpcQueue* queue = client_.rpcs.queue(q.func);
  if (queue == nullptr) {
    MsgHeader rh = make_header(MsgOp::kRpcReply, h.req_id, Code::kNoHandler);
    (void)send(from, &rh, sizeof(rh), nullptr, 0, default_deadline(), true, false, true);
    return;
  }
  queue_rpc(queue, from, h.req_id, in);  // rpc_loop.cc
}

}  // namespace lt::proto
