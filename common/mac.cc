#include "common/mac.h"

#include <sodium.h>

#include <cstdint>
#include <cstdlib>

#include "common/log.h"

namespace lt {

namespace {
// libsodium's one-time setup (thread-safe; later calls are no-ops). It keeps
// no per-thread state, so threads that make MACs and exit leave nothing.
void ready() {
  static const bool ok = sodium_init() >= 0;
  if (!ok) {
    // Without its random source nothing here is safe to hand out.
    LT_ERROR("libsodium could not initialize (no random source?)");
    abort();
  }
}
}  // namespace

Mac hmac(std::string_view key, std::initializer_list<std::span<const std::byte>> parts) {
  ready();
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, reinterpret_cast<const unsigned char*>(key.data()), key.size());
  for (auto p : parts) {
    uint64_t n = p.size();  // little-endian on every host ltier runs on
    crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(&n), sizeof(n));
    crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(p.data()), p.size());
  }
  Mac out{};
  static_assert(sizeof(out) == crypto_auth_hmacsha256_BYTES);
  crypto_auth_hmacsha256_final(&st, reinterpret_cast<unsigned char*>(out.data()));
  sodium_memzero(&st, sizeof(st));
  return out;
}

void prepare_mac() { ready(); }

bool make_nonce(Nonce* out) {
  ready();
  randombytes_buf(out->data(), out->size());
  return true;
}

bool same_mac(std::span<const std::byte> a, std::span<const std::byte> b) {
  return a.size() == b.size() && sodium_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace lt
