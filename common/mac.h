// Message authentication for the control plane: HMAC-SHA256 from libsodium
// (no hand-rolled cryptography), fresh random nonces from its CSPRNG, and a
// constant-time comparison. The cluster secret is the key; it never goes on
// the wire.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string_view>

namespace lt {

inline constexpr size_t kMacBytes = 32;    // HMAC-SHA256
inline constexpr size_t kNonceBytes = 32;  // per handshake, from the OS's CSPRNG

using Mac = std::array<std::byte, kMacBytes>;
using Nonce = std::array<std::byte, kNonceBytes>;

/// HMAC-SHA256 under `key` of the concatenation of `parts`, each prefixed by
/// its length (so part boundaries are authenticated too).
Mac hmac(std::string_view key, std::initializer_list<std::span<const std::byte>> parts);

/// A fresh nonce (libsodium's randombytes; it aborts rather than return a
/// weak one). Always true.
bool make_nonce(Nonce* out);

/// Sets libsodium up now rather than at the first MAC or nonce: its set-up
/// probes the CPU (cpuid), tens of µs under a hypervisor, better spent while
/// waiting for a peer.
void prepare_mac();

/// Equal, in time independent of where the first difference is.
bool same_mac(std::span<const std::byte> a, std::span<const std::byte> b);

inline std::span<const std::byte> as_bytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

}  // namespace lt
