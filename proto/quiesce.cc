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
bool detect_asymmetric() {
  if (kSanitizingThreads) return false;
  long cmds = syscall(__NR_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  if (cmds < 0 || (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return false;
  return syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
}

// Gives the slot back when its thread exits.
struct SlotReturn {
  Quiescence::Slot* slot = nullptr;
  ~SlotReturn() {
    if (slot == nullptr) return;
    std::lock_guard<std::mutex> g(registry().mu);
    slot->in_use = false;
  }
};
thread_local SlotReturn t_return;

std::once_flag g_detect;

}  // namespace

constinit thread_local Quiescence::ThreadState Quiescence::t_state{nullptr, 0};
bool Quiescence::asymmetric_ = false;

Quiescence::Slot* Quiescence::attach() {
  // Every thread passes here before its first section (and the reclaimer
  // before its snapshot), so the once-only detection happens-before any
  // read of asymmetric_.
  std::call_once(g_detect, [] { asymmetric_ = detect_asymmetric(); });
  Registry& r = registry();
  Slot* s = nullptr;
  {
    std::lock_guard<std::mutex> g(r.mu);
    for (auto& x : r.slots) {
      if (!x.in_use) {
        s = &x;
        break;
      }
    }
    if (s == nullptr) s = &r.slots.emplace_back();
    s->in_use = true;
  }
  t_return.slot = s;
  return s;
}

Quiescence::Snapshot Quiescence::snapshot() {
  std::call_once(g_detect, [] { asymmetric_ = detect_asymmetric(); });
  if (asymmetric_) syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
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
