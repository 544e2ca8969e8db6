// The LMRs this node owns (the memory it holds for masters anywhere in the
// cluster), by key. Every access from a request names the LMR by an LmrRef
// and goes through with_checked(): the capability, rights and bounds are
// checked before the memory is touched, and a freed LMR's memory stays
// alive until the access ends.
//
// Thread-safe: the table takes its reader lock for a lookup only; f runs
// without it.
#pragma once

#include <cstdint>
#include <memory>

#include "proto/lmr/lmr.h"
#include "proto/slot_table.h"

namespace lt::proto {

class LmrStore {
 public:
  explicit LmrStore(uint32_t capacity) : table_(capacity) {}

  /// An LMR of `size` bytes (zero-filled) for `master`, its memory from
  /// `t`'s alloc_memory with the liveness word after it, and exported to
  /// `exporter` when there is one (a failed export only costs its peers
  /// native access: they go by messages). kInvalidArg for size 0, kNoMemory
  /// when the system refuses, kNoResource when full.
  Result<std::shared_ptr<LocalLmr>> create(uint64_t size, NodeId master, transport::Transport* t,
                                           transport::Transport* exporter);

  /// Runs f(LocalLmr&) -> Status on the LMR `ref` names once `ref` proves
  /// `need` on [off, off + len): kBadHandle (no such LMR), kMalformed,
  /// kPerm (capability or rights), kOutOfBounds.
  template <typename F>
  Status with_checked(const LmrRef& ref, uint32_t need, uint64_t off, uint64_t len, F&& f) {
    std::shared_ptr<LocalLmr> l;
    LT_RETURN_IF_ERROR(table_.get(ref.key, &l));
    LT_RETURN_IF_ERROR(check(*l, ref, need, off, len));
    return f(*l);
  }

  /// Frees the LMR `key` (kBadHandle if there is none).
  Status erase(uint64_t key) { return table_.erase(key, nullptr); }
  /// Frees every LMR held for `master` (it is gone, and only a master
  /// handle can free one); returns how many.
  size_t erase_master(NodeId master);

 private:
  static Status check(const LocalLmr& l, const LmrRef& ref, uint32_t need, uint64_t off,
                      uint64_t len) {
    if (ref.pad != 0) return Code::kMalformed;
    if (cap_for(l.secret, l.key, ref.rights) != ref.cap) return Code::kPerm;
    if ((ref.rights & need) != need) return Code::kPerm;
    if (off > l.size || len > l.size - off) return Code::kOutOfBounds;
    return Status::ok();
  }

  SlotTable<std::shared_ptr<LocalLmr>> table_;
};

}  // namespace lt::proto
