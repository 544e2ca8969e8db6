// RTT samples of one class, for its p50/p99: a log-linear histogram (four
// buckets per power of two from 64 ns to about 70 s) of relaxed atomic
// counters, so recording is one increment and reading needs no lock.
#pragma once

#include <array>
#include <atomic>
#include <bit>
#include <cstdint>

namespace lt::qos {

class RttHistogram {
 public:
  static constexpr int kSub = 4;  // buckets per power of two
  static constexpr int kMinShift = 6;
  static constexpr int kBuckets = (36 - kMinShift) * kSub;

  void record(uint64_t ns) { counts_[bucket(ns)].fetch_add(1, std::memory_order_relaxed); }

  /// The upper edge of the bucket holding the q-th quantile (0 < q < 1);
  /// 0 with no samples.
  uint64_t quantile(double q) const {
    std::array<uint64_t, kBuckets> c;
    uint64_t total = 0;
    for (int i = 0; i < kBuckets; ++i) total += c[i] = counts_[i].load(std::memory_order_relaxed);
    if (total == 0) return 0;
    const uint64_t want = static_cast<uint64_t>(q * static_cast<double>(total - 1)) + 1;
    uint64_t seen = 0;
    for (int i = 0; i < kBuckets; ++i) {
      seen += c[i];
      if (seen >= want) return upper(i);
    }
    return upper(kBuckets - 1);
  }

  static int bucket(uint64_t ns) {
    if (ns < (uint64_t{1} << kMinShift)) return 0;
    const int top = 63 - std::countl_zero(ns);  // ns >= 2^top
    const int sub = static_cast<int>((ns >> (top - 2)) & (kSub - 1));
    const int b = (top - kMinShift) * kSub + sub;
    return b < kBuckets ? b : kBuckets - 1;
  }
  static uint64_t upper(int b) {
    const int top = b / kSub + kMinShift, sub = b % kSub;
    return (uint64_t{1} << top) + (static_cast<uint64_t>(sub + 1) << (top - 2));
  }

 private:
  std::array<std::atomic<uint64_t>, kBuckets> counts_{};
};

}  // namespace lt::qos
