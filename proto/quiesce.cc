#include "proto/quiesce.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <deque>
#include <mutex>

namespace lt::proto {

namespace {

#if defined(__SANITIZE_THREAD__)
constexpr bool kSanitizingThreads = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr bool kSanitizingThreads = true;
#else
constexpr bool kSanitizingThreads = false;
#endif
#else
constexpr bool kSanitizingThreads = false;
#endif

// Every thread's slot; slots are reused after their thread exits and never
// freed (a snapshot may still point at one). Leaked on purpose: threads may
// exit after static destruction.
struct Registry {
  std::mutex mu;
  std::deque<Quiescence::Slot> slots;  // stable addresses
};
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

// Whether membarrier(PRIVATE_EXPEDITED) is there (registered on first use).
// Under ThreadSanitizer the readers pay instead: it does not model the
// kernel's barrier.
bool asymmetric() {
  static const bool ok = [] {
    if (kSanitizingThreads) return false;
    long cmds = syscall(__NR_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    if (cmds < 0 || (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return false;
    return syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
  }();
  return ok;
}

struct Local {
  Quiescence::Slot* slot = nullptr;
  uint32_t depth = 0;
  ~Local() {
    if (slot == nullptr) return;
    std::lock_guard<std::mutex> g(registry().mu);
    slot->in_use = false;
  }
};
thread_local Local t_local;

Quiescence::Slot* take_slot() {
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  for (auto& s : r.slots) {
    if (!s.in_use) {
      s.in_use = true;
      return &s;
    }
  }
  r.slots.emplace_back().in_use = true;
  return &r.slots.back();
}

}  // namespace

void Quiescence::enter() {
  Local& l = t_local;
  if (l.depth++ != 0) return;
  if (l.slot == nullptr) l.slot = take_slot();
  const uint64_t v = l.slot->seq.load(std::memory_order_relaxed) + 1;
  if (asymmetric()) {
    l.slot->seq.store(v, std::memory_order_relaxed);
    std::atomic_signal_fence(std::memory_order_seq_cst);  // the kernel's barrier does the rest
  } else {
    l.slot->seq.store(v, std::memory_order_seq_cst);
  }
}

void Quiescence::leave() {
  Local& l = t_local;
  if (--l.depth != 0) return;
  l.slot->seq.store(l.slot->seq.load(std::memory_order_relaxed) + 1, std::memory_order_release);
}

Quiescence::Snapshot Quiescence::snapshot() {
  if (asymmetric()) syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
  Snapshot out;
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  for (const auto& s : r.slots) {
    uint64_t v = s.seq.load(std::memory_order_seq_cst);
    if (v & 1) out.emplace_back(&s, v);
  }
  return out;
}

bool Quiescence::passed(const Snapshot& s) {
  for (const auto& [slot, v] : s) {
    if (slot->seq.load(std::memory_order_acquire) == v) return false;
  }
  return true;
}

}  // namespace lt::proto
