// Helpers shared by the fuzz targets (tests/fuzz/<name>_fuzz.cc). A target is
// `extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t)`, linked with
// driver.cc (ctest) or with libFuzzer (LTIER_LIBFUZZER=ON). A failed oracle is
// a crash on purpose: FUZZ_CHECK prints why and aborts, so libFuzzer and the
// driver both keep the input that caused it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace lt::fuzz {

[[noreturn, gnu::cold]] inline void fail(const char* file, int line, const char* what,
                                         const std::string& detail) {
  std::fprintf(stderr, "%s:%d: fuzz check failed: %s %s\n", file, line, what, detail.c_str());
  std::fflush(stderr);
  std::abort();
}

/// Quiets ltier's own log (LTIER_LOG=off) unless the caller chose a level:
/// targets drop connections on purpose, thousands of times.
inline void quiet_log() { setenv("LTIER_LOG", "off", 0); }

inline std::span<const std::byte> as_bytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

inline uint64_t splitmix64(uint64_t* state) {
  uint64_t x = (*state += 0x9e3779b97f4a7c15ull);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// Takes structured values off the front of a fuzz input. Past the end every
/// read gives zeros (and bytes() a shorter span), so any input is usable.
class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool empty() const { return pos_ >= size_; }
  size_t left() const { return size_ - pos_; }
  uint8_t u8() { return pos_ < size_ ? data_[pos_++] : 0; }
  // Little-endian; each step is its own statement (operands of | are unsequenced).
  uint16_t u16() {
    uint16_t lo = u8();
    return static_cast<uint16_t>(lo | u8() << 8);
  }
  uint32_t u32() {
    uint32_t lo = u16();
    return lo | static_cast<uint32_t>(u16()) << 16;
  }
  uint64_t u64() {
    uint64_t lo = u32();
    return lo | static_cast<uint64_t>(u32()) << 32;
  }
  /// Up to n bytes (fewer at the end of the input).
  std::string_view bytes(size_t n) {
    n = std::min(n, left());
    std::string_view s(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return s;
  }
  std::string_view rest() { return bytes(left()); }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace lt::fuzz

#define FUZZ_CHECK(cond, detail)                                        \
  do {                                                                  \
    if (!(cond)) ::lt::fuzz::fail(__FILE__, __LINE__, #cond, (detail)); \
  } while (0)
