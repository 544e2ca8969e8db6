// Per peer node: the endpoint this engine reaches it through (made on first
// use, cached), which transport that is and why, and whether the node is
// down. Endpoints are owned here. Callers use them through a plain pointer
// inside a Quiescence section (EndpointRef), so one that is replaced or
// retired (its connection broke, its node went down) is freed by collect()
// once no caller can still hold it; with it go its connection's descriptors
// and mappings.
//
// Thread contract: the per-peer fields are atomics read on every post;
// install() is serialized by connect_mutex() (first contact and reconnects,
// the cold path); retire() and collect() take the retired list's lock.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "proto/quiesce.h"
#include "transport/transport.h"

namespace lt::proto {

using transport::NodeId;

/// An endpoint in a caller's hands: valid while this object lives (it holds
/// a Quiescence section, entered before the pointer is loaded).
class EndpointRef {
 public:
  transport::Endpoint* get() const { return ep_; }
  transport::Endpoint* operator->() const { return ep_; }
  void set(transport::Endpoint* e) { ep_ = e; }

 private:
  Quiescence::Section section_;
  transport::Endpoint* ep_ = nullptr;
};

class PeerTable {
 public:
  explicit PeerTable(NodeId max_nodes) : max_(max_nodes), slots_(new Slot[max_nodes]) {}

  bool valid(NodeId p) const { return p != 0 && p < max_; }
  /// The cached endpoint to `p` while its connection lives, else null. Call
  /// it inside a Quiescence section (EndpointRef) and use the endpoint there.
  transport::Endpoint* live(NodeId p) const {
    // seq_cst: ordered after the section's entry (see quiesce.h); a plain
    // load on x86.
    transport::Endpoint* e = slots_[p].ep.load(std::memory_order_seq_cst);
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
  /// Forgets `p`'s endpoint (its connection broke, or the node is down): the
  /// next use reconnects, and the old one is freed once nobody holds it.
  void retire(NodeId p);

  std::mutex& connect_mutex() { return connect_mu_; }
  /// Caches `ep` (taking ownership) as `p`'s endpoint, retiring the one it
  /// replaces. Caller holds connect_mutex().
  transport::Endpoint* install(NodeId p, std::unique_ptr<transport::Endpoint> ep,
                               transport::Transport* via, const char* why);

  /// Frees the retired endpoints no caller can hold any more. Cheap when
  /// there are none; the progress thread calls it as it goes.
  void collect();
  /// Endpoints retired and not freed yet (tests, stats).
  size_t retired() const;

 private:
  struct Slot {
    std::atomic<transport::Endpoint*> ep{nullptr};
    std::atomic<transport::Transport*> via{nullptr};
    std::atomic<const char*> why{nullptr};
    std::atomic<bool> down{false};
    std::unique_ptr<transport::Endpoint> owned;  // under connect_mu_ (or retire's lock)
  };
  struct Retired {
    std::unique_ptr<transport::Endpoint> ep;
    Quiescence::Snapshot inside;  // the sections that may hold it
  };
  void retire_locked(Slot& s);

  const NodeId max_;
  std::unique_ptr<Slot[]> slots_;
  std::mutex connect_mu_;
  mutable std::mutex retired_mu_;  // guards retired_ and Slot::owned on retire()
  std::vector<Retired> retired_;
  std::atomic<size_t> retired_count_{0};
};

}  // namespace lt::proto
