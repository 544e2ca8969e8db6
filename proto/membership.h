// How an engine learns who is in the cluster: the membership service it
// joins through. It hands out this node's id and the cluster token, keeps
// the address book, reports members coming and going, and serves the name
// directory, named locks and barriers. ltier-manager's protocol
// (ManagerMembership) is the one built in; a launcher's or a store's (PMIx,
// etcd) slots in beside it behind this interface without the engine
// changing.
//
// Thread contract: join() and leave() are the engine's lifecycle calls;
// fd(), on_readable(), heartbeat(), rejoin_ready() and finish_rejoin() are
// the progress thread's; the rest may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/status.h"
#include "common/time.h"
#include "proto/control.h"
#include "transport/transport.h"

namespace lt::proto {

using transport::NodeId;

/// What a node joins with.
struct JoinInfo {
  ClusterConfig cluster;
  std::string tenant;
  std::string addresses;  // transport::format_addresses() of its transports
  uint32_t rank = kNoRank;
};

class Membership {
 public:
  struct Event {
    enum Kind : uint8_t {
      kUp,           // `node` joined
      kDown,         // `node` left or was declared down
      kExpelled,     // this node (`node`) was declared down, or refused back
      kManagerLost,  // the service is out of reach; reconnecting
      kRejoined,     // back with the service under the same id
    };
    Kind kind;
    NodeId node;
  };

  virtual ~Membership() = default;

  /// Starts what join() needs from the service before this node's
  /// addresses are known (a connection), so that the service's answer is
  /// on its way while the transports start. Optional; join() reports any
  /// failure.
  virtual void prepare(const ClusterConfig& /*cluster*/, Deadline /*d*/) {}
  /// Blocks until the service admits or refuses this node. kAuth (secret),
  /// kPeerDown (unreachable), kTimedOut, kNoResource (full).
  virtual Status join(const JoinInfo& info, Deadline d) = 0;
  virtual void leave() = 0;
  virtual NodeId self() const = 0;
  virtual uint64_t cluster_token() const = 0;

  // ---- progress thread
  /// A descriptor to wait on for on_readable(), or -1.
  virtual int fd() const = 0;
  /// Reads what arrived; kPeerDown when the service connection is lost.
  virtual Status on_readable(std::vector<Event>* events) = 0;
  /// Keeps this node alive for the service; the ms until the next call.
  virtual int heartbeat(uint64_t now_ns) = 0;
  /// How the service wakes the progress thread for finish_rejoin().
  virtual void set_waker(std::function<void()> wake) = 0;
  virtual bool rejoin_ready() const = 0;
  /// Installs a reconnection (true: watch fd() again), reporting the members
  /// that came and went meanwhile, or kExpelled.
  virtual bool finish_rejoin(std::vector<Event>* events) = 0;

  // ---- address book
  virtual std::optional<transport::PeerInfo> peer(NodeId n) const = 0;
  virtual std::vector<Member> members() const = 0;

  // ---- name directory, locks, barriers (kTimedOut, kPeerDown when the
  // service is out of reach, kUnsupported where it has none)
  virtual Status register_name(const std::string& name, Deadline d) = 0;
  virtual Status unregister_name(const std::string& name, Deadline d) = 0;
  virtual Result<NodeId> lookup_name(const std::string& name, Deadline d) = 0;
  /// `owner` tells the holders on one node apart (the calling thread).
  virtual Status lock(const std::string& name, uint64_t owner, Deadline d) = 0;
  virtual Status unlock(const std::string& name, uint64_t owner, Deadline d) = 0;
  virtual Status barrier(const std::string& name, uint32_t count, Deadline d) = 0;
};

/// The membership service `cluster` asks for (cluster.backend).
std::unique_ptr<Membership> make_membership(const ClusterConfig& cluster);

/// An address book's entry for `n` as the transports want it (the address
/// list handed on as is), and all of its members: shared by the backends.
std::optional<transport::PeerInfo> peer_in(const std::map<NodeId, Member>& book, NodeId n);
std::vector<Member> members_in(const std::map<NodeId, Member>& book);

/// cluster.node_name, or host.pid when it is empty.
std::string default_node_name(const std::string& configured);

}  // namespace lt::proto
