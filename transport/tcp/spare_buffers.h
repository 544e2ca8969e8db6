// Buffers a tcp connection's send queue kept after draining them, for its
// next copies of large frames. A stream of writes that the socket cannot
// take at once queues a copy of each frame's unsent bytes; without a kept
// buffer every copy was a fresh allocation of up to the frame's size, and
// glibc hands blocks that large back to the kernel when they are freed, so
// each copy faulted its pages in again. Private to transport/tcp/.
#pragma once

#include <array>
#include <cstddef>
#include <mutex>
#include <string>
#include <utility>

namespace lt::transport::tcp {

class SpareBuffers {
 public:
  static constexpr size_t kMinKept = 64 * 1024;  // smaller buffers are cheap to allocate
  static constexpr size_t kGrain = 256 * 1024;   // a large buffer's size is rounded up to this
  static constexpr size_t kMaxKept = 8;          // buffers kept per connection
  static constexpr size_t kMaxKeptBytes = 16u << 20;

  /// An empty string with room for `n` bytes: a kept buffer (the smallest
  /// that fits), else a new one, its size rounded up so that it fits the
  /// next frame's unsent tail too. Allocates outside the lock.
  std::string take(size_t n) {
    if (n < kMinKept) return {};
    {
      std::lock_guard<std::mutex> g(mu_);
      size_t best = count_;
      for (size_t i = 0; i < count_; ++i) {
        const size_t cap = kept_[i].capacity();
        if (cap >= n && (best == count_ || cap < kept_[best].capacity())) best = i;
      }
      if (best != count_) {
        std::string s = std::move(kept_[best]);
        kept_[best] = std::move(kept_[--count_]);
        bytes_ -= s.capacity();
        s.clear();
        return s;
      }
    }
    std::string s;
    s.reserve((n + kGrain - 1) / kGrain * kGrain);
    return s;
  }

  /// Keeps `*s`'s buffer if it is large, in place of a smaller one when all
  /// places are taken; what is not kept (it, or the smaller one) is left in
  /// `*s` for the caller to free, outside any lock.
  void give(std::string* s) {
    const size_t cap = s->capacity();
    if (cap < kMinKept) return;
    std::lock_guard<std::mutex> g(mu_);
    if (count_ < kMaxKept && bytes_ + cap <= kMaxKeptBytes) {
      kept_[count_++] = std::move(*s);
      bytes_ += cap;
      return;
    }
    size_t smallest = 0;
    for (size_t i = 1; i < count_; ++i) {
      if (kept_[i].capacity() < kept_[smallest].capacity()) smallest = i;
    }
    const size_t old = count_ == 0 ? cap : kept_[smallest].capacity();
    if (old >= cap || bytes_ - old + cap > kMaxKeptBytes) return;
    std::swap(kept_[smallest], *s);
    bytes_ = bytes_ - old + cap;
  }

 private:
  std::mutex mu_;  // guards the fields below; held for moves only, never for an allocation
  std::array<std::string, kMaxKept> kept_;
  size_t count_ = 0;
  size_t bytes_ = 0;
};

}  // namespace lt::transport::tcp
