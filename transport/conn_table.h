// The connections of a transport that keeps one connection per peer (tcp and
// shm share it, so the rules for a connection's life are written once):
//  - a connection is in the table from accept or dial until it closes;
//  - an accepted one serves nobody until its hello names its node; when both
//    sides dial at once, the first identified connection serves the node and
//    a redundant one that closes is not the peer going away;
//  - a closing connection stays alive until the poller's next release_rx
//    (its receive buffers may be lent out);
//  - the peer-loss events the poller could not hand out wait for its next poll.
//
// Thread contract: connect() runs on user threads, everything else on the one
// poller. mu_ guards the two maps; the snapshot, the closed list and the
// pending events are the poller's alone. `Conn` has `std::atomic<bool> dead_`
// and `uint64_t created_ns_`.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "transport/transport.h"

namespace lt::transport {

/// The Endpoint of a connection-per-peer transport: it keeps its connection
/// alive (a closed one answers kPeerDown) and posts on it.
template <typename Conn>
class ConnEndpoint final : public Endpoint {
 public:
  explicit ConnEndpoint(std::shared_ptr<Conn> c) : c_(std::move(c)) {}
  Result<size_t> post(std::span<const WorkRequest> wrs) override { return c_->post(wrs); }
  bool post_short(const void* hdr, size_t hlen, const void* data, size_t dlen) override {
    if constexpr (requires(Conn & c) { c.post_short(hdr, hlen, data, dlen); }) {
      return c_->post_short(hdr, hlen, data, dlen);
    } else {
      return Endpoint::post_short(hdr, hlen, data, dlen);
    }
  }
  bool post_express(const void* hdr, size_t hlen, const void* data, size_t dlen) override {
    if constexpr (requires(Conn & c) { c.post_express(hdr, hlen, data, dlen); }) {
      return c_->post_express(hdr, hlen, data, dlen);
    } else {
      return post_short(hdr, hlen, data, dlen);
    }
  }
  NodeId peer() const override { return c_->peer_.load(std::memory_order_relaxed); }
  bool alive() const override { return !c_->dead_.load(std::memory_order_acquire); }
  void flush() override {
    if constexpr (requires(Conn & c) { c.flush_cork(); }) c_->flush_cork();
  }
  std::shared_ptr<const MappedRegion> view(uint64_t rkey) override {
    if constexpr (requires(Conn & c) { c.view(rkey); }) {
      return c_->view(rkey);
    } else {
      return Endpoint::view(rkey);
    }
  }

 private:
  std::shared_ptr<Conn> c_;
};

/// Writes a kRecv completion into *c field by field. A poller's hot path
/// uses it rather than assigning recv_completion()'s value: the compiler
/// builds that value on the stack with narrow stores and copies it with wide
/// loads, which wait for the narrow stores (a failed store forward, about a
/// quarter of shm's receive loop).
inline void fill_recv_completion(Completion* c, NodeId peer, const std::byte* rx, uint32_t len,
                                 uint32_t imm, CpuHint src_cpu = kCpuUnknown) {
  c->wr_id = 0;
  c->status = Status::ok();
  c->kind = CqKind::kRecv;
  c->peer = peer;
  c->len = len;
  c->imm = imm;
  c->rx = rx;
  c->src_cpu = src_cpu;
}

/// A kRecv completion of `len` bytes at `rx` (lent until release_rx) from `peer`.
inline Completion recv_completion(NodeId peer, const std::byte* rx, uint32_t len, uint32_t imm) {
  Completion c;
  c.kind = CqKind::kRecv;
  c.peer = peer;
  c.len = len;
  c.imm = imm;
  c.rx = rx;
  return c;
}

template <typename Conn>
class ConnTable {
 public:
  using Ptr = std::shared_ptr<Conn>;

  /// The connection that serves `node`, while it is alive.
  Ptr serving(NodeId node) {
    std::lock_guard<std::mutex> g(mu_);
    return serving_locked(node);
  }

  /// An accepted connection. `setup()` (its epoll registration) runs under
  /// the lock first; false: it is not added.
  template <typename Setup>
  bool add_accepted(Ptr c, Setup&& setup) {
    std::lock_guard<std::mutex> g(mu_);
    if (!setup()) return false;
    insert_locked(std::move(c));
    return true;
  }

  /// A connection this side dialed to `node`: it serves the node, unless a
  /// live one does by now (another thread's dial, or the peer's), which is
  /// returned instead. `setup()` (-> Status) runs under the lock first; its
  /// error is returned (or the serving one, if there is one). With
  /// `keep_duplicate` a `c` that does not serve is still added, read and
  /// kept until it closes, rather than dropped: its hello went out, and the
  /// peer may already serve on it. (Two nodes dialing each other at once
  /// each identify the other's dial first; dropping their own would close
  /// the connection the other serves on, and both would lose the pair.)
  template <typename Setup>
  Result<Ptr> add_dialed(NodeId node, Ptr c, Setup&& setup, bool keep_duplicate = false) {
    std::lock_guard<std::mutex> g(mu_);
    Ptr first = serving_locked(node);
    if (first && !keep_duplicate) return first;
    if (Status s = setup(); !s.is_ok()) {
      if (first) return first;
      return s;
    }
    insert_locked(c);
    if (first) return first;
    peers_[node] = c;
    return c;
  }

