// The control law for one class that a higher-priority class may throttle:
// a token bucket whose rate follows the higher classes' RTT. Pure (the
// clock is passed in), so the tests drive it with a simulated clock and
// synthetic RTT samples.
//
// Once per interval (kIntervalNs) the scheduler calls update() with what
// happened in it:
//  - no higher class active: no throttling at all (work-conserving); the
//    class's own rate is measured, as its unthrottled (solo) rate;
//  - a higher class active and one of them above its RTT target: the rate
//    is cut to kDecrease of itself (multiplicative decrease);
//  - a higher class active and none above target: the rate grows by
//    1/kIncreaseSteps of the solo rate (additive increase), and throttling
//    ends when it reaches the solo rate. Classes of one priority throttled
//    together grow towards their weight's share of the group's solo rate
//    instead (Share): all halve at once, so the rates converge to shares in
//    proportion to the weights (weighted AIMD);
//  - never below floor_percent of the solo rate (no starvation). A class
//    that has never run alone takes the most it moved unthrottled beside
//    the higher class as its solo rate until it does.
// docs/ARCHITECTURE.md ("QoS: the control law") says which published
// scheme each constant follows.
//
// Thread contract: none; the scheduler serializes calls per class.
#pragma once

#include <algorithm>
#include <cstdint>

#include "qos/token_bucket.h"

namespace lt::qos {

/// This class's part of its priority group, for the additive increase:
/// `weight` of `group_weight` (the weights of the group's active classes)
/// of `group_solo` (their solo rates added up). The default stands for a
/// class alone in its group.
struct Share {
  uint64_t group_solo = 0;
  uint32_t weight = 1;
  uint32_t group_weight = 1;
};

class RateControl {
 public:
  static constexpr uint64_t kIntervalNs = TokenBucket::kIntervalNs;  // update period
  static constexpr double kDecrease = 0.5;        // rate kept on a congested interval
  static constexpr uint32_t kIncreaseSteps = 16;  // intervals from floor-ish to solo
  static constexpr uint64_t kMinRate = 1u << 20;  // bytes/s: the least a floor may be
  static constexpr uint64_t kUnlimited = ~uint64_t{0};

  explicit RateControl(uint32_t floor_percent = 5) : floor_percent_(floor_percent) {}

  /// One interval ended at `now`: `bytes` went through this class in it;
  /// `higher_active`: a higher class had work in it; `congested`: one of
  /// them saw an RTT above its target.
  void update(uint64_t now, uint64_t interval_ns, uint64_t bytes, bool higher_active,
              bool congested, Share share = {}) {
    const uint64_t measured = interval_ns ? bytes * 1'000'000'000ull / interval_ns : 0;
    if (!higher_active) {
      if (throttled_) ++recoveries_;
      throttled_ = false;
      set(kUnlimited);
      // The solo rate follows what the class does alone (a slow EWMA, so
      // one quiet interval does not forget it).
      if (measured > 0) solo_ = solo_ == 0 ? measured : (solo_ * 7 + measured) / 8;
      bucket_.reset(now);
      return;
    }
    // Until the class has run alone, what it moved unthrottled beside the
    // higher class stands in for its solo rate: relative to the throttled
    // rate itself, the floor and the additive step would shrink with every
    // cut, down to kMinRate.
    if (!throttled_ && measured > shared_) shared_ = measured;
    const uint64_t known = solo_ != 0 ? solo_ : shared_;
    const uint64_t solo = std::max(known, std::max(measured, kMinRate));
    const uint64_t floor = std::max(kMinRate, solo / 100 * floor_percent_);
    floor_ = floor;
    if (!throttled_) {
      // Nothing to do while the higher class is fine, or while this class
      // moves nothing (an idle class is not cut; it is when it sends).
      if (!congested || measured == 0) return;
      throttled_ = true;
      ++throttles_;
      set(std::max(std::min(measured, solo), floor));  // from where it is now
      bucket_.reset(now);
    }
    if (congested) {
      set(std::max(floor, static_cast<uint64_t>(static_cast<double>(rate_) * kDecrease)));
      ++decreases_;
    } else {
      const uint64_t fair = fair_share(solo, share);
      set(rate_ + std::max<uint64_t>(fair / kIncreaseSteps, 1));
      if (rate_ >= std::max(solo, fair)) {
        throttled_ = false;
        set(kUnlimited);
        ++recoveries_;
      }
    }
  }

  /// Takes `bytes` of tokens at `now`: 0 when the operation may go, else
  /// how long to wait before asking again (TokenBucket).
  uint64_t take(uint64_t bytes, uint64_t now) {
    return rate_ == kUnlimited ? 0 : bucket_.take(bytes, now);
  }
  /// The same in two steps (TokenBucket::wait, spend), to combine with caps.
  uint64_t wait(uint64_t now) { return rate_ == kUnlimited ? 0 : bucket_.wait(now); }
  void spend(uint64_t bytes) { bucket_.spend(bytes); }

  bool throttled() const { return throttled_; }
  /// Throttled and cut as far as it goes: cutting this one further cannot help.
  bool at_floor() const { return throttled_ && rate_ <= floor_; }
  uint64_t rate() const { return rate_; }  // bytes/s, kUnlimited when not throttled
  uint64_t solo_rate() const { return solo_; }
  uint64_t throttles() const { return throttles_; }
  uint64_t decreases() const { return decreases_; }

 private:
  // What the class grows towards: its solo rate alone; in a group, its
  // weight's share of the group's solo rate. The additive step is a
  // kIncreaseSteps-th of it (one constant for every weight, so the steps
  // keep the weights' ratio), and throttling ends above both: a heavier
  // class does not leave the group's throttling, and take what the others
  // were cut to, at its own solo rate.
  static uint64_t fair_share(uint64_t solo, const Share& share) {
    const uint64_t group = std::max(share.group_solo, solo);
    const uint32_t of = std::max(share.group_weight, share.weight);
    if (share.weight == 0 || of == share.weight) return solo;
    const double part = static_cast<double>(share.weight) / static_cast<double>(of);
    return static_cast<uint64_t>(static_cast<double>(group) * part);
  }

  // Every change of rate_ while throttled goes to the bucket too.
  void set(uint64_t rate) {
    rate_ = rate;
    bucket_.set_rate(rate == kUnlimited ? 0 : rate);
  }

  uint32_t floor_percent_;
  bool throttled_ = false;
  uint64_t rate_ = kUnlimited;
  uint64_t floor_ = 0;  // the floor of the last throttled update
  uint64_t solo_ = 0;
  uint64_t shared_ = 0;  // the most it moved in an unthrottled interval beside a higher class
  TokenBucket bucket_;
  uint64_t throttles_ = 0, decreases_ = 0, recoveries_ = 0;
};

}  // namespace lt::qos
