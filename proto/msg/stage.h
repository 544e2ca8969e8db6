// The rendezvous stage (shm.stage_bytes): one region this engine's peers can
// read natively, where a sender copies a large message and completes at
// once; the receiver reads the copy and says so (MsgStaged), which frees it.
// Used over a transport with one-sided ops but no placement (no cross-memory
// attach); with placement a message is written straight into the receive.
//
// The region is made on first use by the memory source it was given, so an
// engine that never stages maps nothing. First fit in 64-byte granules,
// free ranges coalesced. Every range remembers its peer: only that peer can
// free it, and a lost peer's ranges go back. Thread-safe (mu_, held for no
// system call but the first allocation).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <unordered_map>

#include "common/status.h"
#include "transport/transport.h"

namespace lt::proto {

using transport::NodeId;

class StageAllocator {
 public:
  /// Makes the region (`capacity` bytes) on first use; a failure disables
  /// staging for good (messages are pulled instead).
  using MemorySource = std::function<Result<transport::MemRegion>(uint64_t capacity)>;
  StageAllocator(uint64_t capacity, MemorySource source);
  StageAllocator(const StageAllocator&) = delete;
  StageAllocator& operator=(const StageAllocator&) = delete;

  /// A range of at least `len` bytes for a message to `peer`; false when
  /// staging is off, the message does not fit, or the stage is full.
  bool alloc(NodeId peer, uint64_t len, uint64_t* off);
  /// Frees the range at `off` if `peer` holds it (anything else is ignored:
  /// a peer's MsgStaged names only its own ranges).
  void free(NodeId peer, uint64_t off);
  /// Frees every range `peer` holds (it is gone and will not read them).
  void release_peer(NodeId peer);
  /// Hands back the region made by `source`, through `give_back`, and
  /// forgets every range.
  void close(const std::function<void(const transport::MemRegion&)>& give_back);

  /// The region (null addr until the first alloc). Stable once made.
  std::byte* base() const { return region_.addr; }
  uint64_t rkey() const { return region_.rkey; }
  /// Bytes in use, in granules (for tests and stats).
  uint64_t used_bytes() const;

 private:
  struct Use {
    NodeId peer;
    uint64_t len;
  };
  void free_locked(uint64_t off, uint64_t len);

  const uint64_t capacity_;
  MemorySource source_;
  mutable std::mutex mu_;
  transport::MemRegion region_{};
  bool failed_ = false;
  std::map<uint64_t, uint64_t> free_;       // offset -> length, coalesced
  std::unordered_map<uint64_t, Use> used_;  // offset -> use
};

}  // namespace lt::proto
