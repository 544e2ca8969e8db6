// The two records an LMR has inside an engine: the memory a node holds for
// it (LocalLmr, in the owner's LmrStore) and a handle a process holds to it
// (Mapping, in that process's HandleTable). Neither leaves the engine: peers
// see an LmrRef (key, capability, rights), never a pointer or an rkey.
#pragma once

#include <atomic>
#include <cstdint>

#include "common/siphash.h"
#include "proto/msg.h"
#include "transport/transport.h"

namespace lt::proto {

using transport::NodeId;

/// Where an LMR's liveness word sits: after its data, 8-byte aligned.
constexpr uint64_t alive_offset(uint64_t size) { return (size + 7) & ~uint64_t{7}; }

/// The capability that lets a holder of `rights` use LMR `key`: a keyed hash
/// only the LMR's master (who holds `secret`) can mint.
inline uint64_t cap_for(const SipKey& secret, uint64_t key, uint32_t rights) {
  uint64_t in[2] = {key, rights};
  return siphash24(secret, in, sizeof(in));
}

/// An atomic several threads may set that a copy of its holder copies by
/// value (a Mapping is copied for LT_memcpy's destination).
template <typename T>
struct CopyableAtomic {
  std::atomic<T> v{};
  CopyableAtomic() = default;
  CopyableAtomic(const CopyableAtomic& o) : v(o.v.load(std::memory_order_relaxed)) {}
  CopyableAtomic& operator=(const CopyableAtomic& o) {
    v.store(o.v.load(std::memory_order_relaxed), std::memory_order_relaxed);
    return *this;
  }
};

/// A handle this process holds: where the LMR lives and the capability that
/// lets this node use it.
struct Mapping {
  NodeId owner = 0;
  uint64_t key = 0;
  uint64_t cap = 0;
  uint32_t rights = 0;
  uint64_t size = 0;
  /// The owner's keys for native access: [0] its memory transport's region,
  /// [1] the same memory as its exporter transport reaches it
  /// (TransportSet::native_slot says which a peer uses); 0: none.
  uint64_t rkeys[2] = {0, 0};
  bool master = false;
  SipKey secret;  // master only: mints capabilities for mappers
  /// The node whose master handle this one came from (this node for a
  /// master handle): the only node whose revocation it heeds.
  NodeId minted_by = 0;
  /// When (coarse_now_ns, this node's clock) a native op last found the LMR's
  /// liveness word holding `key`, read at or after that time: rma/native.cc.
  mutable CopyableAtomic<uint64_t> alive_seen;
  /// Set when the master revoked the handle as it freed the LMR: every op
  /// on it is kBadHandle from then on (HandleTable::check), without a word
  /// to the owner.
  mutable CopyableAtomic<bool> revoked;

  /// What a request to the owner names the LMR by.
  LmrRef ref() const { return LmrRef{key, cap, rights, 0}; }
};

/// Memory this node owns on behalf of an LMR's master. It comes from the
/// transport with native one-sided access when there is one, so same-host
/// peers can reach it directly; the 8-byte word after the data (at
/// alive_offset(size)) holds the LMR's key while it exists and 0 once freed,
/// which is how a native access from a peer tells a live LMR from a freed one.
struct LocalLmr {
  std::byte* mem = nullptr;
  uint64_t size = 0;
  SipKey secret;
  NodeId master = 0;
  uint64_t key = 0;  // in the LmrStore
  transport::MemRegion region;
  transport::Transport* from = nullptr;  // whose alloc_memory made `region`
  transport::MemRegion exported;         // `region` as `exporter` reaches it
  transport::Transport* exporter = nullptr;
  LocalLmr() = default;
  LocalLmr(const LocalLmr&) = delete;
  LocalLmr& operator=(const LocalLmr&) = delete;
  ~LocalLmr() {
    if (from == nullptr) return;
    std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(mem + alive_offset(size)))
        .store(0, std::memory_order_release);
    if (exporter != nullptr) exporter->unexport_memory(exported);
    from->free_memory(region);
  }
};

}  // namespace lt::proto
