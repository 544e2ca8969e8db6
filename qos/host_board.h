// The host's QoS board: what the control law needs from the other engines on
// this host (tenants are usually separate processes), in one small shared
// memory segment. Each engine holds one slot per class it has and, on every
// control interval, writes whether the class is active, where its RTT is
// above its target (the peers, or the host: CongestedPeers), and when it last
// wrote. Every engine reads the others'
// slots, so a bulk class in one process is throttled when a latency class in
// another suffers.
//
// Crash safety: a slot counts only while its heartbeat is recent
// (kFreshNs): an engine that dies, hangs or simply has no calls stops
// writing, and within a millisecond nobody is throttled for it. Its slot is
// taken back by the next engine that needs one once its process is gone.
// The node daemon will own the board later and hand slots to its clients;
// the layout stays.
//
// Thread contract: publish() and scan() by the scheduler's tick (one thread
// at a time); open() and close() around them.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "qos/congested_peers.h"

namespace lt::qos {

/// One other class on the host, as its engine last wrote it.
/// Peers are node ids of the cluster: engines of different clusters on
/// one host should not share a board (qos.board), or one cluster's
/// congested peer may name another's node.
struct BoardEntry {
  uint32_t priority = 0;
  bool active = false;
  CongestedPeers congested;  // none: not congested
};

class HostBoard {
 public:
  static constexpr uint32_t kSlots = 256;
  static constexpr uint64_t kFreshNs = 1'000'000;  // a slot older than this is ignored

  HostBoard() = default;
  ~HostBoard() { close(); }
  HostBoard(const HostBoard&) = delete;
  HostBoard& operator=(const HostBoard&) = delete;

  /// Maps (creating if needed) the board `name` (a POSIX shared memory name
  /// without the slash) and takes `classes` slots. kNoResource when the
  /// board is full; kSys when it cannot be mapped.
  Status open(const std::string& name, uint32_t classes);
  void close();
  bool is_open() const { return board_ != nullptr; }

  /// Our class i's state at `now` (CLOCK_MONOTONIC ns, host-wide).
  void publish(uint32_t i, uint32_t priority, bool active, const CongestedPeers& congested,
               uint64_t now);
  /// The other engines' fresh slots at `now` into *out (cleared first).
  void scan(uint64_t now, std::vector<BoardEntry>* out) const;

 private:
  struct Board;
  Board* board_ = nullptr;
  std::vector<uint32_t> mine_;  // our slots, by class
  uint64_t owner_ = 0;          // what our slots' owner word holds
};

}  // namespace lt::qos
