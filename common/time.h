// Monotonic time and deadlines. Every blocking call takes a Deadline.
#pragma once

#include <cstdint>
#include <ctime>

namespace lt {

inline uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

class Deadline {
 public:
  static Deadline never() { return Deadline(UINT64_MAX); }
  /// Saturates: a huge timeout is "never", not a wrapped past deadline.
  static Deadline after_us(uint64_t us) {
    if (us >= UINT64_MAX / 2000) return never();
    return Deadline(now_ns() + us * 1000);
  }
  static Deadline after_ms(uint64_t ms) {
    return ms >= UINT64_MAX / 2000000 ? never() : after_us(ms * 1000);
  }
  explicit Deadline(uint64_t at_ns) : at_ns_(at_ns) {}
  bool expired() const { return at_ns_ != UINT64_MAX && now_ns() >= at_ns_; }
  uint64_t at_ns() const { return at_ns_; }
  /// Remaining time in ms for poll(2)/epoll_wait: -1 when never, rounded up.
  int remaining_ms() const {
    if (at_ns_ == UINT64_MAX) return -1;
    uint64_t now = now_ns();
    if (now >= at_ns_) return 0;
    uint64_t ms = (at_ns_ - now + 999999) / 1000000;
    return ms > 1000000 ? 1000000 : static_cast<int>(ms);
  }
  uint64_t remaining_ns() const {
    uint64_t now = now_ns();
    return now >= at_ns_ ? 0 : at_ns_ - now;
  }

 private:
  uint64_t at_ns_;
};

}  // namespace lt
