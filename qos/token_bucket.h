// A token bucket at `rate` tokens per second holding at most one control
// interval's worth (an idle spell earns no burst). A take may go into debt
// by one operation, so an operation larger than the bucket still passes and
// the next one waits. Thread contract: none (the owner serializes).
#pragma once

#include <algorithm>
#include <cstdint>

namespace lt::qos {

class TokenBucket {
 public:
  static constexpr uint64_t kIntervalNs = 200'000;  // what the bucket holds, in time

  /// Tokens per second; 0 is no limit at all.
  void set_rate(uint64_t per_s) { rate_ = per_s; }
  uint64_t rate() const { return rate_; }
  /// Empties it, counting from `now`.
  void reset(uint64_t now) {
    tokens_ = 0;
    last_ns_ = now;
  }
  /// 0 when an operation may go at `now`, else how many ns to wait before
  /// asking again. Several buckets are asked first and spent only when all
  /// say go (so a wait on one does not charge the others twice).
  uint64_t wait(uint64_t now) {
    if (rate_ == 0) return 0;
    refill(now);
    if (tokens_ >= 0) return 0;
    return static_cast<uint64_t>(static_cast<double>(-tokens_) * 1e9 / static_cast<double>(rate_)) +
           1;
  }
  void spend(uint64_t n) {
    if (rate_ != 0) tokens_ -= static_cast<double>(n);
  }
  /// wait(), then spend(n) when it says go.
  uint64_t take(uint64_t n, uint64_t now) {
    const uint64_t w = wait(now);
    if (w == 0) spend(n);
    return w;
  }

 private:
  void refill(uint64_t now) {
    if (now <= last_ns_) return;
    const uint64_t dt = now - last_ns_;
    last_ns_ = now;
    // Fractions of a token are kept: a slow rate refilled in short steps
    // still adds up.
    const double add = static_cast<double>(rate_) * static_cast<double>(dt) / 1e9;
    const double cap = static_cast<double>(rate_) * static_cast<double>(kIntervalNs) / 1e9 + 1;
    tokens_ = std::min(tokens_ + add, cap);
  }

  uint64_t rate_ = 0;
  double tokens_ = 0;
  uint64_t last_ns_ = 0;
};

}  // namespace lt::qos
