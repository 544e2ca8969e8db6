// Where a class's RTT was above its target: the peers of its congested
// completions, a few by name, and `host` for congestion that names no peer
// (a completion without one, or more peers than the set holds). The control
// law throttles a lower class towards the peers named here, and as a whole
// for `host` (qos/scheduler.cc, docs/ARCHITECTURE.md §13b).
//
// A value type; the owner serializes.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

#include "transport/transport.h"

namespace lt::qos {

struct CongestedPeers {
  static constexpr uint32_t kMax = 8;  // also what a host board slot holds
  std::array<transport::NodeId, kMax> peer{};
  uint32_t n = 0;
  bool host = false;

  /// A congested completion to `p` (0: no peer, which is the host's).
  void add(transport::NodeId p) {
    if (p == 0 || (n == kMax && !has(p))) {
      host = true;
      return;
    }
    if (!has(p)) peer[n++] = p;
  }
  void add(const CongestedPeers& o) {
    host = host || o.host;
    for (uint32_t i = 0; i < o.n; ++i) add(o.peer[i]);
  }
  bool has(transport::NodeId p) const {
    return std::find(peer.begin(), peer.begin() + n, p) != peer.begin() + n;
  }
  bool any() const { return host || n != 0; }
  void clear() {
    n = 0;
    host = false;
  }
};

}  // namespace lt::qos
