#include "proto/quiesce.h"

#include <deque>
#include <mutex>

namespace lt::proto {

namespace {

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

}  // namespace

LT_TLS_FAST constinit thread_local Quiescence::ThreadState Quiescence::t_state{nullptr, 0};

void Quiescence::prepare() { AsymFence::prepare(); }

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
  // process, a few ms, on a cold path). Without the barrier every reader's
  // entry is a seq_cst store, and the unpublishing store and the loads
  // below are seq_cst too: their one total order is the fence.
  AsymFence::wait_ready();
  AsymFence::heavy();
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
