// Which CPU a thread runs on, as a scheduling hint carried between processes.
//
// A shared-memory producer stamps each record with the CPU it wrote it on;
// the consumer's waiter then knows where the thread that will answer it last
// ran. That tells a spinner whether yielding its core can help: when the peer
// runs on another CPU, a yield only hands this core to whatever else wants it
// (a CPU hog, which keeps it a whole time slice); when the peer last ran on
// this CPU, the peer needs the core and the yield is how it gets it.
//
// Encoded as CPU + 1 in 16 bits; 0 means "unknown" (no such hint, or a CPU
// number that does not fit). A hint only: the thread may have moved since.
// sched_getcpu() reads the rseq area glibc registers for each thread (one
// load), falling back to the vDSO.
#pragma once

#include <sched.h>

#include <cstdint>

namespace lt {

using CpuHint = uint16_t;
inline constexpr CpuHint kCpuUnknown = 0;

/// The calling thread's CPU as a hint (kCpuUnknown when it cannot tell).
inline CpuHint this_cpu_hint() {
  const int cpu = sched_getcpu();
  return cpu < 0 || cpu >= 0xffff ? kCpuUnknown : static_cast<CpuHint>(cpu + 1);
}

}  // namespace lt
