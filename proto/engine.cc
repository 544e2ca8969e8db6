// Engine lifecycle: construction, join, leave, and what happens when a peer
// goes away.
#include "proto/engine.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "common/log.h"
#include "common/net.h"

namespace lt::proto {

Engine::Engine(const Config& config)
    : config_(config),
      wait_gauge_(config.engine.spin_us * 1000ull, kMaxLearnedSpinNs),
      serve_gauge_(config.engine.progress_spin_us * 1000ull, kMaxLearnedSpinNs),
      sched_(config.qos),
      membership_(make_membership(config.cluster)),
      lmrs_(1u << 16),
      client_(config),
      peers_(kMaxNodes),
      credits_(config.engine.msg_credits, config.engine.rpc_ring_slots, kMaxNodes),
      stage_(config.shm.stage_bytes, [this](uint64_t capacity) {
        return transports_.memory()->alloc_memory(capacity, transport::Access::kRemoteRead);
      }) {
  cq_.resize(kCqBatch);
}

Engine::~Engine() {
  leave();
  if (wake_fd_ >= 0) close(wake_fd_);
  if (poller_epfd_ >= 0) close(poller_epfd_);
  if (poller_fd_ >= 0) close(poller_fd_);
}

std::string Engine::local_address(std::string_view transport) const {
  for (const auto& a : transports_.addresses()) {
    if (a.transport == transport) return a.address;
  }
  return "";
}

Result<Member> Engine::node_info(NodeId node) const {
  LT_RETURN_IF_ERROR(usable());
  for (Member& m : membership_->members()) {
    if (m.node == node) return std::move(m);
  }
  return Code::kNotFound;
}

namespace {
// The member with the highest id that `match` accepts, looking again until `d`: a node
// may join after the caller (all ranks of a job start together).
template <typename Match>
Result<NodeId> find_member(const Membership& members, Deadline d, Match&& match) {
  for (;;) {
    NodeId found = 0;
    for (const Member& m : members.members()) {
      if (match(m) && m.node > found) found = m.node;
    }
    if (found != 0) return found;
    if (d.expired()) return Code::kNotFound;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}
}  // namespace

Result<NodeId> Engine::node_by_name(const std::string& name, Deadline d) const {
  LT_RETURN_IF_ERROR(usable());
  return find_member(*membership_, d, [&](const Member& m) { return m.name == name; });
}

Result<NodeId> Engine::node_by_rank(uint32_t rank, Deadline d) const {
  LT_RETURN_IF_ERROR(usable());
  if (rank == kNoRank) return Code::kInvalidArg;
  return find_member(*membership_, d, [&](const Member& m) { return m.rank == rank; });
}

Result<std::pair<std::string, std::string>> Engine::peer_transport(NodeId node) {
  LT_RETURN_IF_ERROR(usable());
  if (node == self()) return std::pair<std::string, std::string>{"self", "this node"};
  EndpointRef ep;
  LT_RETURN_IF_ERROR(endpoint(node, default_deadline(), &ep));
  transport::Transport* t = peers_.via(node);
  const char* why = peers_.why(node);
  if (t == nullptr) return Code::kPeerDown;
  return std::pair<std::string, std::string>{t->name(), why ? why : ""};
}

Status Engine::join() {
  if (joined_.load()) return Code::kInvalidArg;
  LT_DEBUG("join: start");
  // Zero credits would refuse every message or call with AGAIN, for good.
  if (config_.engine.msg_credits == 0 || config_.engine.rpc_ring_slots == 0) {
    LT_ERROR("engine.msg_credits and engine.rpc_ring_slots must be at least 1 (got %u and %u)",
             config_.engine.msg_credits, config_.engine.rpc_ring_slots);
    return Code::kInvalidArg;
  }
  if (!membership_) return Code::kInvalidArg;  // cluster.backend (logged by make_membership)
  // The QoS policy for this tenant, before anything starts: a bad tenant or
  // class refuses the join with nothing half-configured.
  if (std::string why; !sched_.start(&why).is_ok()) {
    LT_ERROR("join: %s", why.c_str());
    return Code::kInvalidArg;
  }
  sched_.set_slot_capacity(client_.requests.capacity());
  credits_.set_quotas(sched_.msg_credit_quota(), sched_.rpc_credit_quota());
  uint32_t rank = kNoRank;
  if (const std::string& r = config_.cluster.rank; !r.empty()) {
    char* end = nullptr;
    unsigned long v = std::strtoul(r.c_str(), &end, 10);
    if (r.find_first_not_of("0123456789") != std::string::npos || *end != 0 || v >= kNoRank) {
      LT_ERROR("cluster.rank (LTIER_RANK) '%s' is not a rank: a whole number below %u", r.c_str(),
               kNoRank);
      return Code::kInvalidArg;
    }
    rank = static_cast<uint32_t>(v);
  }
  // The membership service's answer is on its way while the transports
  // start (one wait on another process, not two in a row).
  Deadline d = Deadline::after_ms(config_.cluster.join_timeout_ms);
  membership_->prepare(config_.cluster, d);
  // The reclamation barrier's registration takes a kernel grace period:
  // under way while we join, not in the first operation's way.
  Quiescence::prepare();
  LT_RETURN_IF_ERROR(transports_.build(config_));
  max_payload_ = transports_.max_msg();
  const std::string addresses = transport::format_addresses(transports_.addresses());
  LT_DEBUG("join: transports up at %s", addresses.c_str());
  LT_RETURN_IF_ERROR(
      membership_->join(JoinInfo{config_.cluster, config_.qos.tenant, addresses, rank}, d));
  self_ = membership_->self();
  LT_DEBUG("join: admitted as node %u", self_);
  for (const Member& m : membership_->members()) claim_peer(m.node);  // self included
  const Mac key = hello_key(config_.cluster.secret, membership_->cluster_token());
  for (auto& t : transports_.all()) {
    t->set_identity(membership_->self(), membership_->cluster_token(), key);
  }
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  open_poller_set();
  membership_->set_waker([fd = wake_fd_] { net::ring_eventfd(fd); });
  running_.store(true);
  joined_.store(true);
  progress_thread_ = std::thread([this] { progress_loop(); });
  if (config_.engine.rpc_workers > 0) {
    rpc_workers_.start(config_.engine.rpc_workers, max_payload_ - sizeof(MsgHeader),
                       [this](const RpcJob& job, std::span<std::byte> out) {
                         run_rpc(job.src, job.caller_req, *job.fn, job.in, out);
                       });
  }
  LT_INFO("joined as node %u, %s", membership_->self(), addresses.c_str());
  return Status::ok();
}

void Engine::leave() {
  if (!joined_.exchange(false)) return;
  for (auto& t : transports_.all()) t->flush();  // messages senders held back go first
  membership_->leave();
  rpc_workers_.stop();
  running_.store(false);
  net::ring_eventfd(wake_fd_);
  if (progress_thread_.joinable()) progress_thread_.join();
  stage_.close([this](const transport::MemRegion& r) { transports_.memory()->free_memory(r); });
  RequestTable& reqs = client_.requests;
  for (uint32_t i = 0, n = reqs.size(); i < n; ++i) {
    Request* r = reqs.at(i);
    if (r->claim_if_live()) finish(r, Code::kClosed);
  }
  events_.close();
}

bool Engine::on_manager_readable(std::vector<Membership::Event>* events) {
  events->clear();
  Status s = membership_->on_readable(events);
  apply_events(*events);
  return s.is_ok();
}

bool Engine::claim_peer(NodeId p) {
  switch (peers_.claim(p)) {
    case PeerTable::Claim::kHeld:
      return true;
    case PeerTable::Claim::kStale:
      return false;
    case PeerTable::Claim::kTaken:
      break;
  }
  rings_.forget(p);  // an older node's, in this slot
  {
    std::lock_guard<SpinLock> g(client_.ports.mutex());  // serialized as reset() is
    credits_.rekey(p);
  }
  credits_.returned();  // a caller refused credits meanwhile tries again
  return true;
}

void Engine::apply_events(const std::vector<Membership::Event>& events) {
  for (const Membership::Event& e : events) {
    if (e.kind == Membership::Event::kUp) claim_peer(e.node);
    if (e.kind == Membership::Event::kDown) peer_gone(e.node, true);
    if (e.kind == Membership::Event::kExpelled) expel();
    events_.push(e.kind, e.node);
  }
}

// A node the manager declared down while it was alive (stopped, or stalled
// past the down time), or whose claim back a restarted manager refused, is
// gone for the cluster: its peers failed what they had in flight with it
// and freed its LMRs. It must not go on as if nothing happened, so it fails
// loudly: what is in flight fails with kClosed, and so does every later
// call; the application sees an expelled event and may join again.
void Engine::expel() {
  if (expelled_.exchange(true)) return;
  LT_ERROR(
      "the cluster (%s) declared this node (%u) down or refused it back: it was silent past "
      "the down time (stopped or stalled?), or a restarted manager did not know it. Every call "
      "now fails with LT_ERR_CLOSED; leave and join again to rejoin under a new id",
      config_.cluster.backend.c_str(), self());
  RequestTable& reqs = client_.requests;
  for (uint32_t i = 0, n = reqs.size(); i < n; ++i) {
    Request* r = reqs.at(i);
    if (r->claim_if_live()) finish(r, Code::kClosed);
  }
  credits_.returned();  // callers waiting for credits retry and see it
}

// A peer's connection broke (member_down false: it may come back on a new
// one) or the manager declared it down (for good). Either way what was in
// flight to it fails and what it held here goes back.
void Engine::peer_gone(NodeId n, bool member_down) {
  if (member_down) {
    LT_INFO("node %u is down", n);
    claim_peer(n);  // a node never seen here: its slot says so from now on
    peers_.mark_down(n);
    rings_.forget(n);
  } else {
    LT_INFO("connection to node %u lost", n);
  }
  peers_.retire(n);
  fail_requests_to(n, Code::kPeerDown);
  stage_.release_peer(n);
  if (!member_down) {
    // The connection's credits are lost with it: both ends start afresh.
    std::lock_guard<SpinLock> g(client_.ports.mutex());
    credits_.reset(n);
  }
  credits_.returned();  // callers waiting for its credits retry and see it gone
  if (member_down) {
    // The LMRs this node holds for it: nobody can free them any more (only a
    // master handle can), so they go as if it had freed them; handles mapped
    // by others then fail with BAD_HANDLE.
    // What it sent that nobody received yet would stay for good otherwise.
    size_t msgs = client_.ports.drop_from(n), calls = client_.rpcs.drop_waiting_from(n);
    if (msgs + calls != 0) {
      LT_INFO("dropped %zu unreceived messages and %zu untaken calls of node %u", msgs, calls, n);
    }
    // Last: a test sees the LMRs gone, so everything above is done by then.
    size_t n_freed = lmrs_.erase_master(n);
    if (n_freed != 0) LT_INFO("freed %zu LMRs of node %u", n_freed, n);
  }
}

EngineStats Engine::stats() const {
  return {served_.load(),     malformed_.load(),    late_.load(),
          ring_calls_.load(), ring_replies_.load(), split_recvs_.load()};
}

std::vector<PeerTraffic> Engine::peer_traffic() const {
  std::vector<PeerTraffic> all = traffic_.snapshot();
  // A node gone from its slot may still have counts in some thread's block.
  std::erase_if(all, [&](const PeerTraffic& t) { return !peers_.owns(t.node); });
  return all;
}

std::vector<std::pair<std::string, transport::TransportStats>> Engine::transport_stats() const {
  std::vector<std::pair<std::string, transport::TransportStats>> out;
  for (const auto& t : transports_.all()) out.emplace_back(t->name(), t->stats());
  return out;
}

}  // namespace lt::proto
