#include "common/mac.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstdlib>

#include "common/log.h"

namespace lt {

Mac hmac(std::string_view key, std::initializer_list<std::span<const std::byte>> parts) {
  Mac out{};
  EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  EVP_MAC_CTX* ctx = mac ? EVP_MAC_CTX_new(mac) : nullptr;
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string("digest", digest, 0),
                         OSSL_PARAM_construct_end()};
  size_t len = 0;
  bool ok = ctx != nullptr && EVP_MAC_init(ctx, reinterpret_cast<const unsigned char*>(key.data()),
                                           key.size(), params) == 1;
  for (auto p : parts) {
    if (!ok) break;
    uint64_t n = p.size();  // little-endian on every host ltier runs on
    ok = EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(&n), sizeof(n)) == 1 &&
         EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(p.data()), p.size()) == 1;
  }
  ok = ok &&
       EVP_MAC_final(ctx, reinterpret_cast<unsigned char*>(out.data()), &len, out.size()) == 1 &&
       len == out.size();
  EVP_MAC_CTX_free(ctx);
  EVP_MAC_free(mac);
  // A libcrypto that cannot compute HMAC-SHA256 is a broken installation; a
  // zero MAC would authenticate anything, so stop here instead.
  if (!ok) {
    LT_ERROR("libcrypto could not compute HMAC-SHA256: the OpenSSL installation is broken");
    abort();
  }
  return out;
}

bool make_nonce(Nonce* out) {
  return RAND_bytes(reinterpret_cast<unsigned char*>(out->data()), static_cast<int>(out->size())) ==
         1;
}

bool same_mac(std::span<const std::byte> a, std::span<const std::byte> b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace lt
