// SipHash-2-4 (Aumasson & Bernstein): a keyed 64-bit PRF. ltier uses it for
// LMR capabilities: the owner of an LMR keeps a random 128-bit key and checks
// that a request's capability equals siphash(key, lmr id, rights).
#pragma once

#include <cstddef>
#include <cstdint>

namespace lt {

struct SipKey {
  uint64_t k0 = 0, k1 = 0;
};

uint64_t siphash24(const SipKey& key, const void* data, size_t len);

/// 64 bits from the kernel's CSPRNG (getrandom).
uint64_t random_u64();

}  // namespace lt
