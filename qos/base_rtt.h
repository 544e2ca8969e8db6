// The unloaded RTT a derived target starts from: the least RTT seen in the
// current window and the one before it, so one lucky sample is forgotten
// and a path that became slower for good is learned within two windows.
// Kept per class and, for the congestion test, per (class, peer): a class
// whose peers sit at different distances (shared memory beside a remote
// host) judges each completion against its own peer's RTT, not the nearest
// peer's.
//
// Not thread-safe: the class's lock guards both.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <new>

#include "transport/transport.h"

namespace lt::qos {

struct BaseRtt {
  static constexpr uint64_t kNone = UINT64_MAX;
  uint64_t least[2] = {kNone, kNone};  // this window, the one before
  uint64_t since = 0;                  // when this window began

  void note(uint64_t rtt, uint64_t now, uint64_t window_ns) {
    if (now - since > window_ns) {  // a new window: the older one is forgotten
      least[1] = least[0];
      least[0] = kNone;
      since = now;
    }
    least[0] = std::min(least[0], rtt);
  }
  /// The base, or kNone before any sample.
  uint64_t get() const { return std::min(least[0], least[1]); }
};

/// A class's bases by peer, one per node slot (32 KiB, made once, so no
/// sample allocates). A node newly in a slot starts afresh.
class PeerBases {
 public:
  /// Makes the table; false when memory is short (then of() gives null).
  bool make() {
    by_slot_.reset(new (std::nothrow) Entry[transport::kNodeSlots]);
    return by_slot_ != nullptr;
  }
  /// The base of `peer`, or null without a table.
  BaseRtt* of(transport::NodeId peer) {
    if (!by_slot_) return nullptr;
    Entry& e = by_slot_[transport::node_slot(peer)];
    if (e.node != peer) e = Entry{peer, {}};
    return &e.base;
  }

 private:
  struct Entry {
    transport::NodeId node = 0;
    BaseRtt base;
  };
  std::unique_ptr<Entry[]> by_slot_;
};

}  // namespace lt::qos
