// Membership from a PMIx launcher (mpirun, srun): the job is the cluster.
// Each process puts its address record, one fence exchanges them, and node
// ids are the ranks + 1, so rank r is node r + 1 on every process without
// a manager. The cluster token is derived from the job's namespace and the
// cluster secret. Names go through PMIx publish/lookup where the launcher
// serves them; a barrier of the whole job is a PMIx fence; locks need a
// manager (kUnsupported). The job is fixed: there are no joins after the
// start, and a rank that dies is seen through its broken connections
// (PEER_DOWN); launchers end the job when a rank fails unless told not to.
//
// Thread contract: as Membership's. The address book is written once, in
// join(), before any other thread can read it.
#pragma once

#include <map>
#include <string>

#include "proto/membership.h"

namespace lt::proto {

class PmixMembership final : public Membership {
 public:
  ~PmixMembership() override;
  /// kPeerDown when no PMIx server is there (not started by a launcher),
  /// kNoResource for a job of more than kMaxMembers processes, kTimedOut
  /// when the fence does not complete in time.
  Status join(const JoinInfo& info, Deadline d) override;
  void leave() override;
  NodeId self() const override { return self_; }
  uint64_t cluster_token() const override { return token_; }

  int fd() const override { return -1; }
  Status on_readable(std::vector<Event>*) override { return Status::ok(); }
  int heartbeat(uint64_t) override { return 1000; }
  void set_waker(std::function<void()>) override {}
  bool rejoin_ready() const override { return false; }
  bool finish_rejoin(std::vector<Event>*) override { return false; }

  std::optional<transport::PeerInfo> peer(NodeId n) const override;
  std::vector<Member> members() const override;

  Status register_name(const std::string& name, Deadline d) override;
  Status unregister_name(const std::string& name, Deadline d) override;
  Result<NodeId> lookup_name(const std::string& name, Deadline d) override;
  Status lock(const std::string&, uint64_t, Deadline) override { return Code::kUnsupported; }
  Status unlock(const std::string&, uint64_t, Deadline) override { return Code::kUnsupported; }
  /// A fence of the whole job: `count` must be the job's size.
  Status barrier(const std::string& name, uint32_t count, Deadline d) override;

 private:
  std::string nspace_;
  uint32_t rank_ = 0, size_ = 0;
  NodeId self_ = 0;
  uint64_t token_ = 0;
  bool initialized_ = false;
  std::map<NodeId, Member> members_;  // written in join() only
};

}  // namespace lt::proto
