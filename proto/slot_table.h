// Fixed-capacity table of values named by unforgeable 64-bit ids:
// [random tag:32][generation:12][slot:20]. A lookup checks all three, so a
// stale id (slot reused), a forged id (tag unknown) or garbage gives
// kBadHandle and touches nothing. Thread-safe: lookups share a reader lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <shared_mutex>
#include <vector>

#include "common/siphash.h"
#include "common/status.h"

namespace lt::proto {

template <typename T>
class SlotTable {
 public:
  static constexpr uint32_t kSlotBits = 20, kGenBits = 12;
  static constexpr uint32_t kMaxSlots = 1u << kSlotBits;

  /// Slots are created on demand (a deque keeps references stable), so an
  /// engine that holds few handles pays for few.
  explicit SlotTable(uint32_t capacity) : capacity_(capacity > kMaxSlots ? kMaxSlots : capacity) {}

  /// Moves whenever a value is erased; starts at a random value, so a table
  /// made where an old one was does not look like it. A reader that saw
  /// (table, erasures()) and a value's id may use the value it got then
  /// for as long as erasures() has not moved: no id it looked up is gone.
  uint64_t erasures() const { return erasures_.load(std::memory_order_acquire); }

  /// kNoResource when full.
  Result<uint64_t> insert(T v) {
    std::unique_lock<std::shared_mutex> g(mu_);
    uint32_t i;
    if (!free_.empty()) {
      i = free_.back();
      free_.pop_back();
    } else if (used_ < capacity_) {
      i = used_++;
      slots_.emplace_back();
    } else {
      return Code::kNoResource;
    }
    Slot& s = slots_[i];
    s.v = std::move(v);
    s.live = true;
    s.gen = (s.gen + 1) & ((1u << kGenBits) - 1);
    do {
      s.tag = static_cast<uint32_t>(random_u64());
    } while (s.tag == 0);
    return (static_cast<uint64_t>(s.tag) << 32) | (static_cast<uint64_t>(s.gen) << kSlotBits) | i;
  }

  /// Copies the value out. kBadHandle for an unknown id.
  Status get(uint64_t id, T* out) const {
    std::shared_lock<std::shared_mutex> g(mu_);
    const Slot* s = find(id);
    if (s == nullptr) return Code::kBadHandle;
    *out = s->v;
    return Status::ok();
  }

  /// Calls f(const T&) on every live value, under the reader lock.
  template <typename F>
  void for_each(F f) const {
    std::shared_lock<std::shared_mutex> g(mu_);
    for (uint32_t i = 0; i < used_; ++i) {
      if (slots_[i].live) f(static_cast<const T&>(slots_[i].v));
    }
  }

  /// Erases every live value for which pred(value) holds; the values are
  /// moved into `out` (so the caller destroys them outside the lock).
  template <typename Pred>
  void erase_if(Pred pred, std::vector<T>* out) {
    std::unique_lock<std::shared_mutex> g(mu_);
    for (uint32_t i = 0; i < used_; ++i) {
      Slot& s = slots_[i];
      if (!s.live || !pred(static_cast<const T&>(s.v))) continue;
      out->push_back(std::move(s.v));
      s.v = T{};
      s.live = false;
      free_.push_back(i);
      bump_erasures();
    }
  }

  Status erase(uint64_t id, T* out) {
    std::unique_lock<std::shared_mutex> g(mu_);
    Slot* s = const_cast<Slot*>(find(id));
    if (s == nullptr) return Code::kBadHandle;
    if (out) *out = std::move(s->v);
    s->v = T{};
    s->live = false;
    free_.push_back(static_cast<uint32_t>(id & (kMaxSlots - 1)));
    bump_erasures();
    return Status::ok();
  }

 private:
  struct Slot {
    T v{};
    uint32_t gen = 0;
    uint32_t tag = 0;
    bool live = false;
  };
  const Slot* find(uint64_t id) const {
    uint32_t i = static_cast<uint32_t>(id & (kMaxSlots - 1));
    uint32_t gen = static_cast<uint32_t>(id >> kSlotBits) & ((1u << kGenBits) - 1);
    uint32_t tag = static_cast<uint32_t>(id >> 32);
    if (i >= used_) return nullptr;
    const Slot& s = slots_[i];
    if (!s.live || s.gen != gen || s.tag != tag) return nullptr;
    return &s;
  }

  // Under the writer lock: a plain increment, published by a release store.
  void bump_erasures() {
    erasures_.store(erasures_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }

  mutable std::shared_mutex mu_;
  std::atomic<uint64_t> erasures_{random_u64()};
  uint32_t capacity_;
  std::deque<Slot> slots_;
  std::vector<uint32_t> free_;
  uint32_t used_ = 0;
};

}  // namespace lt::proto