  /// `c` said hello as `node`: it serves the node unless a live one does.
  void identify(Conn* c, NodeId node) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = peers_.find(node);
    if (it == peers_.end() || it->second->dead_.load()) peers_[node] = conns_[c];
  }

  /// `c` (of `node`, kNoNode if unidentified) is closing: out of the table,
  /// alive until release_closed(). True when it was the one serving `node`,
  /// so its closing is the peer lost.
  bool remove(Conn* c, NodeId node) {
    bool served = false;
    std::lock_guard<std::mutex> g(mu_);
    auto it = peers_.find(node);
    if (it != peers_.end() && it->second.get() == c) {
      peers_.erase(it);
      served = true;
    }
    auto ci = conns_.find(c);
    if (ci != conns_.end()) {
      closed_.push_back(std::move(ci->second));
      conns_.erase(ci);
      changed_locked();
    }
    return served;
  }

  /// The connections not identified (by `identified(conn)`) within
  /// timeout_ns of being made: strangers must not hold sockets for ever.
  template <typename Identified>
  std::vector<Conn*> stale(uint64_t now, uint64_t timeout_ns, Identified&& identified) {
    std::vector<Conn*> out;
    std::lock_guard<std::mutex> g(mu_);
    for (auto& [p, c] : conns_) {
      if (!identified(*c) && now > c->created_ns_ + timeout_ns) out.push_back(p);
    }
    return out;
  }

  /// A kPeerLost for `node`: into out[*n] while there is room, else kept
  /// for the next poll (take_pending).
  void report_lost(NodeId node, std::span<Completion> out, size_t* n) {
    Completion lost;
    lost.kind = CqKind::kPeerLost;
    lost.peer = node;
    lost.status = Code::kPeerDown;
    if (*n < out.size()) {
      out[(*n)++] = lost;
    } else {
      pending_.push_back(lost);
    }
  }
  /// Hands out the kept events after out[0, n); the new n.
  size_t take_pending(std::span<Completion> out, size_t n) {
    while (!pending_.empty() && n < out.size()) {
      out[n++] = pending_.front();
      pending_.pop_front();
    }
    return n;
  }
  bool has_pending() const { return !pending_.empty(); }

  /// The poller's copy of the connection set, made again when the set
  /// changed since (changed()): no lock on a pass that finds none.
  bool changed() const { return gen_.load(std::memory_order_acquire) != snapshot_gen_; }
  const std::vector<Ptr>& refresh() {
    std::lock_guard<std::mutex> g(mu_);
    snapshot_gen_ = gen_.load(std::memory_order_acquire);
    snapshot_.clear();
    for (auto& [p, c] : conns_) snapshot_.push_back(c);
    return snapshot_;
  }
  const std::vector<Ptr>& snapshot() const { return snapshot_; }
  /// Connections in the table now, without the lock.
  size_t size() const { return size_.load(std::memory_order_acquire); }

  /// The poller released what it lent: closed connections may go.
  void release_closed() { closed_.clear(); }
  /// Closed connections wait for release_closed() (poller only).
  bool has_closed() const { return !closed_.empty(); }
  /// The transport is going away: every connection is marked dead.
  template <typename F>
  void for_each_locked(F&& f) {
    std::lock_guard<std::mutex> g(mu_);
    for (auto& [p, c] : conns_) f(*c);
  }

 private:
  Ptr serving_locked(NodeId node) {
    auto it = peers_.find(node);
    return it != peers_.end() && !it->second->dead_.load() ? it->second : nullptr;
  }
  void insert_locked(Ptr c) {
    Conn* raw = c.get();
    conns_[raw] = std::move(c);
    changed_locked();
  }
  void changed_locked() {
    size_.store(conns_.size(), std::memory_order_release);
    gen_.fetch_add(1, std::memory_order_release);
  }

  std::mutex mu_;
  std::unordered_map<NodeId, Ptr> peers_;  // the connection serving each node
  std::unordered_map<Conn*, Ptr> conns_;   // every connection, by address
  std::atomic<size_t> size_{0};
  std::atomic<uint64_t> gen_{0};  // bumped under mu_ whenever conns_ changes

  // Poller-only.
  std::vector<Ptr> snapshot_;
  uint64_t snapshot_gen_ = ~uint64_t{0};
  std::vector<Ptr> closed_;         // kept alive until release_closed
  std::deque<Completion> pending_;  // events found while `out` was full
};

}  // namespace lt::transport
