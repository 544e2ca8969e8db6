// The hello that opens a connection of a transport that crosses a network
// (tcp, and the rc control channel): who is calling, whom it means to reach,
// the cluster token, a counter against replays and a MAC under the
// cluster's hello key (derived from the secret, so the token, which crosses
// the wire, is not enough to forge one).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "common/mac.h"
#include "transport/transport.h"

namespace lt::transport {

/// `counter` grows with every hello a transport sends; a receiver refuses a
/// hello whose counter is not above the last it accepted from that node, so
/// a captured hello cannot be replayed. The MAC covers the fields before it
/// and the transport's label.
struct HelloBody {
  uint32_t node;           // sender's node id
  uint32_t to;             // the node the sender means to reach: any other refuses
                           // (an address now served by another process)
  uint64_t cluster_token;  // the cluster's token
  uint64_t counter;
  std::byte mac[kMacBytes];
};
static_assert(sizeof(HelloBody) == 56);

/// `label` names the transport and version ("ltier tcp hello v1"), so a
/// hello made for one transport is refused by another.
HelloBody make_hello(std::string_view label, NodeId node, NodeId to, uint64_t token,
                     uint64_t counter, const Mac& key);
bool hello_mac_ok(std::string_view label, const HelloBody& h, const Mac& key);

/// The receiving side: per node slot, the newest node and the last counter
/// accepted from it. Not thread-safe (the poller's).
class HelloCheck {
 public:
  explicit HelloCheck(std::string_view label) : label_(label) {}
  /// True when `h` is meant for `self` in the cluster of `token`, carries a
  /// good MAC and is newer than every hello accepted from its slot.
  bool accept(const HelloBody& h, NodeId self, uint64_t token, const Mac& key);

 private:
  struct Seen {
    NodeId node = kNoNode;
    uint64_t counter = 0;
  };
  std::string_view label_;
  std::vector<Seen> seen_ = std::vector<Seen>(kNodeSlots);
};

}  // namespace lt::transport
