// A node's side of the control protocol: joins through ltier-manager, keeps
// the address book, sends heartbeats, turns manager pushes into membership
// events, and asks the manager's name directory. The socket is read only by
// the progress thread (on_readable); name requests may come from any thread
// and wait for the progress thread to deliver their reply.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/net.h"
#include "proto/control.h"
#include "transport/transport.h"

namespace lt::proto {

using transport::NodeId;

/// Optional trailing fields of a control request.
struct CtlArgs {
  bool has_u64 = false;
  uint64_t u64 = 0;
  bool has_u32 = false;
  uint32_t u32 = 0;
};

class Membership {
 public:
  struct Event {
    bool up;
    NodeId node;
  };

  /// Blocks until the manager admits or refuses this node. kAuth for a wrong
  /// secret, kPeerDown when the manager cannot be reached, kTimedOut.
  Status join(const ClusterConfig& c, const std::string& tenant, const std::string& addresses,
              uint32_t rank, Deadline d);
  void leave();

  NodeId self() const { return self_; }
  uint64_t cluster_token() const { return token_; }
  int fd() const { return fd_.get(); }
  uint32_t heartbeat_ms() const { return heartbeat_ms_; }

  /// Progress thread: reads pushes and replies. kPeerDown when the manager
  /// connection is lost.
  Status on_readable(std::vector<Event>* events);
  /// Progress thread: sends a heartbeat if one is due; returns ms until the next.
  int heartbeat(uint64_t now_ns);

  std::optional<transport::PeerInfo> peer(NodeId n) const;
  std::vector<Member> members() const;
  bool alive(NodeId n) const;

  /// A request to the manager answered by kNameReply; blocks until the
  /// answer or the deadline. *req_out gets the request id (to withdraw it).
  Result<NodeId> name_call(CtlType t, const std::string& name, Deadline d, const CtlArgs& args = {},
                           uint64_t* req_out = nullptr);
  /// Sends a request whose answer nobody waits for (withdrawals).
  Status post_only(CtlType t, uint64_t req, const std::string& name, const CtlArgs& args);
  uint64_t new_req();

  /// Name directory. kExists, kNotFound, kPerm, kTimedOut, kPeerDown.
  Status register_name(const std::string& name, Deadline d);
  Status unregister_name(const std::string& name, Deadline d);
  Result<NodeId> lookup_name(const std::string& name, Deadline d);

 private:
  void handle_push(const std::string& payload, std::vector<Event>* events);
  std::string ctl_frame(CtlType t, uint64_t req, const std::string& name, const CtlArgs& a);
  Status send_frame(const std::string& f, Deadline d);

  net::Fd fd_;
  NodeId self_ = 0;
  uint64_t token_ = 0;
  uint32_t heartbeat_ms_ = 200;
  uint64_t next_beat_ns_ = 0;
  CtlStream in_;

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  std::map<NodeId, Member> members_;
  bool manager_lost_ = false;
  bool leaving_ = false;
  uint64_t next_req_ = 1;
  struct Pending {
    bool done = false;
    Code code = Code::kOk;
    NodeId node = 0;
  };
  std::map<uint64_t, Pending> pending_;
  std::mutex send_mu_;  // one writer of the socket at a time (control path)
};

}  // namespace lt::proto
