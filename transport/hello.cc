#include "transport/hello.h"

#include <cstring>
#include <span>

#include "common/log.h"

namespace lt::transport {

namespace {
constexpr size_t kHelloSigned = offsetof(HelloBody, mac);
Mac hello_mac(std::string_view label, const HelloBody& h, const Mac& key) {
  return hmac(std::string_view(reinterpret_cast<const char*>(key.data()), key.size()),
              {as_bytes(label),
               std::span<const std::byte>(reinterpret_cast<const std::byte*>(&h), kHelloSigned)});
}
}  // namespace

HelloBody make_hello(std::string_view label, NodeId node, NodeId to, uint64_t token,
                     uint64_t counter, const Mac& key) {
  HelloBody h{};
  h.node = node;
  h.to = to;
  h.cluster_token = token;
  h.counter = counter;
  Mac m = hello_mac(label, h, key);
  std::memcpy(h.mac, m.data(), m.size());
  return h;
}

bool hello_mac_ok(std::string_view label, const HelloBody& h, const Mac& key) {
  return same_mac(std::span<const std::byte>(h.mac, kMacBytes), hello_mac(label, h, key));
}

bool HelloCheck::accept(const HelloBody& h, NodeId self, uint64_t token, const Mac& key) {
  if (token == 0 || h.cluster_token != token || h.to != self || h.node == kNoNode ||
      h.node == self || !hello_mac_ok(label_, h, key)) {
    return false;
  }
  Seen& seen = seen_[node_slot(h.node)];
  if (h.node < seen.node || (h.node == seen.node && h.counter <= seen.counter)) {
    LT_WARN("%.*s: refused a replayed or stale hello from node %u (counter %llu)",
            static_cast<int>(label_.size()), label_.data(), h.node,
            static_cast<unsigned long long>(h.counter));
    return false;
  }
  seen = {h.node, h.counter};
  return true;
}

}  // namespace lt::transport
