// One-sided ops on a mapped peer region (mapped_region.h): the checks, then
// the caller's own copy or atomic instruction.
#include "transport/mapped_region.h"

#include <atomic>
#include <cstring>

#include "common/racy.h"
#include "common/small_copy.h"

namespace lt::transport {

bool guard_differs(const WorkRequest& wr) {
  if (!is_guard(wr)) return false;
  uint64_t word = 0;
  std::memcpy(&word, wr.sge[0].addr, sizeof(word));
  return word != wr.compare;
}

Status MappedRegion::access(const WorkRequest& wr, size_t len) const {
  const Access need = wr.op == Op::kRead    ? Access::kRemoteRead
                      : wr.op == Op::kWrite ? Access::kRemoteWrite
                                            : Access::kRemoteAtomic;
  if (!has_access(access_, need)) return Code::kPerm;
  if (wr.remote.addr > len_ || len > len_ - wr.remote.addr) return Code::kOutOfBounds;
  std::byte* target = base_ + wr.remote.addr;
  switch (wr.op) {
    case Op::kWrite:
    case Op::kRead: {
      // Region bytes are raced by design, as RDMA memory is (common/racy.h):
      // threads of this process may read and write them through their views
      // at once, as the peer and its other mappers may.
      RacyAccess racy;
      for (int i = 0; i < wr.num_sge; ++i) {
        const size_t n = wr.sge[i].len;
        if (n == 0) continue;
        std::byte* local = const_cast<std::byte*>(wr.sge[i].addr);
        if (wr.op == Op::kWrite) {
          copy_small(target, local, n);
        } else {
          copy_small(local, target, n);
        }
        target += n;
      }
      return Status::ok();
    }
    case Op::kFetchAdd:
    case Op::kCmpSwap: {
      if (wr.remote.addr % 8 != 0) return Code::kAlign;
      std::atomic_ref<uint64_t> word(*reinterpret_cast<uint64_t*>(target));
      uint64_t old;
      if (wr.op == Op::kFetchAdd) {
        old = word.fetch_add(wr.operand, std::memory_order_seq_cst);
      } else {
        old = wr.compare;
        word.compare_exchange_strong(old, wr.operand, std::memory_order_seq_cst);
      }
      std::memcpy(const_cast<std::byte*>(wr.sge[0].addr), &old, sizeof(old));
      return Status::ok();
    }
    default:
      return Code::kInvalidArg;
  }
}

Result<size_t> MappedRegion::apply(std::span<const WorkRequest> wrs) const {
  size_t done = 0, guards = 0;
  for (; done < wrs.size(); ++done) {
    const WorkRequest& wr = wrs[done];
    size_t len = 0;
    Status s = (wr.flags & kWrSignaled) != 0 ? Status(Code::kInvalidArg) : region_op_len(wr, &len);
    if (s.is_ok()) s = access(wr, len);
    if (!s.is_ok()) return done > guards ? Result<size_t>(done) : Result<size_t>(s);
    if (guard_differs(wr)) return Code::kBadHandle;
    if (is_guard(wr) && guards == done) ++guards;
  }
  return done;
}

}  // namespace lt::transport
