// Membership kept in etcd (cluster.backend: etcd): the replicated store is
// the control plane, so there is no ltier-manager to run or to lose.
//
// Under cluster.etcd_prefix (P), a node:
//   P/token          the cluster token, set by the first node ever (a txn)
//   P/gen/<slot>     the slot's generation, raised by every join that takes
//                    it; ids are generation x kNodeSlots + slot, so an id is
//                    never handed out twice while etcd keeps its data
//   P/members/<slot> this node's record (control.h Member) with an HMAC
//                    under the cluster secret, on this node's lease
//   P/names/<name>   a registered name -> node id, on the lease
//   P/locks/<name>\0<node>.<owner>  a lock request; the oldest holds it
//   P/barriers/<name>\0...          a barrier's generation and arrivals
// Everything a node owns is on its lease, kept alive by a keeper thread
// every third of the lease time; a node that dies (or stalls past the lease
// time) loses its keys and the others see it down. A watcher thread follows
// P/members/ and turns puts and deletes into up and down events.
//
// etcd out of reach (killed, restarted, partitioned): the data path goes on;
// names, locks and barriers fail with kPeerDown; the node reports
// kManagerLost, and kRejoined once its lease is kept alive again (etcd
// renews leases when it restarts). A lease that expired meanwhile means the
// cluster saw this node leave: kExpelled, and the application joins again
// under a new id.
//
// Thread contract: as Membership's. The address book and the event queue
// are under mu_; the keeper and the watcher hand events to the progress
// thread through an eventfd (fd()).
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "proto/etcd/client.h"
#include "proto/membership.h"

namespace lt::proto {

class EtcdMembership final : public Membership {
 public:
  EtcdMembership();
  ~EtcdMembership() override;
  /// kPeerDown when no etcd endpoint answers, kNoResource when every slot
  /// is taken, kTimedOut.
  Status join(const JoinInfo& info, Deadline d) override;
  void leave() override;
  NodeId self() const override { return self_; }
  uint64_t cluster_token() const override { return token_; }

  int fd() const override { return event_fd_; }
  Status on_readable(std::vector<Event>* events) override;
  int heartbeat(uint64_t) override { return 1000; }  // the keeper thread keeps the lease
  void set_waker(std::function<void()>) override {}
  bool rejoin_ready() const override { return false; }
  bool finish_rejoin(std::vector<Event>*) override { return false; }

  std::optional<transport::PeerInfo> peer(NodeId n) const override;
  std::vector<Member> members() const override;

  /// Names live on the lease: they go when this node does.
  Status register_name(const std::string& name, Deadline d) override;
  Status unregister_name(const std::string& name, Deadline d) override;
  Result<NodeId> lookup_name(const std::string& name, Deadline d) override;
  /// FIFO-fair: requests queue by their creation revision (etcd_sync.cc).
  Status lock(const std::string& name, uint64_t owner, Deadline d) override;
  Status unlock(const std::string& name, uint64_t owner, Deadline d) override;
  /// Reusable, as the manager's: `count` arrivals release a generation.
  Status barrier(const std::string& name, uint32_t count, Deadline d) override;

 private:
  Status take_token(Deadline d);
  Status take_slot(const JoinInfo& info, Deadline d);
  Status load_members(Deadline d, bool report);
  std::string sealed(const std::string& key, const Member& m) const;
  bool unseal(const std::string& key, const std::string& value, Member* m) const;
  void keeper_loop();
  void watcher_loop();
  bool on_watch(const etcd::Json& msg, bool* resync);
  void push(Event::Kind k, NodeId n);  // with mu_ held
  void stop_threads();
  std::string lock_key(const std::string& name, uint64_t owner) const;

  std::string secret_, prefix_;
  std::unique_ptr<etcd::Client> client_;
  NodeId self_ = 0;
  uint64_t token_ = 0;
  int64_t lease_ = 0;
  uint32_t lease_ms_ = 3000;
  int event_fd_ = -1;
  std::thread keeper_, watcher_;
  std::unique_ptr<etcd::WatchStream> watch_;
  int64_t revision_ = 0;  // the watcher's: the newest revision applied

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  bool stopping_ = false;
  bool lost_ = false;      // etcd out of reach
  bool expelled_ = false;  // this node's lease expired
  std::map<NodeId, Member> members_;
  std::vector<Event> queued_;
};

}  // namespace lt::proto
