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
#include <bit>
#include <cassert>
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
  /// `slots` entries (a power of two), indexed by node_slot(id): the
  /// manager never gives a slot to a new node while another member holds
  /// it, and a new node in a slot has a higher id (a later generation) than
  /// every earlier one.
  explicit PeerTable(NodeId slots) : mask_(slots - 1), slots_(new Slot[slots]) {
    assert(std::has_single_bit(slots));  // a mask, not a division, per lookup
  }

  bool valid(NodeId p) const { return (p & mask_) != 0; }
  /// Whether `p` holds its slot (else an older node does, or a newer one).
  bool owns(NodeId p) const { return at(p).id.load(std::memory_order_acquire) == p; }
  /// The cached endpoint to `p` while its connection lives, else null. Call
  /// it inside a Quiescence section (EndpointRef) and use the endpoint there.
  transport::Endpoint* live(NodeId p) const {
    const Slot& s = at(p);
    // seq_cst: ordered after the section's entry (see quiesce.h); a plain
    // load on x86. The id is read after the endpoint: an endpoint installed
    // for a newer node in the slot is never taken for `p`.
    transport::Endpoint* e = s.ep.load(std::memory_order_seq_cst);
    if (s.id.load(std::memory_order_seq_cst) != p) return nullptr;
    return e != nullptr && e->alive() ? e : nullptr;
  }
  /// live(p) for a node that holds its slot and is not down, else null:
  /// Engine::endpoint()'s fast path, in one read of the slot.
  transport::Endpoint* usable(NodeId p) const {
    const Slot& s = at(p);
    transport::Endpoint* e = s.ep.load(std::memory_order_seq_cst);  // as live()
    if (s.id.load(std::memory_order_seq_cst) != p || e == nullptr ||
        s.down.load(std::memory_order_relaxed)) {
      return nullptr;
    }
    return e->alive() ? e : nullptr;
  }
  /// The transport of `p`'s endpoint (null before the first contact).
  transport::Transport* via(NodeId p) const {
    const Slot& s = at(p);
    transport::Transport* t = s.via.load(std::memory_order_acquire);
    return s.id.load(std::memory_order_acquire) == p ? t : nullptr;
  }
  /// Which of `p`'s LMR keys the endpoint's transport uses
  /// (TransportSet::native_slot): -1 none, kUnsettled while the address
  /// book did not know `p` when the endpoint was made.
  static constexpr int kUnsettled = -2;
  int native_slot(NodeId p) const {
    const Slot& s = at(p);
    const int n = s.native.load(std::memory_order_acquire);
    if (s.id.load(std::memory_order_acquire) != p) return -1;
    return n < 0 ? n : n & ~kNativeAtomics;
  }
  /// Whether atomics on `p`'s LMRs may go natively over that transport too
  /// (TransportSet::native_atomics); false while unsettled.
  bool native_atomics(NodeId p) const {
    const Slot& s = at(p);
    const int n = s.native.load(std::memory_order_acquire);
    return s.id.load(std::memory_order_acquire) == p && n >= 0 && (n & kNativeAtomics) != 0;
  }
  /// What install() and settle_native() take: a slot (or -1, kUnsettled)
  /// and whether atomics go natively too.
  static int native_access(int slot, bool atomics) {
    return slot >= 0 && atomics ? slot | kNativeAtomics : slot;
  }
  /// Settles an endpoint's kUnsettled slot (a native_access value).
  void settle_native(NodeId p, int slot) {
    int8_t want = kUnsettled;
    Slot& s = at(p);
    if (s.id.load(std::memory_order_acquire) == p) {
      s.native.compare_exchange_strong(want, static_cast<int8_t>(slot), std::memory_order_acq_rel);
    }
  }
  /// Why that transport (lives as long as the engine's TransportSet).
  const char* why(NodeId p) const {
    const Slot& s = at(p);
    const char* w = s.why.load(std::memory_order_acquire);
    return s.id.load(std::memory_order_acquire) == p ? w : nullptr;
  }
  /// Down: declared down, or older than the node that holds its slot now.
  bool down(NodeId p) const {
    const Slot& s = at(p);
    NodeId holder = s.id.load(std::memory_order_acquire);
    if (holder != p) return holder > p;
    return s.down.load(std::memory_order_relaxed);
  }
  /// Whether `p` runs on this machine (same boot, any network namespace),
  /// as install() was told: its CPU hints then name this machine's CPUs.
  bool on_this_machine(NodeId p) const {
    const Slot& s = at(p);
    return s.here.load(std::memory_order_relaxed) && s.id.load(std::memory_order_relaxed) == p;
  }
  /// `p` is down for good (claim() it first if it may not hold its slot).
  void mark_down(NodeId p) {
    Slot& s = at(p);
    if (s.id.load(std::memory_order_acquire) == p) s.down.store(true);
  }
  enum class Claim { kHeld, kTaken, kStale };
  /// Makes `p` the holder of its slot: kHeld if it was already, kTaken if
  /// it replaced an older node (whose endpoint is retired; the caller
  /// resets what else it keeps per slot), kStale if a newer node holds it.
  /// Only for ids the membership knows or a transport identified.
  Claim claim(NodeId p);
  /// Forgets `p`'s endpoint (its connection broke, or the node is down): the
  /// next use reconnects, and the old one is freed once nobody holds it.
  void retire(NodeId p);

  static constexpr int kNativeAtomics = 4;  // in a slot's `native`

  std::mutex& connect_mutex() { return connect_mu_; }
  /// Caches `ep` (taking ownership) as `p`'s endpoint, retiring the one it
  /// replaces; `native_slot` is a native_access value; `here`: `p` runs on
  /// this machine. Caller holds connect_mutex().
  transport::Endpoint* install(NodeId p, std::unique_ptr<transport::Endpoint> ep,
                               transport::Transport* via, const char* why, int native_slot,
                               bool here);

  /// Frees the retired endpoints no caller can hold any more. Cheap when
  /// there are none; the progress thread calls it as it goes.
  void collect();
  /// Endpoints retired and not freed yet (tests, stats).
  size_t retired() const;

 private:
  struct Slot {
    std::atomic<NodeId> id{0};  // the node that holds the slot (0: none yet)
    std::atomic<transport::Endpoint*> ep{nullptr};
    std::atomic<transport::Transport*> via{nullptr};
    std::atomic<const char*> why{nullptr};
    std::atomic<int8_t> native{-1};
    std::atomic<bool> down{false};
    std::atomic<bool> here{false};               // on this machine: its CPU hints name our CPUs
    std::unique_ptr<transport::Endpoint> owned;  // under connect_mu_ (or retire's lock)
  };
  struct Retired {
    std::unique_ptr<transport::Endpoint> ep;
    Quiescence::Snapshot inside;  // the sections that may hold it
  };
  void retire_locked(Slot& s);
  Slot& at(NodeId p) { return slots_[p & mask_]; }
  const Slot& at(NodeId p) const { return slots_[p & mask_]; }

  const NodeId mask_;  // slots - 1
  std::unique_ptr<Slot[]> slots_;
  std::mutex connect_mu_;
  mutable std::mutex retired_mu_;  // guards retired_ and Slot::owned on retire()
  std::vector<Retired> retired_;
  std::atomic<size_t> retired_count_{0};
};

}  // namespace lt::proto
