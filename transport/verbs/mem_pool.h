// LMR memory of the rc transport: a few large pools, each allocated on the
// device's NUMA node and registered once, carved into page-aligned slices;
// registrations grow with pools, not with LMRs. The first pool is small and
// each new one doubles, up to the pool size: a registration pins (and the
// kernel zeroes) every page at once, so a node's first LMR or connection
// does not pay for a whole large pool. Pools are registered
// zero-based (ibv_reg_mr_iova with iova 0), so a remote address is an
// offset into the pool, and the 64-bit rkey a peer gets names the slice:
//
//   bits  0-31  the pool's MR rkey
//   bits 32-47  the slice's first page in the pool
//   bits 48-62  the slice's length in pages (1 to 32767)
//   bit     63  0
//
// A slice larger than a pool (or than 32767 pages) gets a registration of
// its own: bit 63 set, bits 32-62 its length in pages, remote addresses
// offsets into it. The sender checks every op against the slice's bounds
// before posting, so a peer's wrong offset never reaches a neighbour's LMR
// and never breaks the connection with a remote access error.
//
// A freed slice stays registered and waits kQuarantineNs before it is
// handed out again, so a peer's late access to a freed LMR reads a zeroed
// liveness word (proto's check) rather than a reused one. A freed dedicated
// or adopted registration stays registered as long (its pages stay pinned
// by it, even once adopted memory is unmapped by its owner), then goes.
//
// Thread-safe: alloc and free take one mutex (not a hot path); lkey_of reads
// an immutable snapshot.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "common/status.h"
#include "transport/transport.h"

struct ibv_mr;

namespace lt::transport::verbs {

class VerbsDevice;

inline constexpr uint64_t kPage = 4096;
inline constexpr uint64_t kMaxPoolBytes = 32767 * kPage;

/// Where a one-sided op on a peer's slice goes: the MR's rkey and the
/// zero-based remote address. False when [off, off + len) leaves the slice.
bool decode_rkey(uint64_t rkey64, uint64_t off, uint64_t len, uint32_t* rkey, uint64_t* raddr);

class MemPools {
 public:
  /// `pool_bytes` is rounded to pages and capped at kMaxPoolBytes; the
  /// first pool is `first_pool_bytes` (at most pool_bytes), each next one
  /// twice the last. `zero_based` false: registered at their virtual
  /// addresses, for memory only this engine posts from (send rings, bounce
  /// buffers).
  MemPools(VerbsDevice& dev, size_t pool_bytes, int numa_node, bool zero_based = true,
           size_t first_pool_bytes = kFirstPoolBytes);
  static constexpr size_t kFirstPoolBytes = 4u << 20;
  ~MemPools();
  MemPools(const MemPools&) = delete;
  MemPools& operator=(const MemPools&) = delete;

  /// `len` bytes rounded up to pages, zero-filled. kNoMemory when the
  /// system refuses the memory or the registration.
  Result<MemRegion> alloc(size_t len);
  void free(const MemRegion& r);
  /// Makes sure `count` more slices of `len` bytes fit in the registered
  /// pools, registering the next pool now if they do not: room made ahead
  /// of need, so that a new peer's first contact registers nothing. A
  /// slice larger than a pool gets its own registration when allocated,
  /// and is not reserved. kNoMemory as alloc().
  Status reserve(size_t len, uint32_t count);
  /// Registers `mem` (page-aligned memory this object does not own) as a
  /// dedicated registration: the returned region's rkey reaches it as one
  /// from alloc() does. kInvalidArg when `mem` is not page-aligned,
  /// kNoMemory when the registration is refused. Undo with free(); the
  /// memory itself stays the caller's. It is not found by lkey_of (only
  /// peers use it; a local post from it goes by a bounce buffer).
  Result<MemRegion> adopt(std::span<std::byte> mem);
  /// The lkey of registered memory that holds [p, p + len), or 0; *addr is
  /// what a local sge names p by (its offset in a zero-based pool).
  uint32_t lkey_of(const void* p, size_t len, uint64_t* addr) const;
  /// The slice from alloc() that holds [p, p + len): its rkey and lkey.
  /// False when none does.
  bool slice_of(const void* p, size_t len, MemRegion* out) const;
  /// Registrations held now (pools and dedicated ones).
  size_t registrations() const;

 private:
  struct Pool {
    std::byte* base = nullptr;
    size_t len = 0;
    ibv_mr* mr = nullptr;
    bool dedicated = false;
    bool adopted = false;     // adopt(): the memory is not ours to unmap
    uint64_t retired_ns = 0;  // dedicated, freed at this time: released kQuarantineNs later
    std::map<uint64_t, uint64_t> free_pages;  // first page -> pages, coalesced
    std::map<uint64_t, uint64_t> live;        // first page -> rkey, of allocated slices
    size_t span = 0;                          // its index in spans_
  };
  struct Quarantined {
    Pool* pool;
    uint64_t first, pages;
    uint64_t since_ns;
  };
  static constexpr uint64_t kQuarantineNs = 1'000'000'000;

  Result<Pool*> add_pool(size_t len, bool dedicated);
  void release_pool(Pool* p);
  bool take(Pool* p, uint64_t pages, uint64_t* first);
  void give_back(Pool* p, uint64_t first, uint64_t pages);
  // Under mu_: ends the quarantine of slices and retired pools that served it.
  void reap(uint64_t now);

  VerbsDevice& dev_;
  size_t pool_bytes_;
  size_t next_pool_bytes_;  // the size of the next shared pool (doubling up to pool_bytes_)
  int numa_node_;
  bool zero_based_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Pool>> pools_;
  std::deque<Quarantined> quarantine_;
  // For lkey_of without the lock: every registration ever made, append-only
  // (a released one gets len 0). Set under mu_.
  struct Span {
    std::atomic<uintptr_t> base{0};
    std::atomic<size_t> len{0};
    std::atomic<uint32_t> lkey{0};
  };
  static constexpr size_t kMaxSpans = 4096;
  std::unique_ptr<Span[]> spans_{new Span[kMaxSpans]};
  std::atomic<size_t> nspans_{0};
};

}  // namespace lt::transport::verbs
