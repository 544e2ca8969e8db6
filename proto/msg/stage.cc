#include "proto/msg/stage.h"

#include <vector>

#include "common/log.h"

namespace lt::proto {

namespace {
constexpr uint64_t kGranule = 64;
}

StageAllocator::StageAllocator(uint64_t capacity, MemorySource source)
    : capacity_(capacity), source_(std::move(source)) {}

bool StageAllocator::alloc(NodeId peer, uint64_t len, uint64_t* off) {
  if (capacity_ == 0 || len > capacity_) return false;
  uint64_t need = (std::max<uint64_t>(len, 1) + kGranule - 1) & ~(kGranule - 1);
  std::lock_guard<std::mutex> g(mu_);
  if (region_.addr == nullptr) {
    if (failed_ || !source_) return false;
    auto r = source_(capacity_);
    if (!r) {
      failed_ = true;
      LT_WARN("no rendezvous stage (%s); large messages are pulled by message", r.status().text());
      return false;
    }
    region_ = *r;
    free_[0] = std::min<uint64_t>(region_.len, capacity_) & ~(kGranule - 1);
  }
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < need) continue;
    *off = it->first;
    uint64_t rest = it->second - need;
    free_.erase(it);
    if (rest > 0) free_[*off + need] = rest;
    used_[*off] = {peer, need};
    return true;
  }
  return false;  // full: this message is pulled instead
}

void StageAllocator::free(NodeId peer, uint64_t off) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = used_.find(off);
  if (it == used_.end() || it->second.peer != peer) return;  // not theirs: ignore
  uint64_t len = it->second.len;
  used_.erase(it);
  free_locked(off, len);
}

void StageAllocator::free_locked(uint64_t off, uint64_t len) {
  auto next = free_.lower_bound(off);
  if (next != free_.end() && next->first == off + len) {
    len += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      prev->second += len;
      return;
    }
  }
  free_[off] = len;
}

void StageAllocator::release_peer(NodeId peer) {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<std::pair<uint64_t, uint64_t>> mine;
  for (auto& [off, use] : used_) {
    if (use.peer == peer) mine.emplace_back(off, use.len);
  }
  for (auto& [off, len] : mine) {
    used_.erase(off);
    free_locked(off, len);
  }
}

void StageAllocator::close(const std::function<void(const transport::MemRegion&)>& give_back) {
  std::lock_guard<std::mutex> g(mu_);
  if (region_.addr != nullptr && give_back) give_back(region_);
  region_ = {};
  free_.clear();
  used_.clear();
}

uint64_t StageAllocator::used_bytes() const {
  std::lock_guard<std::mutex> g(mu_);
  uint64_t n = 0;
  for (auto& [off, use] : used_) n += use.len;
  return n;
}

}  // namespace lt::proto
