// NativeOps: one native one-sided op (rma/native.cc) with room for the
// liveness check that goes before or after it, side by side, so that either
// pair reaches the transport as one span without a work request being
// copied. A copy of a work request written moments before stalls: the
// copy's 16-byte loads cannot take their bytes from the fields' narrower
// stores still on their way to the cache (store forwarding fails), and wait
// for them; on an 8 B read over shm that wait held 60% of native_op's
// samples.
// So each slot is written once, in place, field by field, and only the
// slots a post uses are written at all (no zero fill of the three).
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <span>

#include "transport/transport.h"

namespace lt::proto {

class NativeOps {
 public:
  using WorkRequest = transport::WorkRequest;
  using Op = transport::Op;

  NativeOps() {}  // NOLINT: the slots stay unwritten until a setter writes one
  NativeOps(const NativeOps&) = delete;
  NativeOps& operator=(const NativeOps&) = delete;

  /// The op: a kRead or kWrite of `n` bytes at `buf`, from or to `off` of
  /// the region `rkey` names.
  void set_rw(bool write, std::byte* buf, uint32_t n, uint64_t off, uint64_t rkey) {
    new (&w_[kOp]) WorkRequest{
        write ? Op::kWrite : Op::kRead, 0, 1, 0, 0, {{buf, n, 0}, {}}, {off, rkey}, 0, 0};
  }
  /// The op: kFetchAdd or kCmpSwap on the word at `off`, its prior value
  /// into *old.
  void set_atomic(Op op, uint64_t off, uint64_t rkey, uint64_t operand, uint64_t compare,
                  uint64_t* old) {
    new (&w_[kOp]) WorkRequest{
        op,          0,       1,
        0,           0,       {{reinterpret_cast<std::byte*>(old), sizeof(uint64_t), 0}, {}},
        {off, rkey}, compare, operand};
  }
  /// The check, before the op or after it: an 8-byte read of the word at
  /// `off` into *word, expected to equal `expect`; `flags` kWrGuard where
  /// the transport checks it within the post.
  void set_check(bool before, uint8_t flags, uint64_t off, uint64_t rkey, uint64_t expect,
                 uint64_t* word) {
    new (&w_[before ? kBefore : kAfter]) WorkRequest{
        Op::kRead,   flags,  1,
        0,           0,      {{reinterpret_cast<std::byte*>(word), sizeof(uint64_t), 0}, {}},
        {off, rkey}, expect, 0};
  }

  const WorkRequest& op() const { return w_[kOp]; }
  std::span<const WorkRequest> op_alone() const { return {&w_[kOp], 1}; }
  std::span<const WorkRequest> check_alone() const { return {&w_[kBefore], 1}; }
  /// [check, op] or [op, check], as set_check placed it.
  std::span<const WorkRequest> pair(bool check_before) const {
    return {&w_[check_before ? kBefore : kOp], 2};
  }

 private:
  static constexpr int kBefore = 0, kOp = 1, kAfter = 2;
  union {
    WorkRequest w_[3];
  };
};

}  // namespace lt::proto
