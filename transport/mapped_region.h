// MappedRegion: a peer's memory mapped into this process (shm's
// alloc_memory regions), on which one-sided ops are the caller's own loads,
// stores and atomics. The transport keeps the regions it mapped per
// connection and applies posted ops through them; Endpoint::view hands one
// to a caller that does its ops without a post (proto's native reads,
// writes and atomics over shm).
//
// A view stays mapped while someone holds it. live() turns false when the
// transport lets go of the region (evicted from its connection's cache, or
// the connection closed or broken); a caller then takes a new view or posts
// the op, which reports why it cannot be done.
#pragma once

#include <atomic>
#include <cstddef>
#include <span>

#include "common/status.h"
#include "transport/transport.h"

namespace lt::transport {

/// A guard read (kWrGuard): one that found another word than it expects
/// stops the ops after it, and an op's failure right after guards is the
/// post's (Caps::guard_before).
inline bool is_guard(const WorkRequest& wr) {
  return (wr.flags & kWrGuard) != 0 && wr.op == Op::kRead;
}
/// A guard read, done, that found another word than wr.compare.
bool guard_differs(const WorkRequest& wr);

class MappedRegion {
 public:
  /// `len` bytes at `base`, reachable with the rights `access` (the rkey's).
  MappedRegion(std::byte* base, size_t len, Access access)
      : base_(base), len_(len), access_(access) {}
  virtual ~MappedRegion() = default;  // the transport's subclass unmaps
  MappedRegion(const MappedRegion&) = delete;
  MappedRegion& operator=(const MappedRegion&) = delete;

  std::byte* base() const { return base_; }
  size_t len() const { return len_; }
  bool live() const { return live_.load(std::memory_order_acquire); }
  void retire() { live_.store(false, std::memory_order_release); }

  /// One kRead, kWrite, kFetchAdd or kCmpSwap of `len` bytes (the sum of its
  /// sges; 8 for atomics) at wr.remote.addr: kPerm without the rights,
  /// kOutOfBounds past the end, kAlign for a misaligned atomic.
  Status access(const WorkRequest& wr, size_t len) const;

  /// The ops of a post, in order, all on this region (a post's answer, as
  /// Endpoint::post gives it): how many were done before one failed, or the
  /// failure of the first op after nothing but guards; kBadHandle when a
  /// guard found another word (what came before it is done, nothing after).
  /// An op that is not a plain, unsignaled read, write or atomic, or a
  /// malformed one, fails with kInvalidArg and nothing of it is done.
  Result<size_t> apply(std::span<const WorkRequest> wrs) const;

 private:
  std::byte* const base_;
  const size_t len_;
  const Access access_;
  std::atomic<bool> live_{true};
};

/// The bytes an op moves (8 for atomics), or kInvalidArg for an op a
/// MappedRegion does not do or a malformed one (a guard that is not one
/// 8-byte read, an atomic without room for the old value).
inline Status region_op_len(const WorkRequest& wr, size_t* len) {
  if (wr.num_sge > kMaxSge) return Code::kInvalidArg;
  size_t l = 0;
  for (int i = 0; i < wr.num_sge; ++i) l += wr.sge[i].len;
  switch (wr.op) {
    case Op::kWrite:
      break;
    case Op::kRead:
      if ((wr.flags & kWrGuard) != 0 && (wr.num_sge != 1 || l != 8)) return Code::kInvalidArg;
      break;
    case Op::kFetchAdd:
    case Op::kCmpSwap:
      if (wr.num_sge < 1 || wr.sge[0].len < 8 || wr.sge[0].addr == nullptr) {
        return Code::kInvalidArg;
      }
      l = 8;
      break;
    default:
      return Code::kInvalidArg;
  }
  *len = l;
  return Status::ok();
}

}  // namespace lt::transport
