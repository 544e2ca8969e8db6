// The bytes of a message kept until a receive takes it (an eager message
// that arrived first, an RPC queued for a server loop), and the cache of
// buffers they are kept in.
//
// Why a cache: such a buffer is allocated by the thread that polls and freed
// by the one that receives. Freed into a thread arena's top, glibc gives the
// pages back to the kernel (madvise), and the next message faults them in
// again while it is copied: a stream of 64 KiB shm messages whose receives
// lag moved a sixth of what the same stream moves by rendezvous, with page
// faults a tenth of its profile. Buffers go back to the cache instead, up to
// kKeepBytes, and the next message of their size class takes one.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <span>
#include <utility>

#include "common/spinlock.h"

namespace lt::proto {

/// Free buffers by power-of-two size class, each list threaded through the
/// buffers themselves (nothing allocated to keep them). Thread-safe: its
/// own lock, held for a list operation.
class ByteCache {
 public:
  static constexpr unsigned kMinShift = 7;   // 128 B: smaller messages are inline
  static constexpr unsigned kMaxShift = 20;  // 1 MiB: larger buffers are not kept
  static constexpr unsigned kNoClass = 0xff;
  static constexpr size_t kKeepBytes = size_t{4} << 20;  // kept at most, all classes

  ByteCache() = default;
  ByteCache(const ByteCache&) = delete;
  ByteCache& operator=(const ByteCache&) = delete;
  ~ByteCache() {
    for (std::byte*& head : free_) {
      while (head != nullptr) delete[] std::exchange(head, next_of(head));
    }
  }

  /// A buffer of at least `n` bytes (n > 0) and its class, for give().
  std::byte* take(size_t n, unsigned* cls) {
    unsigned c = std::max<unsigned>(kMinShift, std::bit_width(n - 1));
    if (c > kMaxShift) {
      *cls = kNoClass;
      return new std::byte[n];
    }
    *cls = c;
    {
      std::lock_guard<SpinLock> g(mu_);
      if (std::byte* b = free_[c]; b != nullptr) {
        free_[c] = next_of(b);
        kept_ -= size_t{1} << c;
        return b;
      }
    }
    return new std::byte[size_t{1} << c];
  }

  /// Takes back a buffer from take(): kept for the next message of its
  /// class while the cache holds less than kKeepBytes, freed otherwise.
  void give(std::byte* b, unsigned cls) {
    if (cls != kNoClass) {
      std::lock_guard<SpinLock> g(mu_);
      if (kept_ + (size_t{1} << cls) <= kKeepBytes) {
        std::memcpy(b, &free_[cls], sizeof(std::byte*));
        free_[cls] = b;
        kept_ += size_t{1} << cls;
        return;
      }
    }
    delete[] b;
  }

  size_t kept_bytes() {
    std::lock_guard<SpinLock> g(mu_);
    return kept_;
  }

 private:
  static std::byte* next_of(std::byte* b) {
    std::byte* n;
    std::memcpy(&n, b, sizeof(n));
    return n;
  }

  SpinLock mu_;
  std::byte* free_[kMaxShift + 1] = {};
  size_t kept_ = 0;
};

/// A message's bytes: inline up to kInline, so the usual small message costs
/// no allocation while the port's lock is held; above, in a buffer of the
/// cache given to assign() (or of the heap without one).
class MsgBytes {
 public:
  static constexpr size_t kInline = 64;

  MsgBytes() = default;
  MsgBytes(MsgBytes&& o) noexcept { steal(o); }
  MsgBytes& operator=(MsgBytes&& o) noexcept {
    if (this != &o) {
      drop();
      steal(o);
    }
    return *this;
  }
  ~MsgBytes() { drop(); }

  /// The cache, if given, must outlive this object.
  void assign(std::span<const std::byte> b, ByteCache* cache = nullptr) {
    drop();
    size_ = b.size();  // within the 56 bits: a message is at most max_msg_bytes (u32)
    std::byte* to = inline_;
    if (size_ > kInline) {
      unsigned cls = ByteCache::kNoClass;
      cache_ = cache;
      to = heap_ = cache != nullptr ? cache->take(size_, &cls) : new std::byte[size_];
      cls_ = cls;
    }
    if (size_ != 0) std::memcpy(to, b.data(), size_);
  }
  std::span<const std::byte> view() const { return {heap_ ? heap_ : inline_, size_}; }

 private:
  void drop() {
    if (heap_ == nullptr) return;
    if (cache_ != nullptr) {
      cache_->give(heap_, cls_);
    } else {
      delete[] heap_;
    }
    heap_ = nullptr;
    cache_ = nullptr;
  }
  void steal(MsgBytes& o) {
    size_ = o.size_;
    heap_ = std::exchange(o.heap_, nullptr);
    cache_ = std::exchange(o.cache_, nullptr);
    cls_ = o.cls_;
    if (heap_ == nullptr) std::memcpy(inline_, o.inline_, kInline);  // fixed size: no branch on it
    o.size_ = 0;
  }

  std::byte* heap_ = nullptr;
  ByteCache* cache_ = nullptr;  // heap_'s owner; null: the heap's
  size_t size_ : 56 = 0;        // a message's length fits in far fewer bits
  size_t cls_ : 8 = ByteCache::kNoClass;
  std::byte inline_[kInline];
};

}  // namespace lt::proto
