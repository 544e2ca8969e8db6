// Laps: per-iteration latencies read from the time-stamp counter where it
// runs at a constant rate (perf.h says why).
#include <vector>

#include "perf.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <x86intrin.h>
#define LTIER_PERF_TSC 1
#endif

namespace ltier_perf {

namespace {
// Whether the TSC ticks at one rate in every power state and on every core
// (CPUID 0x80000007, EDX bit 8: "invariant TSC").
bool invariant_tsc() {
#ifdef LTIER_PERF_TSC
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0x80000000u, &a, &b, &c, &d) == 0 || a < 0x80000007u) return false;
  if (__get_cpuid(0x80000007u, &a, &b, &c, &d) == 0) return false;
  return (d & (1u << 8)) != 0;
#else
  return false;
#endif
}
}  // namespace

Laps::Laps(int n) : tsc_(invariant_tsc()) {
  ticks_.reserve(static_cast<size_t>(n));
  t0_ = Clock::now();
  tsc0_ = ticks();
  prev_ = tsc0_;
}

uint64_t Laps::ticks() const {
#ifdef LTIER_PERF_TSC
  if (tsc_) return __rdtsc();
#endif
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
          .count());
}

const std::vector<double>& Laps::lat() const {
  if (lat_.size() == ticks_.size()) return lat_;
  // µs per tick: from the run itself when the TSC was read (the counter's
  // rate against steady_clock since the constructor), else ns.
  double us_per_tick = 1e-3;
  if (tsc_) {
    const uint64_t span = ticks() - tsc0_;
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0_).count();
    if (span > 0) us_per_tick = us / static_cast<double>(span);
  }
  lat_.clear();
  lat_.reserve(ticks_.size());
  for (uint64_t t : ticks_) lat_.push_back(static_cast<double>(t) * us_per_tick);
  return lat_;
}

}  // namespace ltier_perf
