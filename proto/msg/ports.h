// Message ports: per port, the messages that arrived before a receive was
// posted (unexpected) and the receives waiting for messages (posted); at most
// one of the two queues is non-empty. Matching is FIFO on both sides, which
// with one connection per peer keeps order per (source, port).
//
// Thread contract: PortTable owns its lock (a SpinLock: sections are queue
// operations and an eager message's copy into the store, never a system
// call). get_locked() and the queues of the Port it returns are used with
// lock() held; the Port is used before another lookup (making a port may
// drop empty ones).
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "common/spinlock.h"
#include "proto/msg/fifo.h"
#include "proto/msg/msg_bytes.h"
#include "proto/request.h"

namespace lt::proto {

/// A receive waiting in a FIFO (a port's, or a server loop's function's).
struct PostedRecv {
  ReqId id;
  Request* r;
};

/// Takes the oldest posted receive that is still PENDING, now CLAIMED (a
/// cancelled one is skipped and dropped). False when none is left.
inline bool claim_posted(Fifo<PostedRecv>& posted, Request** out) {
  while (!posted.empty()) {
    PostedRecv pr = posted.front();
    posted.pop_front();
    if (pr.r->move(req_gen(pr.id), kStPending, kStClaimed)) {
      *out = pr.r;
      return true;
    }
  }
  return false;
}

/// Takes receive `id` out of a FIFO if it is still there (it may have been
/// skipped already).
inline void erase_posted(Fifo<PostedRecv>& posted, ReqId id) {
  posted.erase_if([id](const PostedRecv& pr) { return pr.id == id; });
}

/// A message that arrived before a receive was posted: its bytes (eager), or
/// the sender's rendezvous request (rts).
struct Unexpected {
  NodeId src = 0;
  bool rts = false;
  bool credit_now = false;  // its sender asked for its credit at once (kFlagCreditNow)
  uint64_t len = 0;
  uint64_t sender_req = 0;
  uint64_t stage_rkey = 0, stage_off = 0;  // a staged rendezvous message
  RndvSrc src_ref;                         // a rendezvous message the receiver may read in part
  MsgBytes data;
};

struct Port {
  Fifo<Unexpected> unexpected;
  Fifo<PostedRecv> posted;  // a ring, not a deque: a stream of receives allocates nothing
  bool empty() const { return unexpected.empty() && posted.empty(); }
};

class PortTable {
 public:
  /// Making a port when `sweep_at` exist first drops the empty ones (then
  /// the mark doubles past what is left), so ports used once do not pile up.
  static constexpr size_t kSweepAt = 1024;
  explicit PortTable(size_t sweep_at = kSweepAt) : base_sweep_at_(sweep_at), sweep_at_(sweep_at) {}
  PortTable(const PortTable&) = delete;
  PortTable& operator=(const PortTable&) = delete;

  SpinLock& mutex() { return mu_; }
  /// Buffers for the bytes of kept messages (outlives every port).
  ByteCache* byte_cache() { return &bytes_; }

  /// The entry of `port`, made on first use. Caller holds mutex(). One
  /// message stream usually uses one port: the last lookup is kept.
  Port& get_locked(uint32_t port) {
    if (last_ != nullptr && last_num_ == port) [[likely]]
      return *last_;
    return find_locked(port);
  }

  /// Keeps a message no receive waited for in `p`'s store, made in its place
  /// (no temporary to move): the caller holds mutex() and fills the returned
  /// entry before it lets go.
  Unexpected& keep_new_locked(Port& p) {
    add_waiting(1);
    return p.unexpected.emplace_back();
  }
  /// Takes the oldest message of `p`'s store (not empty). Caller holds mutex().
  Unexpected take_locked(Port& p) {
    Unexpected u = std::move(p.unexpected.front());
    p.unexpected.pop_front();
    add_waiting(-1);
    return u;
  }
  /// Drops the oldest message of `p`'s store (not empty), once its bytes
  /// were copied out in place. Caller holds mutex().
  void drop_front_locked(Port& p) {
    p.unexpected.pop_front();
    add_waiting(-1);
  }
  /// Whether any port may hold a message: read without the lock, so a
  /// receive looks for a waiting one (and takes the lock) only when there
  /// may be one. A message kept meanwhile is found by the receive's match.
  bool any_waiting() const { return waiting_.load(std::memory_order_relaxed) != 0; }

  /// Takes a cancelled receive out of its port's posted FIFO, so that
  /// receives timing out on a quiet port do not pile up.
  void unpost(uint32_t port, ReqId id) {
    std::lock_guard<SpinLock> g(mu_);
    erase_posted(get_locked(port).posted, id);
  }

  /// Drops every message `src` left unreceived (it is gone: nobody answers a
  /// pull, and its credits died with it); returns how many.
  size_t drop_from(NodeId src) {
    std::lock_guard<SpinLock> g(mu_);
    size_t n = 0;
    for (auto& [num, p] : ports_) {
      n += p->unexpected.erase_if([src](const Unexpected& u) { return u.src == src; });
    }
    add_waiting(-static_cast<int64_t>(n));
    return n;
  }

  /// Ports that exist now (empty ones included until a sweep). Caller holds mutex().
  size_t size_locked() const { return ports_.size(); }

 private:
  // get_locked() past the last port looked up: out of line, so the usual
  // case stays a compare inlined into its callers.
  [[gnu::noinline]] Port& find_locked(uint32_t port) {
    auto it = ports_.find(port);
    if (it == ports_.end()) {
      if (ports_.size() >= sweep_at_) sweep_locked();
      it = ports_.emplace(port, std::make_unique<Port>()).first;
    }
    last_num_ = port;
    last_ = it->second.get();
    return *it->second;
  }

  void sweep_locked() {
    // An empty port holds nothing: it is made again on its next use.
    std::erase_if(ports_, [](const auto& kv) { return kv.second->empty(); });
    last_ = nullptr;
    sweep_at_ = std::max(base_sweep_at_, 2 * ports_.size());
  }

  // Only writer: the holder of mu_ (a plain store, no locked add).
  void add_waiting(int64_t by) {
    waiting_.store(waiting_.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
  }

  ByteCache bytes_;  // before ports_: destroyed after the messages it holds
  SpinLock mu_;
  std::atomic<uint64_t> waiting_{0};  // messages in all unexpected stores
  std::unordered_map<uint32_t, std::unique_ptr<Port>> ports_;
  uint32_t last_num_ = 0;  // the last port looked up, and its entry
  Port* last_ = nullptr;
  const size_t base_sweep_at_;
  size_t sweep_at_;
};

}  // namespace lt::proto
