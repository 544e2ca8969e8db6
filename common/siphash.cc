#include "common/siphash.h"

#include <sys/random.h>

#include <cstring>
#include <ctime>

namespace lt {
namespace {
inline uint64_t rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }
struct State {
  uint64_t v0, v1, v2, v3;
  void round() {
    v0 += v1;
    v1 = rotl(v1, 13);
    v1 ^= v0;
    v0 = rotl(v0, 32);
    v2 += v3;
    v3 = rotl(v3, 16);
    v3 ^= v2;
    v0 += v3;
    v3 = rotl(v3, 21);
    v3 ^= v0;
    v2 += v1;
    v1 = rotl(v1, 17);
    v1 ^= v2;
    v2 = rotl(v2, 32);
  }
};
}  // namespace

uint64_t siphash24(const SipKey& key, const void* data, size_t len) {
  State s{key.k0 ^ 0x736f6d6570736575ull, key.k1 ^ 0x646f72616e646f6dull,
          key.k0 ^ 0x6c7967656e657261ull, key.k1 ^ 0x7465646279746573ull};
  const auto* p = static_cast<const unsigned char*>(data);
  size_t full = len & ~size_t{7};
  for (size_t i = 0; i < full; i += 8) {
    uint64_t m;
    std::memcpy(&m, p + i, 8);
    s.v3 ^= m;
    s.round();
    s.round();
    s.v0 ^= m;
  }
  uint64_t last = static_cast<uint64_t>(len) << 56;
  for (size_t i = 0; i < (len & 7); ++i) last |= static_cast<uint64_t>(p[full + i]) << (8 * i);
  s.v3 ^= last;
  s.round();
  s.round();
  s.v0 ^= last;
  s.v2 ^= 0xff;
  for (int i = 0; i < 4; ++i) s.round();
  return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

uint64_t random_u64() {
  uint64_t v = 0;
  if (getrandom(&v, sizeof(v), 0) != sizeof(v)) {
    // getrandom on Linux >= 3.17 does not fail for 8 bytes once seeded; keep a
    // non-constant fallback rather than aborting.
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    v = (static_cast<uint64_t>(ts.tv_nsec) << 32) ^ static_cast<uint64_t>(ts.tv_sec) ^
        reinterpret_cast<uintptr_t>(&v);
  }
  return v;
}

}  // namespace lt
