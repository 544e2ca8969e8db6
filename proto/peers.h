// Per peer node: the endpoint this engine reaches it through (made on first
// use, cached), which transport that is and why, and whether the node is
// down. Endpoints are owned here and never freed before the table: a
// retired one may still be in a caller's hands.
//
// Thread contract: the per-peer fields are atomics read on every post;
// install() is serialized by connect_mutex() (first contact and reconnects,
// the cold path).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "transport/transport.h"

namespace lt::proto {

using transport::NodeId;

class PeerTable {
 public:
  explicit PeerTable(NodeId max_nodes) : max_(max_nodes), slots_(new Slot[max_nodes]) {}

  bool valid(NodeId p) const { return p != 0 && p < max_; }
  /// The cached endpoint to `p` while its connection lives, else null.
  transport::Endpoint* live(NodeId p) const {
    transport::Endpoint* e = slots_[p].ep.load(std::memory_order_acquire);
    return e != nullptr && e->alive() ? e : nullptr;
  }
  /// The transport of `p`'s endpoint (null before the first contact).
  transport::Transport* via(NodeId p) const {
    return slots_[p].via.load(std::memory_order_acquire);
  }
  /// Why that transport (lives as long as the engine's TransportSet).
  const char* why(NodeId p) const { return slots_[p].why.load(std::memory_order_acquire); }
  bool down(NodeId p) const { return slots_[p].down.load(std::memory_order_relaxed); }
  void mark_down(NodeId p) {
    if (valid(p)) slots_[p].down.store(true);
  }
  /// Forgets `p`'s endpoint (its connection broke): the next use reconnects.
  void retire(NodeId p) {
    if (valid(p)) slots_[p].ep.store(nullptr, std::memory_order_release);
  }

  std::mutex& connect_mutex() { return connect_mu_; }
  /// Caches `ep` (taking ownership) as `p`'s endpoint. Caller holds connect_mutex().
  transport::Endpoint* install(NodeId p, std::unique_ptr<transport::Endpoint> ep,
                               transport::Transport* via, const char* why) {
    transport::Endpoint* e = ep.get();
    owned_.push_back(std::move(ep));
    Slot& s = slots_[p];
    s.via.store(via, std::memory_order_release);
    s.why.store(why, std::memory_order_release);
    s.ep.store(e, std::memory_order_release);
    return e;
  }

 private:
  struct Slot {
    std::atomic<transport::Endpoint*> ep{nullptr};
    std::atomic<transport::Transport*> via{nullptr};
    std::atomic<const char*> why{nullptr};
    std::atomic<bool> down{false};
  };
  const NodeId max_;
  std::unique_ptr<Slot[]> slots_;
  std::mutex connect_mu_;
  std::vector<std::unique_ptr<transport::Endpoint>> owned_;  // under connect_mu_
};

}  // namespace lt::proto
