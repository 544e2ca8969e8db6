// The RPC functions this engine serves: a handler per function id (LITE's
// regRPC) or a queue for a server loop (recvRPC/replyRPC). Entries are never
// removed, so a handler pointer or a queue stays valid for the registry's
// life.
//
// Thread contract: registration takes mu_ (exclusive); lookups by a server
// loop take it shared; the progress thread's per-call lookup (fast()) takes
// no lock and no reference: function id >> 8 picks a page of 256 slots,
// filled at registration.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "common/siphash.h"
#include "common/status.h"
#include "proto/msg/ports.h"

namespace lt::proto {

/// An RPC handler: reads `in`, writes at most out.size() bytes to `out`,
/// sets *out_len, returns the status the caller gets.
using RpcHandler = std::function<Status(NodeId src, std::span<const std::byte> in,
                                        std::span<std::byte> out, size_t* out_len)>;

/// Largest function id (ids travel in 16 bits).
inline constexpr uint32_t kMaxRpcFunc = 0xffff;

/// An RPC request waiting for a server-loop receive (LT_recvRPC).
struct QueuedRpc {
  NodeId src = 0;
  uint64_t caller_req = 0;
  MsgBytes data;  // inline when small: queueing a call allocates nothing
};

/// Per server-loop function: requests waiting for receives and receives
/// waiting for requests; at most one of the two is non-empty. Its own lock
/// guards both (held for queue operations only).
struct RpcQueue {
  std::mutex mu;
  Fifo<PostedRecv> posted;

  /// Requests waiting, through these only (they keep the count). Caller holds mu.
  bool has_waiting() const { return !waiting_.empty(); }
  const QueuedRpc& first_waiting() const { return waiting_.front(); }
  void keep(QueuedRpc&& w) {
    waiting_.push_back(std::move(w));
    count(1);
  }
  QueuedRpc take() {
    QueuedRpc w = std::move(waiting_.front());
    waiting_.pop_front();
    count(-1);
    return w;
  }
  size_t drop_from(NodeId src) {
    const size_t n = waiting_.erase_if([src](const QueuedRpc& r) { return r.src == src; });
    count(-static_cast<int64_t>(n));
    return n;
  }
  /// Whether requests may be waiting, read without mu: a receive takes the
  /// lock to look for one only then.
  bool may_have_waiting() const { return queued_.load(std::memory_order_relaxed) != 0; }

 private:
  void count(int64_t by) {  // only under mu: a plain store
    queued_.store(queued_.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
  }
  Fifo<QueuedRpc> waiting_;
  // On a line of its own: written only when requests queue up, so a receive
  // that reads it (each LT_recvRPC) does not miss on the lock's line.
  alignas(64) std::atomic<uint64_t> queued_{0};
};

class RpcRegistry {
 public:
  RpcRegistry() = default;
  RpcRegistry(const RpcRegistry&) = delete;
  RpcRegistry& operator=(const RpcRegistry&) = delete;

  /// kInvalidArg for an id above kMaxRpcFunc or an empty handler; kExists
  /// when the id has a handler or a queue.
  Status add_handler(uint32_t func, RpcHandler h);
  /// A server-loop queue for `func`; errors as add_handler.
  Status add_queue(uint32_t func);

  /// The handler of `func` without a lock (null: none, or a queue).
  const RpcHandler* fast(uint32_t func) const {
    if (func > kMaxRpcFunc) return nullptr;
    Slot* page = pages_[func >> 8].load(std::memory_order_acquire);
    return page == nullptr ? nullptr : page[func & 0xff].load(std::memory_order_acquire);
  }
  /// The handler of `func`, shared (it may be run on another thread), or
  /// null.
  std::shared_ptr<RpcHandler> handler(uint32_t func) const;
  /// The queue of `func`, or null.
  RpcQueue* queue(uint32_t func) const;
  /// Drops the server-loop requests of caller `src` that no thread took yet
  /// (it is gone: no reply can reach it); returns how many.
  size_t drop_waiting_from(NodeId src);

 private:
  using Slot = std::atomic<const RpcHandler*>;
  mutable std::shared_mutex mu_;
  std::unordered_map<uint32_t, std::shared_ptr<RpcHandler>> handlers_;
  std::unordered_map<uint32_t, std::unique_ptr<RpcQueue>> queues_;
  std::atomic<Slot*> pages_[256] = {};
  std::vector<std::unique_ptr<Slot[]>> page_store_;  // under mu_
};

/// Reply tokens of a server loop: a request taken by LT_recvRPC is answered
/// by LT_replyRPC naming its token, once. Tokens are a count XORed with a
/// random salt, so another engine's token (or a made-up one) is unknown
/// here. Thread-safe.
class ReplyTokens {
 public:
  struct Caller {
    NodeId src = 0;
    uint64_t caller_req = 0;
  };
  uint64_t add(Caller c) {
    std::lock_guard<std::mutex> g(mu_);
    uint64_t t = next_++ ^ salt_;
    if (spare_.empty()) {
      pending_[t] = c;
    } else {  // a node of an answered call: no allocation per call
      auto node = std::move(spare_.back());
      spare_.pop_back();
      node.key() = t;
      node.mapped() = c;
      pending_.insert(std::move(node));
    }
    return t;
  }
  /// The caller `token` names, forgotten; false for an unknown or used token.
  bool take(uint64_t token, Caller* out) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = pending_.find(token);
    if (it == pending_.end()) return false;
    *out = it->second;
    auto node = pending_.extract(it);
    if (spare_.size() < kSpare) spare_.push_back(std::move(node));
    return true;
  }

 private:
  using Map = std::unordered_map<uint64_t, Caller>;
  static constexpr size_t kSpare = 64;  // map nodes kept for reuse
  std::mutex mu_;
  Map pending_;
  std::vector<Map::node_type> spare_;
  uint64_t next_ = 1;
  const uint64_t salt_ = random_u64();
};

}  // namespace lt::proto
