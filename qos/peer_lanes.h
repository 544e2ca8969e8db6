// A class's throttling per peer: one lane (a RateControl with its token
// bucket and the interval's bytes) for each peer the class sent to lately,
// a few of them, found by a scan on every admission. A higher class
// congested at peer P cuts only the lane of P; the class's own RateControl
// stays for congestion that names no peer this class reaches
// (docs/ARCHITECTURE.md §13b).
//
// A peer without a lane (all of them busy) goes through the class's own
// bucket alone. A lane is handed to another peer only when it is free or its
// peer has been quiet for `idle_ns` and it is not throttled, so the state of
// a throttled path is never forgotten while that path is congested.
//
// Not thread-safe: the class's lock guards it.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

#include "qos/rate_control.h"
#include "transport/transport.h"

namespace lt::qos {

struct Lane {
  transport::NodeId peer = 0;  // 0: free
  RateControl rc;
  uint64_t interval_bytes = 0;  // admitted to this peer in the current interval
  uint64_t last_used = 0;       // when the class last admitted an op to it
};

class PeerLanes {
 public:
  static constexpr uint32_t kLanes = 8;

  explicit PeerLanes(uint32_t floor_percent) : floor_percent_(floor_percent) {
    for (Lane& l : lanes_) l.rc = RateControl(floor_percent);
  }

  /// The lane of `peer` (not 0), made if needed; null when every lane is
  /// held by another peer. The hit is a scan of one cache line of ids.
  Lane* take(transport::NodeId peer, uint64_t now, uint64_t idle_ns) {
    for (uint32_t i = 0; i < kLanes; ++i) {
      if (ids_[i] == peer) return &lanes_[i];
    }
    Lane* spare = nullptr;
    for (Lane& l : lanes_) {
      const bool reusable =
          l.peer == 0 || (!l.rc.throttled() && now - std::min(now, l.last_used) >= idle_ns);
      if (reusable && (spare == nullptr || l.last_used < spare->last_used)) spare = &l;
    }
    if (spare == nullptr) return nullptr;
    *spare = Lane{peer, RateControl(floor_percent_), 0, now};
    ids_[spare - lanes_.data()] = peer;
    return spare;
  }

  /// The lane of `peer`, or null.
  const Lane* find(transport::NodeId peer) const {
    for (uint32_t i = 0; i < kLanes; ++i) {
      if (ids_[i] == peer && peer != 0) return &lanes_[i];
    }
    return nullptr;
  }

  std::array<Lane, kLanes>& all() { return lanes_; }
  const std::array<Lane, kLanes>& all() const { return lanes_; }

 private:
  std::array<transport::NodeId, kLanes> ids_{};  // lanes_[i].peer, for the scan
  std::array<Lane, kLanes> lanes_;
  uint32_t floor_percent_;
};

}  // namespace lt::qos
