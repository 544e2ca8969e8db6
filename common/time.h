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

/// CLOCK_MONOTONIC as of the last timer tick: a few ns to read where
/// now_ns() takes tens on a VM, and at most coarse_tick_ns() behind it (the
/// same clock, not yet advanced past the tick). For ages measured in tens of
/// milliseconds: two stamps taken with it differ from the real interval by
/// less than one tick either way.
inline uint64_t coarse_now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

/// coarse_now_ns()'s resolution (one timer tick: 4 ms at HZ=250), read once.
inline uint64_t coarse_tick_ns() {
  static const uint64_t tick = []() -> uint64_t {
    timespec ts{};
    if (clock_getres(CLOCK_MONOTONIC_COARSE, &ts) != 0) return 1000000000;
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
  }();
  return tick;
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
  /// `ms` from the first time the deadline is looked at, not from now: for
  /// the default timeouts of calls whose fast path never consults them
  /// (a clock read is tens of ns on a VM, several per small op otherwise).
  static Deadline lazy_ms(uint64_t ms) {
    if (ms >= UINT64_MAX / 2000000) return never();
    Deadline d(0);
    d.lazy_ns_ = ms * 1000000;
    return d;
  }
  /// `us` from the first clock read that looks at it (fix(), or any query):
  /// for caller-given timeouts of calls that spin a few polls before their
  /// first clock read; the wait fixes it there, within about a microsecond
  /// of the call. 0 is already expired.
  static Deadline lazy_us(uint64_t us) {
    if (us == 0) return Deadline(0);
    if (us >= UINT64_MAX / 2000) return never();
    Deadline d(0);
    d.lazy_ns_ = us * 1000;
    return d;
  }
  explicit Deadline(uint64_t at_ns) : at_ns_(at_ns) {}
  /// Starts a lazy deadline at `now` (a clock value the caller just read).
  void fix(uint64_t now) const {
    if (lazy_ns_ != 0) {
      at_ns_ = now + lazy_ns_;
      lazy_ns_ = 0;
    }
  }
  bool expired() const {
    uint64_t at = at_ns();
    return at != UINT64_MAX && now_ns() >= at;
  }
  uint64_t at_ns() const {
    if (lazy_ns_ != 0) {
      at_ns_ = now_ns() + lazy_ns_;
      lazy_ns_ = 0;
    }
    return at_ns_;
  }
  /// Remaining time in ms for poll(2)/epoll_wait: -1 when never, rounded up.
  int remaining_ms() const {
    uint64_t at = at_ns();
    if (at == UINT64_MAX) return -1;
    uint64_t now = now_ns();
    if (now >= at) return 0;
    uint64_t ms = (at - now + 999999) / 1000000;
    return ms > 1000000 ? 1000000 : static_cast<int>(ms);
  }
  uint64_t remaining_ns() const {
    uint64_t at = at_ns();
    uint64_t now = now_ns();
    return now >= at ? 0 : at - now;
  }

 private:
  mutable uint64_t at_ns_;
  mutable uint64_t lazy_ns_ = 0;  // nonzero: at_ns_ is not fixed yet
};

}  // namespace lt
