#include "proto/yield_pacer.h"

#include "common/tls.h"

namespace lt::proto {

bool move_to_another_cpu() {
  cpu_set_t mine;
  if (sched_getaffinity(0, sizeof(mine), &mine) != 0 || CPU_COUNT(&mine) < 2) return false;
  const int cpu = sched_getcpu();
  if (cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &mine)) return false;
  cpu_set_t others = mine;
  CPU_CLR(cpu, &others);
  if (sched_setaffinity(0, sizeof(others), &others) != 0) return false;
  // The change above moved the thread off this CPU before it returned;
  // widening the mask again does not move it back.
  return sched_setaffinity(0, sizeof(mine), &mine) == 0;
}

namespace {

struct Streak {
  uint32_t hand_offs = 0;  // to a peer known to run here, in a row
  uint32_t moves = 0;
  uint64_t moved_at_ns = 0;
};

Streak& streak() {
  LT_TLS_FAST static thread_local Streak s;
  return s;
}

std::atomic<YieldPacer::Mover> g_mover{move_to_another_cpu};

}  // namespace

uint32_t YieldPacer::moves() { return streak().moves; }

void YieldPacer::set_mover(Mover m) {
  g_mover.store(m != nullptr ? m : move_to_another_cpu, std::memory_order_relaxed);
}

YieldPacer::Did YieldPacer::maybe_yield(uint64_t* now) {
  if (*now < next_ns_) return Did::kNotDue;
  const CpuHint peer = peers_ != nullptr ? peers_->of(peer_) : kCpuUnknown;
  if (peer != kCpuUnknown && peer != this_cpu_hint()) {
    streak().hand_offs = 0;
    next_ns_ = *now + max_gap_ns_;  // look again later: the peer may come here
    return Did::kSkipped;
  }
  sched_yield();
  const uint64_t back = now_ns();
  const bool gave = back - *now > kHandedNs;
  if (gave) {
    gap_ns_ = 0;
    handed(back, peer);
  } else {
    gap_ns_ = gap_ns_ == 0 ? kMinGapNs : std::min(2 * gap_ns_, max_gap_ns_);
    streak().hand_offs = 0;
  }
  *now = back;
  next_ns_ = back + gap_ns_;
  return gave ? Did::kHanded : Did::kAlone;
}

void YieldPacer::handed(uint64_t at, CpuHint peer) {
  Streak& s = streak();
  if (peer == kCpuUnknown || !may_move_) {  // a tcp peer, or none yet: nothing says the two share
    s.hand_offs = 0;
    return;
  }
  if (++s.hand_offs < kMoveAfter || at - s.moved_at_ns < kMoveEveryNs) return;
  s.hand_offs = 0;
  s.moved_at_ns = at;
  if (g_mover.load(std::memory_order_relaxed)()) ++s.moves;
}

}  // namespace lt::proto
