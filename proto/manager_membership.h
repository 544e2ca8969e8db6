// The membership service of ltier-manager, a node's side of its control
// protocol: joins through the manager (an authenticated handshake, control.h), keeps the address
// book, sends heartbeats, turns manager pushes into membership events, and asks the manager's name
// directory. The socket is read only by the progress thread (on_readable); name requests may come
// from any thread and wait for the progress thread to deliver their reply.
//
// When the manager connection breaks (the manager died or restarted), a
// rejoin thread reconnects with backoff and claims this node's id back,
// with the locks it holds and the names it registered; the progress thread
// then installs the new connection (finish_rejoin). Meanwhile the data path
// is untouched and calls that need the manager fail with kPeerDown.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/config.h"
#include "common/net.h"
#include "proto/control.h"
#include "proto/membership.h"
#include "transport/transport.h"

namespace lt::proto {

using transport::NodeId;

/// Optional trailing fields of a control request.
struct CtlArgs {
  bool has_u64 = false;
  uint64_t u64 = 0;
  bool has_u32 = false;
  uint32_t u32 = 0;
  static CtlArgs of_u64(uint64_t v) {
    CtlArgs a;
    a.has_u64 = true;
    a.u64 = v;
    return a;
  }
  static CtlArgs of_u32(uint32_t v) {
    CtlArgs a;
    a.has_u32 = true;
    a.u32 = v;
    return a;
  }
};

class ManagerMembership final : public Membership {
 public:
  ~ManagerMembership() override;
  /// kAuth for a wrong secret (or a manager that does not know it).
  /// Connects to the manager, whose challenge then comes while the
  /// transports start.
  void prepare(const ClusterConfig& cluster, Deadline d) override;
  Status join(const JoinInfo& info, Deadline d) override;
  void leave() override;
  /// Called by the rejoin thread once a new connection is ready or the claim
  /// was refused: wakes the progress thread, which calls finish_rejoin().
  void set_waker(std::function<void()> wake) override { wake_ = std::move(wake); }
  /// Whether a lost manager connection is reconnected (default yes). A
  /// program that drives one connection by hand (the fuzz target) says no.
  void set_reconnect(bool on) { reconnect_ = on; }
  /// Progress thread, cheap: a rejoin attempt has an outcome to install.
  bool rejoin_ready() const override { return rejoin_ready_.load(std::memory_order_acquire); }
  /// Progress thread: installs the new connection and reports the members
  /// that came and went meanwhile (or kExpelled). True when the manager
  /// socket (fd()) is to be watched again.
  bool finish_rejoin(std::vector<Event>* events) override;

  NodeId self() const override { return self_; }
  uint64_t cluster_token() const override { return token_; }
  int fd() const override { return fd_.get(); }
  uint32_t heartbeat_ms() const { return heartbeat_ms_; }

  /// Progress thread: reads pushes and replies. kPeerDown when the manager
  /// connection is lost.
  Status on_readable(std::vector<Event>* events) override;
  /// Progress thread: sends a heartbeat if one is due; returns ms until the next.
  int heartbeat(uint64_t now_ns) override;

  std::optional<transport::PeerInfo> peer(NodeId n) const override;
  std::vector<Member> members() const override;
  bool alive(NodeId n) const;

  /// Name directory. kExists, kNotFound, kPerm, kTimedOut, kPeerDown.
  Status register_name(const std::string& name, Deadline d) override;
  Status unregister_name(const std::string& name, Deadline d) override;
  Result<NodeId> lookup_name(const std::string& name, Deadline d) override;
  /// Locks and barriers, served by the manager (FIFO-fair locks, reusable
  /// barriers). A timed-out wait is withdrawn.
  Status lock(const std::string& name, uint64_t owner, Deadline d) override;
  Status unlock(const std::string& name, uint64_t owner, Deadline d) override;
  Status barrier(const std::string& name, uint32_t count, Deadline d) override;

 private:
  // A request to the manager answered by kNameReply; blocks until the
  // answer or the deadline. *req_out gets the request id (to withdraw it).
  Result<NodeId> name_call(CtlType t, const std::string& name, Deadline d, const CtlArgs& args = {},
                           uint64_t* req_out = nullptr);
  // Sends a request whose answer nobody waits for (withdrawals).
  Status post_only(CtlType t, uint64_t req, const std::string& name, const CtlArgs& args);
  uint64_t new_req();
  // The lock holder's bookkeeping, carried by a claim after a manager
  // restart. False when `held` is false and the lock was not noted as held.
  bool note_lock(const std::string& name, uint64_t owner, bool held);
  // A connection to cluster_.manager into *fd.
  Status open_manager(Deadline d, net::Fd* fd, bool quiet);
  // One handshake on a new connection (*fd, opened here unless valid):
  // *answer is the kJoinOk's contents. kClosed when the manager refused a
  // claim back.
  Status handshake(const JoinRequest& j, Deadline d, net::Fd* fd, CtlStream* in,
                   std::string* answer);
  // A kJoinOk's contents into self_, token_ and members_.
  Status adopt(const std::string& answer, std::map<NodeId, Member>* members);
  void handle_push(const std::string& payload, std::vector<Event>* events);
  std::string ctl_frame(CtlType t, uint64_t req, const std::string& name, const CtlArgs& a);
  Status send_frame(const std::string& f, Deadline d);
  void rejoin_loop();
  void stop_rejoin();

  ClusterConfig cluster_;
  JoinRequest request_;  // the fresh join's fields; a claim adds the rest
  net::Fd fd_;
  Status prepared_;  // prepare()'s connection: failed with this, or fd_
  NodeId self_ = 0;
  uint64_t token_ = 0;
  uint32_t heartbeat_ms_ = 200;
  uint64_t next_beat_ns_ = 0;
  CtlStream in_;
  std::function<void()> wake_;
  bool reconnect_ = true;
  std::thread rejoiner_;
  std::atomic<bool> rejoin_ready_{false};
  std::atomic<bool> lost_{false};  // heartbeats pause while the manager is away

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  std::map<NodeId, Member> members_;
  bool manager_lost_ = false;
  bool leaving_ = false;
  bool expelled_ = false;
  std::map<uint32_t, NodeId> seen_;  // per slot, the newest id seen
  void note_seen(NodeId n) {
    NodeId& s = seen_[node_slot(n)];
    s = std::max(s, n);
  }
  std::set<std::pair<std::string, uint64_t>> held_locks_;
  std::set<std::string> my_names_;
  // The rejoin thread's outcome, for finish_rejoin: a connection and its
  // kJoinOk, or refused.
  bool rejoin_refused_ = false;
  net::Fd staged_fd_;
  CtlStream staged_in_;
  std::string staged_answer_;
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
