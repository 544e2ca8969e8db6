#include "proto/request_table.h"

#include <algorithm>

namespace lt::proto {

RequestTable::RequestTable(uint32_t max_requests) {
  // At most 2^30 slots: an id's index never has bit 31 set, which callers
  // may use to tell ids from other values.
  uint32_t n = std::clamp<uint32_t>(max_requests, kChunk, 1u << 30);
  max_ = (n + kChunk - 1) / kChunk * kChunk;
  chunks_.reset(new std::unique_ptr<Request[]>[max_ / kChunk]);
}

Status RequestTable::grow() {
  std::lock_guard<std::mutex> g(grow_mu_);
  if (static_cast<uint32_t>(free_head_.load(std::memory_order_acquire)) != 0) {
    return Status::ok();  // another thread grew (or freed) meanwhile
  }
  uint32_t base = num_.load(std::memory_order_relaxed);
  if (base >= max_) return Code::kNoResource;
  chunks_[base / kChunk].reset(new Request[kChunk]);
  for (uint32_t i = 0; i < kChunk; ++i) {
    Request* r = at(base + i);
    r->idx = base + i;
    r->word.store(req_word(1, kStFree), std::memory_order_relaxed);
  }
  num_.store(base + kChunk, std::memory_order_release);
  // Link the chunk and push it whole onto the free stack.
  for (uint32_t i = 0; i + 1 < kChunk; ++i) {
    at(base + i)->free_next.store(base + i + 2, std::memory_order_relaxed);
  }
  uint64_t head = free_head_.load(std::memory_order_acquire);
  for (;;) {
    at(base + kChunk - 1)->free_next.store(static_cast<uint32_t>(head), std::memory_order_relaxed);
    uint64_t next = ((head >> 32) + 1) << 32 | (base + 1);
    if (free_head_.compare_exchange_weak(head, next, std::memory_order_acq_rel)) break;
  }
  return Status::ok();
}

}  // namespace lt::proto
