#include "proto/quiesce.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

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

// Whether membarrier(PRIVATE_EXPEDITED) is there, and registers for it.
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

// The background registration: started once, waited for by snapshots.
struct Detection {
  std::once_flag started;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
};
Detection& detection() {
  static Detection* d = new Detection;  // leaked: the thread may outlive statics
  return *d;
}

}  // namespace

LT_TLS_FAST constinit thread_local Quiescence::ThreadState Quiescence::t_state{nullptr, 0};
std::atomic<bool> Quiescence::asymmetric_{false};

void Quiescence::prepare() {
  Detection& d = detection();
  std::call_once(d.started, [&d] {
    std::thread([&d] {
      const bool yes = detect_asymmetric();
      std::lock_guard<std::mutex> g(d.mu);
      // Under the lock a snapshot waits on: a snapshot that saw `done`
      // also sees the readers' mode it must serve.
      asymmetric_.store(yes, std::memory_order_release);
      d.done = true;
      d.cv.notify_all();
    }).detach();
  });
}

Quiescence::Slot* Quiescence::attach() {
  prepare();
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
  // Readers may switch to plain stores the moment registration ends, so a
  // snapshot taken with a fence alone could miss one: wait for it (once per
  // process, a few ms, on a cold path).
  prepare();
  Detection& d = detection();
  {
    std::unique_lock<std::mutex> g(d.mu);
    d.cv.wait(g, [&d] { return d.done; });
  }
  // Without the barrier every reader's entry is a seq_cst store, and the
  // unpublishing store and the loads below are seq_cst too: their one total
  // order is the fence.
  if (asymmetric_.load(std::memory_order_acquire)) {
    syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
  }
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
