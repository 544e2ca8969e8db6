#include "proto/engine.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>

#include "common/log.h"
#include "common/racy.h"
#include "transport/factory.h"

namespace lt::proto {

using transport::Completion;
using transport::CqKind;
using transport::WorkRequest;

namespace {
constexpr uint32_t kStFree = 0, kStPending = 1, kStClaimed = 2, kStDone = 3, kStCancelled = 4;
// A receive whose buffer the sender may be writing into (placement): it
// cannot be cancelled, only completed by the sender's MsgPlaced/MsgData or
// failed when the sender is lost.
constexpr uint32_t kStPlacing = 5;
constexpr size_t kCqBatch = 64;

inline uint64_t word(uint32_t gen, uint32_t st) { return (static_cast<uint64_t>(gen) << 8) | st; }

void futex_wait(std::atomic<uint32_t>* a, uint32_t expected, uint64_t timeout_ns) {
  timespec ts{static_cast<time_t>(timeout_ns / 1000000000ull),
              static_cast<long>(timeout_ns % 1000000000ull)};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(a), FUTEX_WAIT_PRIVATE, expected, &ts, nullptr, 0);
}
void futex_wake_all(std::atomic<uint32_t>* a) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(a), FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr,
          nullptr, 0);
}
inline void cpu_relax() { __builtin_ia32_pause(); }
}  // namespace

// A handle this process holds: where the LMR lives and the capability that
// lets this node use it. Never leaves the engine.
struct Engine::Mapping {
  NodeId owner = 0;
  uint64_t key = 0;
  uint64_t cap = 0;
  uint32_t rights = 0;
  uint64_t size = 0;
  uint64_t rkey = 0;  // owner's shm region key: native access when it shares our host
  bool master = false;
  SipKey secret;  // master only: mints capabilities for mappers
};

namespace {
// Where an LMR's liveness word sits: after its data, 8-byte aligned.
constexpr uint64_t alive_offset(uint64_t size) { return (size + 7) & ~uint64_t{7}; }
}  // namespace

// Memory this node owns on behalf of an LMR's master. It comes from the shm
// transport when that is enabled, so same-host peers can reach it natively;
// the 8-byte word after the data (at alive_offset(size)) holds the LMR's key
// while it exists and 0 once freed, which is how a native access from a
// peer tells a live LMR from a freed one.
struct Engine::LocalLmr {
  std::byte* mem = nullptr;
  uint64_t size = 0;
  SipKey secret;
  NodeId master = 0;
  uint64_t key = 0;  // in lmrs_
  transport::MemRegion region;
  transport::Transport* from = nullptr;  // whose alloc_memory made `region`
  ~LocalLmr() {
    if (from == nullptr) return;
    std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(mem + alive_offset(size)))
        .store(0, std::memory_order_release);
    from->free_memory(region);
  }
};

enum class Engine::ReqKind : uint8_t {
  kPlain,
  kRead,
  kAlloc,
  kMap,
  kCopyRead,
  kAtomic,
  kRpc,
  kSendRndv,  // a rendezvous send waiting for the receiver's pull
  kRecv,      // a receive (posted, or matched to a rendezvous and waiting for data)
  kRpcRecv,   // a server-loop receive of an RPC request (recv_rpc_async)
};

struct Engine::Request {
  uint32_t idx = 0;
  std::atomic<uint32_t> free_next{0};  // free stack link: index+1, 0 ends
  std::atomic<uint64_t> word{0};       // [generation:32][state:8]
  std::atomic<uint32_t> wake{0};       // futex word, bumped on completion
  std::atomic<uint32_t> sleepers{0};
  std::atomic<NodeId> peer{0};
  ReqKind kind = ReqKind::kPlain;
  Code status = Code::kOk;
  bool admitted = false;
  std::byte* out = nullptr;
  uint64_t out_len = 0;
  AllocReply alloc{};
  MapReply mapr{};
  // Cross-node memcpy: phase 1 reads into `bounce`, phase 2 writes it to dst.
  std::unique_ptr<std::byte[]> bounce;
  std::shared_ptr<Mapping> copy_dst;
  uint64_t copy_dst_off = 0;
  size_t* rpc_len = nullptr;            // kRpc, kRecv: where the reply/message length goes
  NodeId* msg_src = nullptr;            // kRecv: where the sender's id goes
  const std::byte* send_buf = nullptr;  // kSendRndv: the message
  uint32_t msg_port = 0;                // kRecv: the port; kRpcRecv: the function id
  uint64_t* rpc_token = nullptr;        // kRpcRecv: where the reply token goes
  // A rendezvous of this many bytes is in flight for it: its waiter spins
  // longer (the copy takes about that long; sleeping costs a wake-up).
  std::atomic<uint32_t> spin_extra_us{0};
  // kRecv placed by the sender: the registration of `out`, dropped at finish.
  transport::Transport* place_t = nullptr;
  transport::MemRegion place_mr{};
};

// An RPC request waiting for a server-loop receive (LT_recvRPC).
struct Engine::QueuedRpc {
  NodeId src = 0;
  uint64_t caller_req = 0;
  std::vector<std::byte> data;
};

// Per server-loop function id: requests waiting for receives and receives
// waiting for requests; at most one of the two queues is non-empty.
struct Engine::RpcQueue {
  std::deque<QueuedRpc> waiting;
  std::deque<PostedRecv> posted;
};

// A request for a handler on the worker pool.
struct Engine::RpcJob {
  NodeId src = 0;
  uint64_t caller_req = 0;
  std::shared_ptr<RpcHandler> fn;
  std::vector<std::byte> in;
};

// A message that arrived before a receive was posted: its bytes (eager), or
// the sender's rendezvous request (rts).
struct Engine::Unexpected {
  NodeId src = 0;
  bool rts = false;
  uint64_t len = 0;
  uint64_t sender_req = 0;
  uint64_t stage_rkey = 0, stage_off = 0;  // a staged rendezvous message
  std::vector<std::byte> data;
};

// Per port: messages waiting for receives and receives waiting for messages;
// at most one of the two queues is non-empty.
struct Engine::Port {
  std::deque<Unexpected> unexpected;
  std::deque<PostedRecv> posted;
};

Engine::Engine(const Config& config)
    : config_(config),
      sched_(config.qos),
      lmrs_(1u << 16),
      handles_(1u << 16),
      peers_(new PeerSlot[kMaxNodes]) {
  uint32_t n = std::max<uint32_t>(kReqChunk, config.engine.max_outstanding);
  max_reqs_ = (n + kReqChunk - 1) / kReqChunk * kReqChunk;
  chunks_.reset(new std::unique_ptr<Request[]>[max_reqs_ / kReqChunk]);
  cq_.resize(kCqBatch);
}

Engine::~Engine() {
  leave();
  if (wake_fd_ >= 0) close(wake_fd_);
}

std::string Engine::transport_address() const { return tcp_ ? tcp_->local_address() : ""; }

Result<std::pair<std::string, std::string>> Engine::peer_transport(NodeId node) {
  if (!joined_.load()) return Code::kNotJoined;
  if (node == self()) return std::pair<std::string, std::string>{"self", "this node"};
  transport::Endpoint* ep;
  LT_RETURN_IF_ERROR(endpoint(node, default_deadline(), &ep));
  const PeerSlot& ps = peers_[node];
  transport::Transport* t = ps.via.load(std::memory_order_acquire);
  const char* why = ps.why.load(std::memory_order_acquire);
  if (t == nullptr) return Code::kPeerDown;
  return std::pair<std::string, std::string>{t->name(), why ? why : ""};
}

transport::Transport* Engine::pick_transport(const transport::PeerInfo& info,
                                           const char** why) const {
  bool same_host = !info.host_id.empty() && info.host_id == host_id_;
  if (shm_ != nullptr && same_host && !info.address(shm_->name()).empty()) {
    *why = "same host (boot id and network namespace match)";
    return shm_;
  }
  if (tcp_ != nullptr) {
    if (!same_host) {
      *why = "other host or network namespace";
    } else if (shm_ == nullptr) {
      *why = "same host, but shm is not in this node's transports";
    } else {
      *why = "same host, but the peer offers no shm";
    }
    return tcp_;
  }
  *why = "no common transport";
  return nullptr;
}

// ---------------------------------------------------------------- lifecycle

Status Engine::join() {
  if (joined_.load()) return Code::kInvalidArg;
  LT_DEBUG("join: start");
  // Zero credits would refuse every message or call with AGAIN, for good.
  if (config_.engine.msg_credits == 0 || config_.engine.rpc_ring_slots == 0) {
    LT_ERROR("engine.msg_credits and engine.rpc_ring_slots must be at least 1 (got %u and %u)",
             config_.engine.msg_credits, config_.engine.rpc_ring_slots);
    return Code::kInvalidArg;
  }
  // transports: a comma-separated list of tcp and shm (LTIER_TRANSPORTS).
  bool want_tcp = false, want_shm = false;
  for (size_t i = 0; i <= config_.transports.size();) {
    size_t j = config_.transports.find(',', i);
    if (j == std::string::npos) j = config_.transports.size();
    std::string name = config_.transports.substr(i, j - i);
    if (name == "tcp") {
      want_tcp = true;
    } else if (name == "shm") {
      want_shm = true;
    } else {
      LT_ERROR("transports '%s': unknown transport '%s' (known: tcp, shm)",
               config_.transports.c_str(), name.c_str());
      return Code::kInvalidArg;
    }
    i = j + 1;
  }
  if (want_tcp) {
    auto t = transport::make_tcp_transport(config_.tcp);
    if (!t) return t.status();
    tcp_ = t->get();
    transports_.push_back(std::move(t.value()));
  }
  if (want_shm) {
    auto t = transport::make_shm_transport(config_.shm);
    if (!t) return t.status();
    shm_ = t->get();
    transports_.push_back(std::move(t.value()));
  }
  std::vector<transport::PeerAddress> list;
  for (auto& t : transports_) list.push_back({t->name(), t->local_address()});
  const std::string addresses = transport::format_addresses(list);
  max_payload_ = UINT32_MAX;
  for (auto& t : transports_) max_payload_ = std::min(max_payload_, t->caps().max_msg);
  host_id_ = net::host_id();
  Deadline d = Deadline::after_ms(config_.cluster.join_timeout_ms);
  LT_DEBUG("join: transports up at %s", addresses.c_str());
  LT_RETURN_IF_ERROR(membership_.join(config_.cluster, config_.qos.tenant, addresses, d));
  LT_DEBUG("join: admitted as node %u", membership_.self());
  for (auto& t : transports_) t->set_identity(membership_.self(), membership_.cluster_token());
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  running_.store(true);
  joined_.store(true);
  progress_thread_ = std::thread([this] { progress_loop(); });
  for (uint32_t i = 0; i < config_.engine.rpc_workers; ++i) {
    rpc_workers_.emplace_back([this] { rpc_worker_loop(); });
  }
  LT_INFO("joined as node %u, %s", membership_.self(), addresses.c_str());
  return Status::ok();
}

void Engine::leave() {
  if (!joined_.exchange(false)) return;
  membership_.leave();
  {
    std::lock_guard<std::mutex> g(jobs_mu_);
    jobs_stop_ = true;
  }
  jobs_cv_.notify_all();
  for (auto& t : rpc_workers_) t.join();
  rpc_workers_.clear();
  running_.store(false);
  uint64_t one = 1;
  ssize_t w = write(wake_fd_, &one, sizeof(one));
  (void)w;
  if (progress_thread_.joinable()) progress_thread_.join();
  if (stage_.addr != nullptr) {
    shm_->free_memory(stage_);
    stage_ = {};
  }
  for (uint32_t i = 0, n = num_reqs_.load(std::memory_order_acquire); i < n; ++i) {
    Request* r = req_at(i);
    uint64_t w0 = r->word.load();
    if ((w0 & 0xff) == kStPending || (w0 & 0xff) == kStPlacing) {
      uint64_t claimed = (w0 & ~uint64_t{0xff}) | kStClaimed;
      if (r->word.compare_exchange_strong(w0, claimed)) finish(r, Code::kClosed);
    }
  }
}

void Engine::progress_loop() {
  progress_tid_.store(std::this_thread::get_id(), std::memory_order_release);
  int ep = epoll_create1(EPOLL_CLOEXEC);
  // Parking set: the manager and the wake fd only, for while a caller spins.
  int park_ep = epoll_create1(EPOLL_CLOEXEC);
  auto add = [&](int set, int fd, uint32_t tag) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = tag;
    epoll_ctl(set, EPOLL_CTL_ADD, fd, &ev);
  };
  for (auto& t : transports_) add(ep, t->wait_fd(), 0);
  add(ep, membership_.fd(), 1);
  add(ep, wake_fd_, 2);
  add(park_ep, membership_.fd(), 1);
  add(park_ep, wake_fd_, 2);
  std::vector<Membership::Event> events;
  auto on_events = [&](const epoll_event* evs, int n) {
    for (int i = 0; i < n; ++i) {
      if (evs[i].data.u32 == 1) {
        if (!on_manager_readable(&events)) {
          epoll_ctl(ep, EPOLL_CTL_DEL, membership_.fd(), nullptr);
          epoll_ctl(park_ep, EPOLL_CTL_DEL, membership_.fd(), nullptr);
        }
      } else if (evs[i].data.u32 == 2) {
        uint64_t v;
        ssize_t r = read(wake_fd_, &v, sizeof(v));
        (void)r;
      }
    }
  };
  // After serving a peer, keep polling for a bounded time: the next request
  // of a busy client is then served without a wake-up, which costs tens of
  // microseconds on small VMs. Replies alone (this node as a client) do not
  // start a spin: the caller waiting for them spins itself, and a third busy
  // thread on a 2-core machine hurts everyone. Then sleep: an idle engine
  // costs no CPU.
  const uint64_t spin_ns = config_.engine.progress_spin_us * 1000ull;
  // Parked while callers spin: first for one spin budget, then, while they
  // keep spinning (a ping-pong: they poll for everyone), twice as long each
  // time up to kMaxParkNs. Every wake-up of a parked thread takes a core
  // from a spinner on a 2-core machine; a caller that stops spinning to
  // sleep unparks us through wake_fd_, one that just finishes does not, so
  // the bound is how long peers' requests may wait for an idle engine.
  const uint64_t base_park_ns = std::max<uint64_t>(config_.engine.spin_us, 10) * 1000ull;
  uint64_t park_ns = base_park_ns;
  uint64_t spin_until = 0, yield_at = 0, next_manager_check = 0;
  while (running_.load(std::memory_order_relaxed)) {
    uint64_t served_before = served_.load(std::memory_order_relaxed);
    bool did = progress();
    uint64_t now = now_ns();
    int hb = membership_.heartbeat(now);
    if (served_.load(std::memory_order_relaxed) != served_before) {
      spin_until = now + spin_ns;
      yield_at = now + kSpinYieldNs;
    }
    if (did) {
      // Under sustained load, still look at the manager socket, every
      // kBusyManagerCheckNs: an epoll_wait per pass (~0.3 us here) sat
      // between an RPC server's reply and its next poll.
      if (now >= next_manager_check) {
        epoll_event ev[4];
        on_events(ev, epoll_wait(ep, ev, 4, 0));
        next_manager_check = now + kBusyManagerCheckNs;
      }
      continue;
    }
    if (spinners_.load(std::memory_order_seq_cst) > 0) {
      // A caller is spinning in wait() and polls the transports, serving
      // peers too: a second spinner would only take its core (2 cores here).
      // Park for at most one spin budget; a caller that gives up spinning
      // and sleeps wakes us through wake_fd_.
      parked_.store(true, std::memory_order_seq_cst);
      if (spinners_.load(std::memory_order_seq_cst) > 0) {
        uint64_t ns = std::min<uint64_t>(park_ns, uint64_t{static_cast<uint32_t>(hb)} * 1000000ull);
        const timespec park = {static_cast<time_t>(ns / 1000000000ull),
                               static_cast<long>(ns % 1000000000ull)};
        epoll_event evs[4];
        on_events(evs, epoll_pwait2(park_ep, evs, 4, &park, nullptr));
      }
      parked_.store(false, std::memory_order_relaxed);
      park_ns = spinners_.load(std::memory_order_relaxed) > 0 ? std::min(park_ns * 2, kMaxParkNs)
                                                              : base_park_ns;
      continue;
    }
    park_ns = base_park_ns;
    if (now < spin_until) {
      if (now >= yield_at) {
        sched_yield();  // as a waiter does (wait_impl): a thread on this core may be the peer
        yield_at = now + kSpinYieldNs;
      } else {
        cpu_relax();
      }
      continue;
    }
    epoll_event evs[4];
    on_events(evs, epoll_wait(ep, evs, 4, hb));
  }
  close(park_ep);
  close(ep);
}

bool Engine::on_manager_readable(std::vector<Membership::Event>* events) {
  events->clear();
  Status s = membership_.on_readable(events);
  for (auto& e : *events) {
    if (!e.up) on_member_down(e.node);
  }
  return s.is_ok();
}

void Engine::on_member_down(NodeId n) {
  LT_INFO("node %u is down", n);
  if (n < kMaxNodes) peers_[n].down.store(true);
  retire_endpoint(n);
  fail_requests_to(n, Code::kPeerDown);
  stage_release_peer(n);
  credits_returned();  // callers waiting for its credits retry and see it down
  // The LMRs this node holds for it: nobody can free them any more (only a
  // master handle can), so they go as if it had freed them; handles mapped
  // by others then fail with BAD_HANDLE. Freed outside the table's lock.
  std::vector<std::shared_ptr<LocalLmr>> orphans;
  lmrs_.erase_if([n](const std::shared_ptr<LocalLmr>& l) { return l && l->master == n; }, &orphans);
  if (!orphans.empty()) LT_INFO("freed %zu LMRs of node %u", orphans.size(), n);
}

// ---------------------------------------------------------------- progress

// ---------------------------------------------------------------- RPC serving

void Engine::run_rpc(NodeId from, uint64_t caller_req, const RpcHandler& fn,
                   std::span<const std::byte> in, std::span<std::byte> out) {
  size_t n = 0;
  Status s = fn(from, in, out, &n);
  if (s.is_ok() && n > out.size()) s = Code::kInternal;
  MsgHeader rh = make_header(MsgOp::kRpcReply, caller_req, s.code());
  (void)send(from, &rh, sizeof(rh), s.is_ok() ? out.data() : nullptr, s.is_ok() ? n : 0,
             default_deadline(), true);
}

void Engine::serve_rpc(NodeId from, const MsgHeader& h, std::span<const std::byte> b) {
  auto q = load<RpcReq>(b);
  auto in = b.subspan(sizeof(RpcReq));
  // The config, not rpc_workers_: join() fills that vector while the
  // progress thread may already serve.
  const bool on_pool = config_.engine.rpc_workers > 0;
  if (!on_pool) {
    if (const RpcHandler* f = handler_for(q.func); f != nullptr) {  // no lock, no refcount
      if (!rpc_out_) {
        rpc_out_cap_ = max_payload_ - sizeof(MsgHeader);
        rpc_out_.reset(new std::byte[rpc_out_cap_]);  // not zeroed: pages stay untouched
      }
      run_rpc(from, h.req_id, *f, in, std::span<std::byte>(rpc_out_.get(), rpc_out_cap_));
      return;
    }
  }
  std::shared_ptr<RpcHandler> fn;
  RpcQueue* queue = nullptr;
  {
    std::shared_lock<std::shared_mutex> g(rpc_mu_);
    auto it = handlers_.find(q.func);
    if (it != handlers_.end()) {
      fn = it->second;
    } else if (auto qi = rpc_queues_.find(q.func); qi != rpc_queues_.end()) {
      queue = qi->second.get();
    }
  }
  if (fn && on_pool) {
    RpcJob job{from, h.req_id, std::move(fn), std::vector<std::byte>(in.begin(), in.end())};
    {
      std::lock_guard<std::mutex> g(jobs_mu_);
      jobs_.push_back(std::move(job));
    }
    jobs_cv_.notify_one();
    return;
  }
  if (fn) {
    if (!rpc_out_) {
      rpc_out_cap_ = max_payload_ - sizeof(MsgHeader);
      rpc_out_.reset(new std::byte[rpc_out_cap_]);  // not zeroed: pages stay untouched
    }
    run_rpc(from, h.req_id, *fn, in, std::span<std::byte>(rpc_out_.get(), rpc_out_cap_));
    return;
  }
  if (queue == nullptr) {
    MsgHeader rh = make_header(MsgOp::kRpcReply, h.req_id, Code::kNoHandler);
    (void)send(from, &rh, sizeof(rh), nullptr, 0, default_deadline(), true);
    return;
  }
  Request* r = nullptr;
  {
    std::lock_guard<std::mutex> g(rpcq_mu_);
    while (r == nullptr && !queue->posted.empty()) {
      PostedRecv pr = queue->posted.front();
      queue->posted.pop_front();
      uint32_t gen = static_cast<uint32_t>(pr.id >> 32);
      uint64_t expect = word(gen, kStPending);
      if (!pr.r->word.compare_exchange_strong(expect, word(gen, kStClaimed))) continue;
      if (in.size() > pr.r->out_len) {
        // Too small: that receive fails with the needed size; the request
        // goes to the next receive, or waits.
        *pr.r->rpc_len = in.size();
        *pr.r->msg_src = from;
        finish(pr.r, Code::kTruncated);
        continue;
      }
      r = pr.r;
    }
    if (r == nullptr) {
      queue->waiting.push_back({from, h.req_id, std::vector<std::byte>(in.begin(), in.end())});
    }
  }
  if (r != nullptr) deliver_rpc(r, from, h.req_id, in);
}

// Completes a claimed server-loop receive with one request: kTruncated
// (request left queued by the caller) or the bytes and a reply token.
void Engine::deliver_rpc(Request* r, NodeId from, uint64_t caller_req,
                       std::span<const std::byte> in) {
  *r->rpc_len = in.size();
  *r->msg_src = from;
  if (in.size() > r->out_len) {
    finish(r, Code::kTruncated);
    return;
  }
  if (!in.empty()) std::memcpy(r->out, in.data(), in.size());
  {
    std::lock_guard<std::mutex> g(rpcq_mu_);
    uint64_t t = next_token_++;
    pending_replies_[t] = {from, caller_req};
    *r->rpc_token = t;
  }
  finish(r, Status::ok());
}

void Engine::rpc_worker_loop() {
  std::unique_ptr<std::byte[]> out(new std::byte[max_payload_ - sizeof(MsgHeader)]);
  std::span<std::byte> outs(out.get(), max_payload_ - sizeof(MsgHeader));
  std::unique_lock<std::mutex> g(jobs_mu_);
  for (;;) {
    jobs_cv_.wait(g, [this] { return jobs_stop_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stopping, and nothing left to answer
    RpcJob job = std::move(jobs_.front());
    jobs_.pop_front();
    g.unlock();
    run_rpc(job.src, job.caller_req, *job.fn, job.in, outs);
    g.lock();
  }
}

Status Engine::register_rpc_queue(uint32_t func_id) {
  if (func_id > 0xffff) return Code::kInvalidArg;
  std::unique_lock<std::shared_mutex> g(rpc_mu_);
  if (handlers_.count(func_id) || rpc_queues_.count(func_id)) return Code::kExists;
  rpc_queues_[func_id] = std::make_unique<RpcQueue>();
  return Status::ok();
}

Result<ReqId> Engine::recv_rpc_async(uint32_t func_id, void* buf, size_t cap, NodeId* src,
                                   size_t* len, uint64_t* token) {
  if (!joined_.load()) return Code::kNotJoined;
  if (src == nullptr || len == nullptr || token == nullptr || (buf == nullptr && cap != 0)) {
    return Code::kInvalidArg;
  }
  RpcQueue* queue = nullptr;
  {
    std::shared_lock<std::shared_mutex> g(rpc_mu_);
    auto it = rpc_queues_.find(func_id);
    if (it == rpc_queues_.end()) return Code::kInvalidArg;
    queue = it->second.get();
  }
  ReqId id;
  auto r = alloc_request(ReqKind::kRpcRecv, 0, &id);
  if (!r) return r.status();
  Request* req = *r;
  req->out = static_cast<std::byte*>(buf);
  req->out_len = cap;
  req->rpc_len = len;
  req->msg_src = src;
  req->rpc_token = token;
  req->msg_port = func_id;  // its queue, for unpost
  QueuedRpc w;
  {
    std::lock_guard<std::mutex> g(rpcq_mu_);
    if (queue->waiting.empty()) {
      queue->posted.push_back({id, req});
      return id;
    }
    uint64_t expect = word(static_cast<uint32_t>(id >> 32), kStPending);
    req->word.compare_exchange_strong(expect, word(static_cast<uint32_t>(id >> 32), kStClaimed));
    if (queue->waiting.front().data.size() > cap) {
      *len = queue->waiting.front().data.size();
      *src = queue->waiting.front().src;
      finish(req, Code::kTruncated);  // the request stays first in line
      return id;
    }
    w = std::move(queue->waiting.front());
    queue->waiting.pop_front();
  }
  deliver_rpc(req, w.src, w.caller_req, w.data);
  return id;
}

Status Engine::reply_rpc(uint64_t token, const void* out, size_t len, Status s) {
  if (!joined_.load()) return Code::kNotJoined;
  if ((out == nullptr && len != 0) || len > max_payload_ - sizeof(MsgHeader)) {
    return Code::kInvalidArg;
  }
  PendingReply p;
  {
    std::lock_guard<std::mutex> g(rpcq_mu_);
    auto it = pending_replies_.find(token);
    if (it == pending_replies_.end()) return Code::kBadHandle;
    p = it->second;
    pending_replies_.erase(it);
  }
  MsgHeader rh = make_header(MsgOp::kRpcReply, p.caller_req, s.code());
  return send(p.src, &rh, sizeof(rh), s.is_ok() ? out : nullptr, s.is_ok() ? len : 0,
              default_deadline(), true);
}

bool Engine::progress(const std::atomic<uint64_t>* watch) {
  if (transports_.empty()) return false;
  bool did = false;
  // One thread polls at a time (busy_). A caller that finds it taken leaves
  // want_ set, and the holder re-checks want_ after it lets go, so a pass
  // asked for during a pass still happens; uncontended, this costs one
  // exchange and one store.
  if (busy_.exchange(true, std::memory_order_acquire)) {
    want_.store(true, std::memory_order_seq_cst);
    if (busy_.exchange(true, std::memory_order_acquire)) return false;
  }
  for (;;) {
    want_.store(false, std::memory_order_relaxed);
    holder_.store(std::this_thread::get_id(), std::memory_order_relaxed);
    if (held_rx_ != nullptr) {  // the last pass's watched message: its room goes back now
      held_rx_->release_rx(std::span<const Completion>(&held_cq_, 1));
      held_rx_ = nullptr;
    }
    for (auto& t : transports_) t->flush();  // calls held by rpc_async (cheap when none)
    // A bounded pass (16 batches per transport, and 2 ms): under a steady
    // stream the caller (the progress thread: heartbeats, the manager
    // socket) gets control back; it calls again at once since work was found.
    uint64_t pass_end = 0;  // read the clock only after two batches with work
    const bool on_progress_thread =
        std::this_thread::get_id() == progress_tid_.load(std::memory_order_acquire);
    for (auto& t : transports_) {
      for (int batches = 0; batches < kMaxBatchesPerPass; ++batches) {
        if (batches > 1) {  // one message per batch (a ping-pong) reads no clock
          uint64_t now = now_ns();
          if (pass_end == 0) pass_end = now + kMaxPassNs;
          if (now >= pass_end) break;
        }
        size_t n = t->poll(cq_);
        if (n == 0) break;
        did = true;
        for (size_t i = 0; i < n; ++i) {
          more_in_batch_ = i + 1 < n;
          handle(cq_[i]);
          // A batch of big copies (staged 1 MiB messages, say) can take long,
          // much longer under sanitizers: keep the heartbeats going.
          if (i % 8 == 7 && on_progress_thread) (void)membership_.heartbeat(now_ns());
        }
        more_in_batch_ = false;
        const bool watched_done =
            watch != nullptr && (watch->load(std::memory_order_acquire) & 0xff) == kStDone;
        if (watched_done && n == 1 && cq_[0].len <= kHoldRxBytes) {
          // A ping-pong's message: handing its ring room back (a locked
          // store to a line the peer reads) can wait for the next pass, out
          // of the waiter's way. Only a small one: the peer needs no room.
          held_rx_ = t.get();
          held_cq_ = cq_[0];
        } else {
          t->release_rx(std::span<const Completion>(cq_.data(), n));
        }
        t->flush();               // the batch's corked replies go now, not after the pass
        if (watched_done) break;  // the waiter can go; another poll would only delay it
      }
      if (watch != nullptr && (watch->load(std::memory_order_acquire) & 0xff) == kStDone) break;
    }
    holder_.store(std::thread::id(), std::memory_order_relaxed);
    busy_.store(false, std::memory_order_seq_cst);
    if (!want_.load(std::memory_order_seq_cst)) return did;
    if (busy_.exchange(true, std::memory_order_acquire)) return did;  // its holder runs it
  }
}

void Engine::handle(const Completion& c) {
  if (c.kind == CqKind::kPeerLost) {
    LT_INFO("connection to node %u lost", c.peer);
    retire_endpoint(c.peer);
    fail_requests_to(c.peer, Code::kPeerDown);
    stage_release_peer(c.peer);
    reset_credits(c.peer);
    credits_returned();  // callers waiting for its credits retry and see it lost
    return;
  }
  if (c.kind != CqKind::kRecv) return;
  auto b = std::span<const std::byte>(c.rx, c.len);
  MsgHeader h;
  if (!decode_header(b, &h).is_ok()) {
    if (malformed_.fetch_add(1) == 0) LT_WARN("dropping malformed message from node %u", c.peer);
    return;
  }
  if (h.op >= static_cast<uint8_t>(MsgOp::kReply)) {
    complete(c.peer, h, b);
  } else {
    serve(c.peer, h, b);
  }
}

// ---------------------------------------------------------------- requests

Result<Engine::Request*> Engine::alloc_request(ReqKind kind, NodeId peer, ReqId* id) {
  LT_RETURN_IF_ERROR(sched_.admit());
  uint64_t head = free_head_.load(std::memory_order_acquire);
  uint32_t idx;
  for (;;) {
    uint32_t top = static_cast<uint32_t>(head);
    if (top == 0) {
      Status g = grow_requests();
      if (!g.is_ok()) {
        sched_.retire();
        return g;
      }
      head = free_head_.load(std::memory_order_acquire);
      continue;
    }
    idx = top - 1;
    uint64_t next =
        ((head >> 32) + 1) << 32 | req_at(idx)->free_next.load(std::memory_order_relaxed);
    if (free_head_.compare_exchange_weak(head, next, std::memory_order_acq_rel)) break;
  }
  Request* r = req_at(idx);
  uint32_t gen = static_cast<uint32_t>(r->word.load() >> 8);
  r->kind = kind;
  r->status = Code::kOk;
  r->admitted = true;
  r->out = nullptr;
  r->out_len = 0;
  r->spin_extra_us.store(0, std::memory_order_relaxed);
  r->peer.store(peer);
  r->word.store(word(gen, kStPending), std::memory_order_release);
  *id = (static_cast<uint64_t>(gen) << 32) | idx;
  return r;
}

Engine::Request* Engine::req_at(uint32_t idx) const {
  return &chunks_[idx / kReqChunk][idx % kReqChunk];
}

Status Engine::grow_requests() {
  std::lock_guard<std::mutex> g(grow_mu_);
  if (static_cast<uint32_t>(free_head_.load(std::memory_order_acquire)) != 0) {
    return Status::ok();  // another thread grew (or freed) meanwhile
  }
  uint32_t base = num_reqs_.load(std::memory_order_relaxed);
  if (base >= max_reqs_) return Code::kNoResource;
  chunks_[base / kReqChunk].reset(new Request[kReqChunk]);
  for (uint32_t i = 0; i < kReqChunk; ++i) {
    Request* r = req_at(base + i);
    r->idx = base + i;
    r->word.store(word(1, kStFree), std::memory_order_relaxed);
  }
  num_reqs_.store(base + kReqChunk, std::memory_order_release);
  // Link the chunk and push it whole onto the free stack.
  for (uint32_t i = 0; i + 1 < kReqChunk; ++i) {
    req_at(base + i)->free_next.store(base + i + 2, std::memory_order_relaxed);
  }
  uint64_t head = free_head_.load(std::memory_order_acquire);
  for (;;) {
    req_at(base + kReqChunk - 1)
        ->free_next.store(static_cast<uint32_t>(head), std::memory_order_relaxed);
    uint64_t next = ((head >> 32) + 1) << 32 | (base + 1);
    if (free_head_.compare_exchange_weak(head, next, std::memory_order_acq_rel)) break;
  }
  return Status::ok();
}

Result<ReqId> Engine::done_request(Status s) {
  ReqId id;
  auto r = alloc_request(ReqKind::kPlain, 0, &id);
  if (!r) return r.status();
  uint64_t w = (*r)->word.load();
  (*r)->word.store((w & ~uint64_t{0xff}) | kStClaimed);
  finish(*r, s);
  return id;
}

void Engine::finish(Request* r, Status s) {
  drop_placement(r);
  r->status = s.code();
  uint64_t w = r->word.load(std::memory_order_relaxed);
  r->word.store((w & ~uint64_t{0xff}) | kStDone, std::memory_order_seq_cst);
  // A waiter counts itself in `sleepers` before its last look at the word:
  // either it sees kStDone or we see it and bump `wake` (which its futex
  // compares). No waiter asleep, no locked instruction.
  if (r->sleepers.load(std::memory_order_seq_cst) != 0) {
    r->wake.fetch_add(1, std::memory_order_seq_cst);
    futex_wake_all(&r->wake);
  }
}

void Engine::release(Request* r) {
  uint32_t idx = r->idx;
  r->bounce.reset();
  r->copy_dst.reset();
  if (r->admitted) sched_.retire();
  r->admitted = false;
  uint32_t gen = static_cast<uint32_t>(r->word.load() >> 8) + 1;
  if (gen == 0) gen = 1;
  r->word.store(word(gen, kStFree), std::memory_order_release);
  uint64_t head = free_head_.load(std::memory_order_acquire);
  for (;;) {
    r->free_next.store(static_cast<uint32_t>(head), std::memory_order_relaxed);
    uint64_t next = ((head >> 32) + 1) << 32 | (idx + 1);
    if (free_head_.compare_exchange_weak(head, next, std::memory_order_acq_rel)) break;
  }
}

Engine::Request* Engine::lookup(ReqId id) {
  uint32_t idx = static_cast<uint32_t>(id);
  uint32_t gen = static_cast<uint32_t>(id >> 32);
  if (idx >= num_reqs_.load(std::memory_order_acquire)) return nullptr;
  Request* r = req_at(idx);
  uint64_t w = r->word.load(std::memory_order_acquire);
  if (static_cast<uint32_t>(w >> 8) != gen || (w & 0xff) == kStFree || (w & 0xff) == kStCancelled) {
    return nullptr;
  }
  return r;
}

Status Engine::wait(ReqId id, Deadline d) { return wait_impl(id, d, nullptr); }

void Engine::end_spin(bool will_sleep) {
  if (spinners_.fetch_sub(1, std::memory_order_seq_cst) == 1 && will_sleep &&
      parked_.load(std::memory_order_seq_cst)) {
    // Nobody polls while we sleep: unpark the progress thread.
    uint64_t one = 1;
    ssize_t w = write(wake_fd_, &one, sizeof(one));
    (void)w;
  }
}

// One credit count went down (its compare-exchange was seq_cst): callers
// watching for credits (CreditWatch) see the epoch move; without watchers
// nothing is bumped (a locked instruction per message otherwise).
void Engine::credit_came_back() {
  if (credit_watchers_.load(std::memory_order_seq_cst) != 0) credits_returned();
}

void Engine::credits_returned() {
  credit_seq_.fetch_add(1, std::memory_order_seq_cst);
  if (credit_sleepers_.load(std::memory_order_seq_cst) != 0) futex_wake_all(&credit_seq_);
}

Status Engine::wait_credits(uint32_t seen, Deadline d) {
  uint64_t spin_until = now_ns() + config_.engine.spin_us * 1000ull;
  spinners_.fetch_add(1, std::memory_order_seq_cst);
  while (credit_seq_.load(std::memory_order_acquire) == seen && now_ns() < spin_until) {
    if (!progress()) cpu_relax();
  }
  end_spin(credit_seq_.load(std::memory_order_acquire) == seen);
  while (credit_seq_.load(std::memory_order_acquire) == seen) {
    uint64_t left = d.remaining_ns();
    if (left == 0) return Code::kTimedOut;
    credit_sleepers_.fetch_add(1, std::memory_order_seq_cst);
    if (credit_seq_.load(std::memory_order_seq_cst) == seen) {
      futex_wait(&credit_seq_, seen, std::min<uint64_t>(left, 50000000ull));
    }
    credit_sleepers_.fetch_sub(1, std::memory_order_seq_cst);
  }
  return Status::ok();
}

Status Engine::wait_impl(ReqId id, Deadline d, Results* res) {
  Request* r = lookup(id);
  if (r == nullptr) return Code::kBadHandle;
  // The spin budget starts at the first clock read, 8 polls in: a wait that
  // ends before that (a ping-pong) reads no clock at all.
  uint64_t spin_until = 0, yield_at = 0;
  spinners_.fetch_add(1, std::memory_order_seq_cst);
  for (uint32_t i = 1; (r->word.load(std::memory_order_acquire) & 0xff) != kStDone; ++i) {
    if (!progress(&r->word)) cpu_relax();
    if (i % 8 != 0) continue;  // the clock is not free either
    uint64_t now = now_ns();
    if (spin_until == 0) {
      d.fix(now);  // a lazy deadline starts here, a few polls into the call
      spin_until = now + config_.engine.spin_us * 1000ull;
      yield_at = now + kSpinYieldNs;
      continue;
    }
    if (now >= spin_until + r->spin_extra_us.load(std::memory_order_relaxed) * 1000ull) break;
    if (now >= yield_at) {
      // A spin this long means the other side is slow, often because it
      // shares this core (a CPU hog took the other one): let it run.
      sched_yield();
      yield_at = now + kSpinYieldNs;
    }
  }
  end_spin((r->word.load(std::memory_order_acquire) & 0xff) != kStDone);
  while ((r->word.load(std::memory_order_acquire) & 0xff) != kStDone) {
    uint64_t left = d.remaining_ns();
    if (left == 0) return Code::kTimedOut;
    uint32_t seen = r->wake.load(std::memory_order_seq_cst);
    r->sleepers.fetch_add(1, std::memory_order_seq_cst);
    if ((r->word.load(std::memory_order_seq_cst) & 0xff) != kStDone) {
      // The progress thread completes the request and wakes us; the cap on
      // the sleep only bounds the cost of a missed wake-up.
      futex_wait(&r->wake, seen, std::min<uint64_t>(left, 50000000ull));
    }
    r->sleepers.fetch_sub(1, std::memory_order_seq_cst);
  }
  Status s = r->status;
  if (res != nullptr) {
    res->alloc = r->alloc;
    res->mapr = r->mapr;
  }
  release(r);
  return s;
}

Status Engine::test(ReqId id) {
  Request* r = lookup(id);
  if (r == nullptr) return Code::kBadHandle;
  if ((r->word.load(std::memory_order_acquire) & 0xff) != kStDone) {
    progress();
    if ((r->word.load(std::memory_order_acquire) & 0xff) != kStDone) return Code::kNoResource;
  }
  Status s = r->status;
  release(r);
  return s;
}

Status Engine::wait_or_cancel(ReqId id, Deadline d, Results* res) {
  Status s = wait_impl(id, d, res);
  if (s.code() != Code::kTimedOut) return s;
  Request* r = lookup(id);
  if (r == nullptr) return s;
  uint64_t w = r->word.load();
  if ((w & 0xff) == kStPending &&
      r->word.compare_exchange_strong(w, (w & ~uint64_t{0xff}) | kStCancelled)) {
    // Nobody can complete it now; a late reply finds the state changed.
    if (r->kind == ReqKind::kRecv || r->kind == ReqKind::kRpcRecv) unpost(r, id);
    release(r);
    return Code::kTimedOut;
  }
  // A completer claimed it just in time: take its result.
  return wait_impl(id, Deadline::never(), res);
}

void Engine::fail_requests_to(NodeId peer, Code c) {
  for (uint32_t i = 0, n = num_reqs_.load(std::memory_order_acquire); i < n; ++i) {
    Request* r = req_at(i);
    if (r->peer.load() != peer) continue;
    uint64_t w = r->word.load();
    if ((w & 0xff) != kStPending && (w & 0xff) != kStPlacing) continue;
    if (r->word.compare_exchange_strong(w, (w & ~uint64_t{0xff}) | kStClaimed)) {
      if (r->peer.load() == peer) {
        // No reply will return this call's RPC credit.
        if (r->kind == ReqKind::kRpc) return_rpc_credit(peer);
        finish(r, c);
      } else {
        r->word.store(w);
      }
    }
  }
}

// ---------------------------------------------------------------- peers

Status Engine::endpoint(NodeId p, Deadline d, transport::Endpoint** out) {
  if (p == 0 || p >= kMaxNodes) return Code::kPeerDown;
  PeerSlot& ps = peers_[p];
  if (ps.down.load(std::memory_order_relaxed)) return Code::kPeerDown;
  transport::Endpoint* e = ps.ep.load(std::memory_order_acquire);
  if (e != nullptr && e->alive()) {
    *out = e;
    return Status::ok();
  }
  // A node that joined moments ago may not be in our address book yet (the
  // manager's MemberUp for it is on its way to our progress thread): wait
  // for it, bounded, unless we are that thread.
  if (!membership_.peer(p) &&
      std::this_thread::get_id() != progress_tid_.load(std::memory_order_acquire)) {
    Deadline w = Deadline::after_ms(config_.tcp.connect_timeout_ms);
    if (d.at_ns() < w.at_ns()) w = d;
    while (!membership_.peer(p) && !w.expired() && !ps.down.load(std::memory_order_relaxed)) {
      e = ps.ep.load(std::memory_order_acquire);
      if (e != nullptr && e->alive()) break;  // it reached us first
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    if (ps.down.load(std::memory_order_relaxed)) return Code::kPeerDown;
  }
  std::lock_guard<std::mutex> g(connect_mu_);  // cold path: first contact or reconnect
  e = ps.ep.load(std::memory_order_acquire);
  if (e != nullptr && e->alive()) {
    *out = e;
    return Status::ok();
  }
  // A peer can reach us before the manager's MemberUp for it does; its
  // inbound connection (authenticated by the cluster token) is then reused.
  Deadline cd = Deadline::after_ms(config_.tcp.connect_timeout_ms);
  if (d.at_ns() < cd.at_ns()) cd = d;
  auto info = membership_.peer(p);
  Result<std::unique_ptr<transport::Endpoint>> ep = Code::kPeerDown;
  transport::Transport* via = nullptr;
  const char* why = "";
  if (info) {
    via = pick_transport(*info, &why);
    if (via == nullptr) {
      LT_WARN("node %u: no common transport (ours: %s)", p, config_.transports.c_str());
      return Code::kUnsupported;
    }
    ep = via->connect(*info, cd);
  } else {
    // Not in our address book yet: only an inbound connection (whichever
    // transport it came on, authenticated by the cluster token) can serve.
    for (auto& t : transports_) {
      ep = t->connect(transport::PeerInfo{p, "", {}}, cd);
      if (ep) {
        via = t.get();
        why = "the peer connected first";
        break;
      }
    }
  }
  if (!ep) return ep.status().code() == Code::kTimedOut ? Code::kTimedOut : Code::kPeerDown;
  e = ep->get();
  endpoints_.push_back(std::move(ep.value()));
  ps.via.store(via, std::memory_order_release);
  ps.why.store(why, std::memory_order_release);
  ps.ep.store(e, std::memory_order_release);
  *out = e;
  return Status::ok();
}

void Engine::retire_endpoint(NodeId p) {
  if (p == 0 || p >= kMaxNodes) return;
  peers_[p].ep.store(nullptr, std::memory_order_release);
}

Status Engine::send(NodeId p, const void* hdr, size_t hlen, const void* data, size_t dlen, Deadline d,
                  bool reply, bool more) {
  transport::Endpoint* ep;
  LT_RETURN_IF_ERROR(endpoint(p, d, &ep));
  WorkRequest wr;
  wr.op = transport::Op::kSend;
  wr.num_sge = dlen ? 2 : 1;
  wr.sge[0] = {static_cast<const std::byte*>(hdr), static_cast<uint32_t>(hlen), 0};
  wr.sge[1] = {static_cast<const std::byte*>(data), static_cast<uint32_t>(dlen), 0};
  if (reply) wr.flags |= transport::kWrMustQueue;
  if (more) wr.flags |= transport::kWrMore;
  // A reply sent while handling a batch with more to come waits for the
  // batch's last reply (or the flush after it): one system call per batch.
  if (reply && holder_.load(std::memory_order_relaxed) == std::this_thread::get_id() &&
      more_in_batch_) {
    wr.flags |= transport::kWrMore;
  }
  return post_one(p, ep, wr, d);
}

// Posts one work request to `p`, polling while the transport pushes back,
// until `d`. A broken connection retires the endpoint (PEER_DOWN).
Status Engine::post_one(NodeId p, transport::Endpoint* ep, const WorkRequest& wr, Deadline d) {
  for (;;) {
    auto r = sched_.post(*ep, std::span<const WorkRequest>(&wr, 1));
    if (!r) {
      if (r.status().code() == Code::kPeerDown) retire_endpoint(p);
      return r.status();
    }
    if (*r == 1) return Status::ok();
    if (d.expired()) return Code::kTimedOut;
    if (!progress()) cpu_relax();
  }
}

Status Engine::send_request(Request* r, ReqId id, NodeId p, const void* hdr, size_t hlen,
                          const void* data, size_t dlen, bool more) {
  (void)id;
  // Publish the request's fields to whichever thread completes it: the
  // reply may come back through another process's shared memory, which
  // carries no happens-before edge that tools (TSan) can see.
  r->word.store(r->word.load(std::memory_order_relaxed), std::memory_order_release);
  Status s = send(p, hdr, hlen, data, dlen, default_deadline(), false, more);
  if (!s.is_ok()) {
    // Not sent: nobody else can complete it. Claim it unless a peer-down
    // sweep already did, then free it.
    uint64_t w = r->word.load();
    if ((w & 0xff) == kStPending &&
        r->word.compare_exchange_strong(w, (w & ~uint64_t{0xff}) | kStClaimed)) {
      release(r);
    } else {
      while ((r->word.load() & 0xff) != kStDone) cpu_relax();
      release(r);
    }
  }
  return s;
}

// ---------------------------------------------------------------- checks

template <typename F>
Status Engine::with_lmr(uint64_t key, F&& f) {
  std::shared_ptr<LocalLmr> l;
  LT_RETURN_IF_ERROR(lmrs_.get(key, &l));
  return f(l);
}

uint64_t Engine::cap_for(const SipKey& secret, uint64_t key, uint32_t rights) const {
  uint64_t in[2] = {key, rights};
  return siphash24(secret, in, sizeof(in));
}

Status Engine::check_range(LmrHandle h, uint32_t need, uint64_t off, uint64_t len, Mapping* m) const {
  std::shared_ptr<Mapping> p;
  LT_RETURN_IF_ERROR(handles_.get(h, &p));
  if ((p->rights & need) != need) return Code::kPerm;
  if (off > p->size || len > p->size - off) return Code::kOutOfBounds;
  *m = *p;
  return Status::ok();
}

Status Engine::check_access(LmrHandle h, uint32_t need, uint64_t off, uint64_t len) const {
  Mapping m;
  return check_range(h, need, off, len, &m);
}

Status Engine::check_ref(const LocalLmr& l, uint64_t key, const LmrRef& ref, uint32_t need,
                       uint64_t off, uint64_t len) const {
  if (ref.pad != 0 || ref.key != key) return Code::kMalformed;
  if (cap_for(l.secret, key, ref.rights) != ref.cap) return Code::kPerm;
  if ((ref.rights & need) != need) return Code::kPerm;
  if (off > l.size || len > l.size - off) return Code::kOutOfBounds;
  return Status::ok();
}

// ---------------------------------------------------------------- LMR directory

Result<LmrHandle> Engine::malloc(NodeId node, uint64_t size, uint32_t rights, Deadline d) {
  if (!joined_.load()) return Code::kNotJoined;
  if (size == 0 || (rights & ~(kRightRead | kRightWrite | kRightAtomic)) != 0) {
    return Code::kInvalidArg;
  }
  auto m = std::make_shared<Mapping>();
  m->owner = node;
  m->rights = rights | kRightAdmin;
  m->size = size;
  m->master = true;
  if (node == self()) {
    if (size > config_.engine.max_lmr_bytes) return Code::kNoMemory;
    auto l = new_lmr(size, self());
    if (!l) return l.status();
    m->secret = (*l)->secret;
    m->key = (*l)->key;
    m->rkey = (*l)->region.rkey;
  } else {
    ReqId id;
    auto r = alloc_request(ReqKind::kAlloc, node, &id);
    if (!r) return r.status();
    AllocReq q{make_header(MsgOp::kAllocReq, id), size};
    LT_RETURN_IF_ERROR(send_request(*r, id, node, &q, sizeof(q), nullptr, 0));
    Results res;
    Status s = wait_or_cancel(id, d, &res);
    if (!s.is_ok()) return s;
    m->key = res.alloc.key;
    m->secret = {res.alloc.secret0, res.alloc.secret1};
    m->rkey = res.alloc.rkey;
  }
  m->cap = cap_for(m->secret, m->key, m->rights);
  auto h = handles_.insert(m);
  if (!h) {
    // No handle slot: give the memory back rather than leak it at the owner.
    if (node == self()) {
      (void)lmrs_.erase(m->key, nullptr);
    } else {
      ReqId id;
      auto r = alloc_request(ReqKind::kPlain, node, &id);
      FreeReq q{make_header(MsgOp::kFreeReq, id), LmrRef{m->key, m->cap, m->rights, 0}};
      if (r && send_request(*r, id, node, &q, sizeof(q), nullptr, 0).is_ok()) {
        (void)wait_or_cancel(id, d);
      }
    }
  }
  return h;
}

Status Engine::free(LmrHandle h, Deadline d) {
  std::shared_ptr<Mapping> m;
  LT_RETURN_IF_ERROR(handles_.get(h, &m));
  if (!m->master) return Code::kPerm;
  Status s;
  if (m->owner == self()) {
    s = lmrs_.erase(m->key, nullptr);
  } else {
    ReqId id;
    auto r = alloc_request(ReqKind::kPlain, m->owner, &id);
    if (!r) return r.status();
    FreeReq q{make_header(MsgOp::kFreeReq, id), LmrRef{m->key, m->cap, m->rights, 0}};
    s = send_request(*r, id, m->owner, &q, sizeof(q), nullptr, 0);
    if (s.is_ok()) s = wait_or_cancel(id, d);
  }
  if (!s.is_ok() && s.code() != Code::kPeerDown && s.code() != Code::kBadHandle) return s;
  (void)handles_.erase(h, nullptr);
  std::vector<std::string> names;
  {
    std::lock_guard<std::mutex> g(published_mu_);
    for (auto it = published_.begin(); it != published_.end();) {
      if (it->second.first == h) {
        names.push_back(it->first);
        it = published_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& n : names) (void)membership_.unregister_name(n, d);
  return s.code() == Code::kBadHandle ? Status::ok() : s;
}

Status Engine::publish(LmrHandle h, const std::string& name, uint32_t max_rights, Deadline d) {
  std::shared_ptr<Mapping> m;
  LT_RETURN_IF_ERROR(handles_.get(h, &m));
  if (!m->master) return Code::kPerm;
  if (name.empty() || name.size() > kMaxName ||
      (max_rights & ~(kRightRead | kRightWrite | kRightAtomic)) != 0) {
    return Code::kInvalidArg;
  }
  {
    std::lock_guard<std::mutex> g(published_mu_);
    if (published_.count(name)) return Code::kExists;
    published_[name] = {h, max_rights};
  }
  Status s = membership_.register_name(name, d);
  if (!s.is_ok()) {
    std::lock_guard<std::mutex> g(published_mu_);
    published_.erase(name);
  }
  return s;
}

Result<LmrHandle> Engine::map(const std::string& name, uint32_t rights, Deadline d) {
  if (!joined_.load()) return Code::kNotJoined;
  if (name.empty() || name.size() > kMaxName || rights == 0 ||
      (rights & ~(kRightRead | kRightWrite | kRightAtomic)) != 0) {
    return Code::kInvalidArg;
  }
  auto master = membership_.lookup_name(name, d);
  if (!master) return master.status();
  auto m = std::make_shared<Mapping>();
  if (*master == self()) {
    std::shared_ptr<Mapping> src;
    {
      std::lock_guard<std::mutex> g(published_mu_);
      auto it = published_.find(name);
      if (it == published_.end()) return Code::kNotFound;
      if ((rights & it->second.second) != rights) return Code::kPerm;
      LT_RETURN_IF_ERROR(handles_.get(it->second.first, &src));
    }
    m->owner = src->owner;
    m->key = src->key;
    m->size = src->size;
    m->rights = rights;
    m->cap = cap_for(src->secret, src->key, rights);
    m->rkey = src->rkey;
  } else {
    ReqId id;
    auto r = alloc_request(ReqKind::kMap, *master, &id);
    if (!r) return r.status();
    MapReq q{make_header(MsgOp::kMapReq, id), rights, static_cast<uint32_t>(name.size())};
    LT_RETURN_IF_ERROR(send_request(*r, id, *master, &q, sizeof(q), name.data(), name.size()));
    Results res;
    Status s = wait_or_cancel(id, d, &res);
    if (!s.is_ok()) return s;
    m->owner = res.mapr.owner;
    m->key = res.mapr.lmr.key;
    m->cap = res.mapr.lmr.cap;
    m->rights = res.mapr.rights;
    m->size = res.mapr.size;
    m->rkey = res.mapr.rkey;
  }
  return handles_.insert(m);
}

Status Engine::unmap(LmrHandle h) {
  std::shared_ptr<Mapping> m;
  LT_RETURN_IF_ERROR(handles_.get(h, &m));
  if (m->master) return Code::kInvalidArg;  // the master releases with free()
  return handles_.erase(h, nullptr);
}

Result<uint64_t> Engine::lmr_size(LmrHandle h) const {
  std::shared_ptr<Mapping> m;
  LT_RETURN_IF_ERROR(handles_.get(h, &m));
  return m->size;
}

// ---------------------------------------------------------------- one-sided ops

// Memory for an LMR of `size` bytes (zero-filled) plus its liveness word,
// entered in the LMR table.
Result<std::shared_ptr<Engine::LocalLmr>> Engine::new_lmr(uint64_t size, NodeId master) {
  if (size == 0) return Code::kInvalidArg;
  if (size > config_.engine.max_lmr_bytes) return Code::kNoMemory;
  transport::Transport* t = shm_ != nullptr ? shm_ : transports_.front().get();
  auto region = t->alloc_memory(alive_offset(size) + sizeof(uint64_t), transport::kRemoteAll);
  if (!region)
    return region.status().code() == Code::kInvalidArg ? Code::kInvalidArg : Code::kNoMemory;
  auto l = std::make_shared<LocalLmr>();
  l->region = *region;
  l->from = t;
  l->mem = region->addr;
  l->size = size;
  l->secret = {random_u64(), random_u64()};
  l->master = master;
  auto key = lmrs_.insert(l);
  if (!key) return key.status();
  l->key = *key;
  std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(l->mem + alive_offset(size)))
      .store(*key, std::memory_order_release);
  return l;
}

// The endpoint for native one-sided access to m's memory: the owner shares
// our host and the LMR lives in its shm memory. Null: use messages.
transport::Endpoint* Engine::native_endpoint(const Mapping& m) {
  if (m.rkey == 0 || shm_ == nullptr || m.owner == self()) return nullptr;
  transport::Endpoint* ep;
  if (!endpoint(m.owner, default_deadline(), &ep).is_ok()) return nullptr;
  return peers_[m.owner].via.load(std::memory_order_relaxed) == shm_ ? ep : nullptr;
}

// One native op on a same-host peer's LMR (rights and bounds were checked
// against the handle): first the LMR's liveness word, so an op on a freed
// LMR fails with kBadHandle as it would at the owner, then the op itself.
Status Engine::native_op(const Mapping& m, transport::Endpoint* ep, const WorkRequest& wr) {
  uint64_t alive = 0;
  WorkRequest chk;
  chk.op = transport::Op::kRead;
  chk.num_sge = 1;
  chk.sge[0] = {reinterpret_cast<std::byte*>(&alive), sizeof(alive), 0};
  chk.remote = {alive_offset(m.size), m.rkey};
  for (const WorkRequest* w : {static_cast<const WorkRequest*>(&chk), &wr}) {
    auto r = ep->post(std::span<const WorkRequest>(w, 1));
    if (!r) {
      if (r.status().code() == Code::kPeerDown) retire_endpoint(m.owner);
      return r.status().code() == Code::kOutOfBounds ? Code::kBadHandle : r.status();
    }
    if (*r != 1) return Code::kNoResource;  // one-sided ops never queue; not expected
    if (w == &chk && alive != m.key) return Code::kBadHandle;
  }
  return Status::ok();
}

// Applies an atomic to the word at `p` (8-byte aligned LMR memory). Every
// node's atomics on a word go through here or through the local path below,
// so they are atomic with respect to each other.
static uint64_t apply_atomic(std::byte* p, AtomicKind kind, uint64_t operand, uint64_t compare) {
  std::atomic_ref<uint64_t> w(*reinterpret_cast<uint64_t*>(p));
  if (kind == AtomicKind::kFetchAdd) return w.fetch_add(operand, std::memory_order_acq_rel);
  uint64_t expected = compare;
  w.compare_exchange_strong(expected, operand, std::memory_order_acq_rel);
  return expected;  // the prior value, whether or not the swap happened
}

// The part of a read or write that needs no request: the LMR is this
// node's (memcpy under its table entry) or a same-host peer's over shm
// (native). False: it must go as a request. `m` is checked already.
bool Engine::copy_now(const Mapping& m, bool write, uint64_t off, std::byte* buf, uint64_t len,
                    Status* s) {
  uint32_t need = write ? kRightWrite : kRightRead;
  if (m.owner == self()) {
    LmrRef ref{m.key, m.cap, m.rights, 0};
    *s = with_lmr(m.key, [&](std::shared_ptr<LocalLmr>& l) -> Status {
      LT_RETURN_IF_ERROR(check_ref(*l, m.key, ref, need, off, len));
      if (write) {
        lmr_copy(l->mem + off, buf, len);
      } else {
        lmr_copy(buf, l->mem + off, len);
      }
      return Status::ok();
    });
    return true;
  }
  transport::Endpoint* ep = len <= UINT32_MAX ? native_endpoint(m) : nullptr;
  if (ep == nullptr) return false;
  WorkRequest wr;
  wr.op = write ? transport::Op::kWrite : transport::Op::kRead;
  wr.num_sge = 1;
  wr.sge[0] = {buf, static_cast<uint32_t>(len), 0};
  wr.remote = {off, m.rkey};
  *s = native_op(m, ep, wr);
  return true;
}

// The same for an atomic (aligned, rights checked).
bool Engine::atomic_now_on(const Mapping& m, uint64_t off, AtomicKind kind, uint64_t operand,
                         uint64_t compare, uint64_t* old, Status* s) {
  if (m.owner == self()) {
    LmrRef ref{m.key, m.cap, m.rights, 0};
    *s = with_lmr(m.key, [&](std::shared_ptr<LocalLmr>& l) -> Status {
      LT_RETURN_IF_ERROR(check_ref(*l, m.key, ref, kRightAtomic, off, sizeof(uint64_t)));
      *old = apply_atomic(l->mem + off, kind, operand, compare);
      return Status::ok();
    });
    return true;
  }
  transport::Endpoint* ep = native_endpoint(m);
  if (ep == nullptr) return false;
  WorkRequest wr;
  wr.op = kind == AtomicKind::kFetchAdd ? transport::Op::kFetchAdd : transport::Op::kCmpSwap;
  wr.num_sge = 1;
  wr.sge[0] = {reinterpret_cast<std::byte*>(old), sizeof(uint64_t), 0};
  wr.remote = {off, m.rkey};
  wr.operand = operand;
  wr.compare = compare;
  *s = native_op(m, ep, wr);
  return true;
}

bool Engine::read_now(LmrHandle h, uint64_t off, void* buf, uint64_t len, Status* s) {
  Mapping m;
  *s = check_range(h, kRightRead, off, len, &m);
  if (!s->is_ok()) return true;
  if (buf == nullptr && len != 0) return (*s = Code::kInvalidArg), true;
  if (len == 0) return true;
  return copy_now(m, false, off, static_cast<std::byte*>(buf), len, s);
}

bool Engine::write_now(LmrHandle h, uint64_t off, const void* buf, uint64_t len, Status* s) {
  Mapping m;
  *s = check_range(h, kRightWrite, off, len, &m);
  if (!s->is_ok()) return true;
  if (buf == nullptr && len != 0) return (*s = Code::kInvalidArg), true;
  if (len == 0) return true;
  // Written from, never to: the cast only shares copy_now with reads.
  return copy_now(m, true, off, static_cast<std::byte*>(const_cast<void*>(buf)), len, s);
}

bool Engine::atomic_now(LmrHandle h, uint64_t off, bool fetch_add, uint64_t operand, uint64_t compare,
                      uint64_t* old, Status* s) {
  Mapping m;
  *s = check_range(h, kRightAtomic, off, sizeof(uint64_t), &m);
  if (!s->is_ok()) return true;
  if (off % sizeof(uint64_t) != 0) return (*s = Code::kAlign), true;
  return atomic_now_on(m, off, fetch_add ? AtomicKind::kFetchAdd : AtomicKind::kCompareSwap,
                       operand, compare, old, s);
}

Result<ReqId> Engine::read_async(LmrHandle h, uint64_t off, void* buf, uint64_t len) {
  Mapping m;
  LT_RETURN_IF_ERROR(check_range(h, kRightRead, off, len, &m));
  if (buf == nullptr && len != 0) return Code::kInvalidArg;
  if (len == 0) return done_request(Status::ok());
  if (Status s; copy_now(m, false, off, static_cast<std::byte*>(buf), len, &s)) {
    return done_request(s);
  }
  if (len > max_payload_ - sizeof(MsgHeader)) return Code::kInvalidArg;
  ReqId id;
  auto r = alloc_request(ReqKind::kRead, m.owner, &id);
  if (!r) return r.status();
  (*r)->out = static_cast<std::byte*>(buf);
  (*r)->out_len = len;
  RangeReq q{make_header(MsgOp::kReadReq, id), LmrRef{m.key, m.cap, m.rights, 0}, off, len, 0, 0};
  LT_RETURN_IF_ERROR(send_request(*r, id, m.owner, &q, sizeof(q), nullptr, 0));
  return id;
}

Result<ReqId> Engine::write_async(LmrHandle h, uint64_t off, const void* buf, uint64_t len) {
  Mapping m;
  LT_RETURN_IF_ERROR(check_range(h, kRightWrite, off, len, &m));
  if (buf == nullptr && len != 0) return Code::kInvalidArg;
  if (len == 0) return done_request(Status::ok());
  if (Status s; copy_now(m, true, off, static_cast<std::byte*>(const_cast<void*>(buf)), len, &s)) {
    return done_request(s);
  }
  if (len > max_payload_ - sizeof(RangeReq)) return Code::kInvalidArg;
  ReqId id;
  auto r = alloc_request(ReqKind::kPlain, m.owner, &id);
  if (!r) return r.status();
  RangeReq q{make_header(MsgOp::kWriteReq, id), LmrRef{m.key, m.cap, m.rights, 0}, off, len, 0, 0};
  LT_RETURN_IF_ERROR(send_request(*r, id, m.owner, &q, sizeof(q), buf, len));
  return id;
}

Result<ReqId> Engine::memset_async(LmrHandle h, uint64_t off, uint8_t value, uint64_t len) {
  Mapping m;
  LT_RETURN_IF_ERROR(check_range(h, kRightWrite, off, len, &m));
  if (len == 0) return done_request(Status::ok());
  if (m.owner == self()) {
    LmrRef ref{m.key, m.cap, m.rights, 0};
    Status s = with_lmr(m.key, [&](std::shared_ptr<LocalLmr>& l) -> Status {
      LT_RETURN_IF_ERROR(check_ref(*l, m.key, ref, kRightWrite, off, len));
      lmr_fill(l->mem + off, value, len);
      return Status::ok();
    });
    return done_request(s);
  }
  ReqId id;
  auto r = alloc_request(ReqKind::kPlain, m.owner, &id);
  if (!r) return r.status();
  RangeReq q{
      make_header(MsgOp::kMemsetReq, id), LmrRef{m.key, m.cap, m.rights, 0}, off, len, value, 0};
  LT_RETURN_IF_ERROR(send_request(*r, id, m.owner, &q, sizeof(q), nullptr, 0));
  return id;
}

Status Engine::local_copy(const Mapping& dst, uint64_t doff, const Mapping& src, uint64_t soff,
                        uint64_t len) {
  LmrRef dref{dst.key, dst.cap, dst.rights, 0}, sref{src.key, src.cap, src.rights, 0};
  return with_lmr(dst.key, [&](std::shared_ptr<LocalLmr>& d) -> Status {
    LT_RETURN_IF_ERROR(check_ref(*d, dst.key, dref, kRightWrite, doff, len));
    return with_lmr(src.key, [&](std::shared_ptr<LocalLmr>& s) -> Status {
      LT_RETURN_IF_ERROR(check_ref(*s, src.key, sref, kRightRead, soff, len));
      lmr_copy(d->mem + doff, s->mem + soff, len);
      return Status::ok();
    });
  });
}

Result<ReqId> Engine::memcpy_async(LmrHandle dst, uint64_t dst_off, LmrHandle src, uint64_t src_off,
                                 uint64_t len) {
  Mapping d, s;
  LT_RETURN_IF_ERROR(check_range(dst, kRightWrite, dst_off, len, &d));
  LT_RETURN_IF_ERROR(check_range(src, kRightRead, src_off, len, &s));
  if (len == 0) return done_request(Status::ok());
  if (d.owner == s.owner) {
    if (d.owner == self()) return done_request(local_copy(d, dst_off, s, src_off, len));
    ReqId id;
    auto r = alloc_request(ReqKind::kPlain, d.owner, &id);
    if (!r) return r.status();
    MemcpyReq q{make_header(MsgOp::kMemcpyReq, id),
                LmrRef{d.key, d.cap, d.rights, 0},
                LmrRef{s.key, s.cap, s.rights, 0},
                dst_off,
                src_off,
                len};
    LT_RETURN_IF_ERROR(send_request(*r, id, d.owner, &q, sizeof(q), nullptr, 0));
    return id;
  }
  if (len > max_payload_ - sizeof(RangeReq)) return Code::kInvalidArg;
  if (s.owner == self()) {
    // Source here: one write carries it to the destination's owner.
    ReqId id;
    auto r = alloc_request(ReqKind::kPlain, d.owner, &id);
    if (!r) return r.status();
    RangeReq q{
        make_header(MsgOp::kWriteReq, id), LmrRef{d.key, d.cap, d.rights, 0}, dst_off, len, 0, 0};
    LmrRef sref{s.key, s.cap, s.rights, 0};
    bool sent = false;
    Status st = with_lmr(s.key, [&](std::shared_ptr<LocalLmr>& l) -> Status {
      LT_RETURN_IF_ERROR(check_ref(*l, s.key, sref, kRightRead, src_off, len));
      sent = true;
      return send_request(*r, id, d.owner, &q, sizeof(q), l->mem + src_off, len);
    });
    if (!st.is_ok() && !sent) {
      // Refused before anything was sent: the request is still ours.
      uint64_t w = (*r)->word.load();
      (*r)->word.store((w & ~uint64_t{0xff}) | kStClaimed);
      release(*r);
    }
    if (!st.is_ok()) return st;
    return id;
  }
  // Source remote: read it into a bounce buffer, then write it on (complete()).
  ReqId id;
  auto r = alloc_request(ReqKind::kCopyRead, s.owner, &id);
  if (!r) return r.status();
  (*r)->bounce.reset(new (std::nothrow) std::byte[len]);
  if (!(*r)->bounce) {
    uint64_t w = (*r)->word.load();
    (*r)->word.store((w & ~uint64_t{0xff}) | kStClaimed);
    finish(*r, Code::kNoMemory);
    return id;
  }
  (*r)->out = (*r)->bounce.get();
  (*r)->out_len = len;
  (*r)->copy_dst = std::make_shared<Mapping>(d);
  (*r)->copy_dst_off = dst_off;
  RangeReq q{
      make_header(MsgOp::kReadReq, id), LmrRef{s.key, s.cap, s.rights, 0}, src_off, len, 0, 0};
  LT_RETURN_IF_ERROR(send_request(*r, id, s.owner, &q, sizeof(q), nullptr, 0));
  return id;
}

Result<ReqId> Engine::atomic_async(LmrHandle h, uint64_t off, AtomicKind kind, uint64_t operand,
                                 uint64_t compare, uint64_t* old) {
  if (old == nullptr) return Code::kInvalidArg;
  Mapping m;
  LT_RETURN_IF_ERROR(check_range(h, kRightAtomic, off, sizeof(uint64_t), &m));
  if (off % sizeof(uint64_t) != 0) return Code::kAlign;
  if (Status s; atomic_now_on(m, off, kind, operand, compare, old, &s)) return done_request(s);
  ReqId id;
  auto r = alloc_request(ReqKind::kAtomic, m.owner, &id);
  if (!r) return r.status();
  (*r)->out = reinterpret_cast<std::byte*>(old);
  (*r)->out_len = sizeof(uint64_t);
  AtomicReq q{make_header(MsgOp::kAtomicReq, id),
              LmrRef{m.key, m.cap, m.rights, 0},
              off,
              operand,
              compare,
              static_cast<uint32_t>(kind),
              0};
  LT_RETURN_IF_ERROR(send_request(*r, id, m.owner, &q, sizeof(q), nullptr, 0));
  return id;
}

Result<ReqId> Engine::fetch_add_async(LmrHandle h, uint64_t off, uint64_t add, uint64_t* old) {
  return atomic_async(h, off, AtomicKind::kFetchAdd, add, 0, old);
}

Result<ReqId> Engine::compare_swap_async(LmrHandle h, uint64_t off, uint64_t expected,
                                       uint64_t desired, uint64_t* old) {
  return atomic_async(h, off, AtomicKind::kCompareSwap, desired, expected, old);
}

// ---------------------------------------------------------------- RPC

// Never below zero: a reply that arrives (on a new connection) for a call
// already failed by a peer loss must not mint an extra credit.
void Engine::return_rpc_credit(NodeId n) {
  if (n == 0 || n >= kMaxNodes) return;
  std::atomic<int32_t>& c = peers_[n].rpc_in_flight;
  int32_t v = c.load(std::memory_order_acquire);
  while (v > 0) {
    // seq_cst with the watcher count read after it, against the caller's
    // CreditWatch and then its credit take (rpc_async): one sees the other.
    if (c.compare_exchange_weak(v, v - 1, std::memory_order_seq_cst)) {
      credit_came_back();
      return;
    }
  }
}

Status Engine::register_rpc(uint32_t func_id, RpcHandler h) {
  if (func_id > 0xffff || !h) return Code::kInvalidArg;
  std::unique_lock<std::shared_mutex> g(rpc_mu_);
  if (handlers_.count(func_id)) return Code::kExists;
  auto& fn = handlers_[func_id];
  fn = std::make_shared<RpcHandler>(std::move(h));
  HandlerSlot* page = handler_pages_[func_id >> 8].load(std::memory_order_relaxed);
  if (page == nullptr) {
    handler_page_store_.emplace_back(new HandlerSlot[256]());
    page = handler_page_store_.back().get();
    handler_pages_[func_id >> 8].store(page, std::memory_order_release);
  }
  page[func_id & 0xff].store(fn.get(), std::memory_order_release);
  return Status::ok();
}

// Handlers are never removed, so the pointer stays good for the core's life.
const Engine::RpcHandler* Engine::handler_for(uint32_t func_id) const {
  if (func_id > 0xffff) return nullptr;
  HandlerSlot* page = handler_pages_[func_id >> 8].load(std::memory_order_acquire);
  return page == nullptr ? nullptr : page[func_id & 0xff].load(std::memory_order_acquire);
}

Result<ReqId> Engine::rpc_async(NodeId node, uint32_t func_id, const void* in, size_t in_len,
                              void* out, size_t out_cap, size_t* out_len) {
  if (!joined_.load()) return Code::kNotJoined;
  if (func_id > 0xffff || out_len == nullptr || (in == nullptr && in_len != 0) ||
      (out == nullptr && out_cap != 0) || in_len > max_payload_ - sizeof(RpcReq)) {
    return Code::kInvalidArg;
  }
  if (node == 0 || node >= kMaxNodes) return Code::kPeerDown;
  if (node == self()) {
    // A call to this node runs the handler here, in the caller's thread.
    std::shared_ptr<RpcHandler> fn;
    {
      std::shared_lock<std::shared_mutex> g(rpc_mu_);
      auto it = handlers_.find(func_id);
      if (it != handlers_.end()) fn = it->second;
    }
    if (!fn) return done_request(Code::kNoHandler);
    size_t n = 0;
    Status s = (*fn)(node, std::span<const std::byte>(static_cast<const std::byte*>(in), in_len),
                     std::span<std::byte>(static_cast<std::byte*>(out), out_cap), &n);
    if (s.is_ok()) *out_len = n;
    return done_request(s);
  }
  // Credits: at most rpc_ring_slots calls outstanding at one server, so its
  // ring for us never overflows. A credit comes back with each reply.
  PeerSlot& ps = peers_[node];
  int32_t used = ps.rpc_in_flight.fetch_add(1, std::memory_order_seq_cst);
  if (used >= static_cast<int32_t>(config_.engine.rpc_ring_slots)) {
    ps.rpc_in_flight.fetch_sub(1, std::memory_order_acq_rel);
    return Code::kNoResource;
  }
  ReqId id;
  auto r = alloc_request(ReqKind::kRpc, node, &id);
  if (!r) {
    ps.rpc_in_flight.fetch_sub(1, std::memory_order_acq_rel);
    return r.status();
  }
  (*r)->out = static_cast<std::byte*>(out);
  (*r)->out_len = out_cap;
  (*r)->rpc_len = out_len;
  RpcReq q{make_header(MsgOp::kRpcReq, id), func_id, static_cast<uint32_t>(used)};
  // With kRpcCorkDepth calls to this server already outstanding, their
  // replies are on the way and this call queues behind them there anyway:
  // a stream transport may hold it until the next progress pass (which
  // handles those replies, or any wait) and send several calls at once.
  bool more = used >= kRpcCorkDepth;
  Status s = send_request(*r, id, node, &q, sizeof(q), in, in_len, more);
  if (!s.is_ok()) {
    ps.rpc_in_flight.fetch_sub(1, std::memory_order_acq_rel);
    return s;
  }
  return id;
}

// ---------------------------------------------------------------- messaging

// Credits owed to a peer, taken to ride on a message to it (reads first:
// most messages owe none, and the compare-exchange is a locked instruction).
uint32_t Engine::take_owed(PeerSlot& ps) {
  uint32_t c = ps.consumed.load(std::memory_order_acquire);
  uint32_t r = ps.credited.load(std::memory_order_relaxed);
  while (static_cast<int32_t>(c - r) > 0) {
    if (ps.credited.compare_exchange_weak(r, c, std::memory_order_acq_rel)) return c - r;
  }
  return 0;  // none, or another sender took them
}

// A message from `from` was consumed. Credits go back piggybacked on the
// next message to `from`, or in one MsgCredit per quarter of
// engine.msg_credits: a blocked sender has more than three quarters of its
// messages still unconsumed here, so batching never withholds the credit it
// waits for from a receiver that keeps receiving. msg_mu_ is held: the
// only writer of `consumed`, so counting is no locked instruction.
bool Engine::count_consumed_locked(NodeId from) {
  if (from == 0 || from >= kMaxNodes) return false;
  PeerSlot& ps = peers_[from];
  uint32_t c = ps.consumed.load(std::memory_order_relaxed) + 1;
  ps.consumed.store(c, std::memory_order_release);
  if (from == self()) return true;  // to ourselves: back at once
  int32_t batch = std::max<int32_t>(1, static_cast<int32_t>(config_.engine.msg_credits / 4));
  return static_cast<int32_t>(c - ps.credited.load(std::memory_order_relaxed)) >= batch;
}

void Engine::credit_consumed(NodeId from) {
  bool due;
  {
    std::lock_guard<SpinLock> g(msg_mu_);
    due = count_consumed_locked(from);
  }
  if (due) send_credit(from);
}

// Sends what is owed to `to` now (count_consumed_locked said a MsgCredit is due).
void Engine::send_credit(NodeId to) {
  uint32_t n = take_owed(peers_[to]);
  if (n == 0) return;  // a piggybacking sender took them
  if (to == self()) {
    apply_credits(to, n);
    return;
  }
  MsgCredit c{make_header(MsgOp::kMsgCredit, 0), n, 0};
  (void)send(to, &c, sizeof(c), nullptr, 0, default_deadline(), true);
}

// A lost connection loses the messages, calls and credits it carried; those
// credits would be gone for good (a sender blocked for ever at the limit).
// Both ends start afresh: in-flight counts to zero, owed credits forgotten
// (the other end zeroes its counts as well). Messages of the old connection
// still waiting in a store here return their credits later: a sender may
// then have up to twice its credits unconsumed here, once.
void Engine::reset_credits(NodeId p) {
  if (p == 0 || p >= kMaxNodes) return;
  PeerSlot& ps = peers_[p];
  ps.msg_in_flight.store(0, std::memory_order_seq_cst);
  ps.rpc_in_flight.store(0, std::memory_order_seq_cst);  // failed calls gave theirs back above
  std::lock_guard<SpinLock> g(msg_mu_);
  ps.credited.store(ps.consumed.load(std::memory_order_relaxed), std::memory_order_seq_cst);
}

// Never below zero: credits that arrive after a connection was lost and
// re-made must not mint extra ones.
void Engine::apply_credits(NodeId from, uint32_t count) {
  if (count == 0 || from == 0 || from >= kMaxNodes) return;
  std::atomic<int32_t>& f = peers_[from].msg_in_flight;
  int32_t v = f.load(std::memory_order_acquire);
  while (v > 0) {
    int32_t next = v > static_cast<int32_t>(count) ? v - static_cast<int32_t>(count) : 0;
    if (f.compare_exchange_weak(v, next, std::memory_order_seq_cst)) {  // see return_rpc_credit
      credit_came_back();
      return;
    }
  }
}

// ---------------------------------------------------------------- staging

// First fit in the stage (made on first use); 64-byte granules.
bool Engine::stage_alloc(NodeId peer, uint64_t len, uint64_t* off) {
  if (config_.shm.stage_bytes == 0 || len > config_.shm.stage_bytes) return false;
  uint64_t need = (std::max<uint64_t>(len, 1) + 63) & ~uint64_t{63};
  std::lock_guard<std::mutex> g(stage_mu_);
  if (stage_.addr == nullptr) {
    if (stage_failed_) return false;
    auto r = shm_->alloc_memory(config_.shm.stage_bytes, transport::Access::kRemoteRead);
    if (!r) {
      stage_failed_ = true;
      LT_WARN("shm: no rendezvous stage (%s); large messages are pulled by message",
              r.status().text());
      return false;
    }
    stage_ = *r;
    stage_free_[0] = stage_.len;
  }
  for (auto it = stage_free_.begin(); it != stage_free_.end(); ++it) {
    if (it->second < need) continue;
    *off = it->first;
    uint64_t rest = it->second - need;
    stage_free_.erase(it);
    if (rest > 0) stage_free_[*off + need] = rest;
    stage_used_[*off] = {peer, need};
    return true;
  }
  return false;  // full: this message is pulled instead
}

void Engine::stage_free(NodeId peer, uint64_t off) {
  std::lock_guard<std::mutex> g(stage_mu_);
  auto it = stage_used_.find(off);
  if (it == stage_used_.end() || it->second.peer != peer) return;  // not theirs: ignore
  uint64_t len = it->second.len;
  stage_used_.erase(it);
  auto next = stage_free_.lower_bound(off);
  if (next != stage_free_.end() && next->first == off + len) {
    len += next->second;
    next = stage_free_.erase(next);
  }
  if (next != stage_free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      prev->second += len;
      return;
    }
  }
  stage_free_[off] = len;
}

// The peer is gone: what it had not read yet is freed.
void Engine::stage_release_peer(NodeId peer) {
  std::vector<uint64_t> offs;
  {
    std::lock_guard<std::mutex> g(stage_mu_);
    for (auto& [off, use] : stage_used_) {
      if (use.peer == peer) offs.push_back(off);
    }
  }
  for (uint64_t off : offs) stage_free(peer, off);
}

// Completes a claimed receive with a message staged at its sender: read it
// natively into the receive's buffer, then let the sender free it.
void Engine::deliver_staged(Request* r, NodeId from, uint64_t len, uint64_t rkey, uint64_t off) {
  Status s;
  *r->rpc_len = len;
  *r->msg_src = from;
  if (len > r->out_len) {
    s = Code::kTruncated;
  } else if (len > 0) {
    transport::Endpoint* ep = nullptr;
    s = endpoint(from, default_deadline(), &ep);
    if (s.is_ok() && (len > UINT32_MAX || peers_[from].via.load() != shm_)) s = Code::kMalformed;
    if (s.is_ok()) {
      WorkRequest wr;
      wr.op = transport::Op::kRead;
      wr.num_sge = 1;
      wr.sge[0] = {r->out, static_cast<uint32_t>(len), 0};
      wr.remote = {off, rkey};
      auto p = ep->post(std::span<const WorkRequest>(&wr, 1));
      s = !p ? p.status() : *p == 1 ? Status::ok() : Status(Code::kNoResource);
    }
  }
  finish(r, s);
  MsgStaged done{make_header(MsgOp::kMsgStaged, 0), off};
  (void)send(from, &done, sizeof(done), nullptr, 0, default_deadline(), true);
  credit_consumed(from);
}

// Copies an eager message into a claimed receive and completes it.
void Engine::deliver_eager(Request* r, NodeId from, std::span<const std::byte> data) {
  Status s;
  *r->rpc_len = data.size();
  *r->msg_src = from;
  if (data.size() > r->out_len) {
    s = Code::kTruncated;
  } else if (!data.empty()) {
    std::memcpy(r->out, data.data(), data.size());
  }
  finish(r, s);
}

// The entry of `port`, made on first use. Caller holds msg_mu_, and uses
// the entry before it looks up another (making one may drop empty ones).
// One message stream usually uses one port: the last lookup is kept.
Engine::Port& Engine::port_locked(uint32_t port) {
  if (last_port_ != nullptr && last_port_num_ == port) return *last_port_;
  auto it = ports_.find(port);
  if (it == ports_.end()) {
    if (ports_.size() >= port_sweep_at_) {
      // An empty port holds nothing: it is made again on its next use.
      std::erase_if(ports_, [](const auto& kv) {
        return kv.second->posted.empty() && kv.second->unexpected.empty();
      });
      last_port_ = nullptr;
      port_sweep_at_ = std::max(kPortSweepAt, 2 * ports_.size());
    }
    it = ports_.emplace(port, std::make_unique<Port>()).first;
  }
  last_port_num_ = port;
  last_port_ = it->second.get();
  return *it->second;
}

// Takes a cancelled receive (a message one, or a server loop's RPC one) out
// of its `posted` FIFO (if it is there: it may have been skipped already), so
// that receives timing out on a quiet port or function do not pile up. The
// newest entries are looked at first.
void Engine::unpost(Request* r, ReqId id) {
  auto erase = [id](std::deque<PostedRecv>& posted) {
    for (auto it = posted.rbegin(); it != posted.rend(); ++it) {
      if (it->id == id) {
        posted.erase(std::next(it).base());
        return;
      }
    }
  };
  if (r->kind == ReqKind::kRecv) {
    std::lock_guard<SpinLock> g(msg_mu_);
    erase(port_locked(r->msg_port).posted);
    return;
  }
  RpcQueue* queue = nullptr;
  {
    std::shared_lock<std::shared_mutex> g(rpc_mu_);
    auto it = rpc_queues_.find(r->msg_port);
    if (it == rpc_queues_.end()) return;
    queue = it->second.get();  // never erased
  }
  std::lock_guard<std::mutex> g(rpcq_mu_);
  erase(queue->posted);
}

// Takes the oldest posted receive that is still pending (a cancelled one is
// skipped and dropped). Caller holds msg_mu_.
bool Engine::claim_posted(Port& p, Request** out) {
  while (!p.posted.empty()) {
    PostedRecv pr = p.posted.front();
    p.posted.pop_front();
    uint32_t gen = static_cast<uint32_t>(pr.id >> 32);
    uint64_t expect = word(gen, kStPending);
    if (pr.r->word.compare_exchange_strong(expect, word(gen, kStClaimed))) {
      *out = pr.r;
      return true;
    }
  }
  return false;
}

Result<ReqId> Engine::send_async(NodeId node, uint32_t port, const void* buf, size_t len) {
  return send_impl(node, port, buf, len, false);
}

Status Engine::send_now(NodeId node, uint32_t port, const void* buf, size_t len) {
  auto r = send_impl(node, port, buf, len, true);
  return r.is_ok() ? Status::ok() : r.status();
}

// no_request: the caller blocks anyway (LT_send), so an eager or staged
// message, complete once posted, needs no request slot (ReqId 0); a message
// that must be pulled gives kUnsupported with nothing taken.
Result<ReqId> Engine::send_impl(NodeId node, uint32_t port, const void* buf, size_t len,
                              bool no_request) {
  if (!joined_.load()) return Code::kNotJoined;
  if ((buf == nullptr && len != 0) || len > max_payload_ - sizeof(MsgEager)) {
    return Code::kInvalidArg;
  }
  if (node == 0 || node >= kMaxNodes) return Code::kPeerDown;
  // Credits bound what this sender can leave unconsumed at the receiver, so
  // the receiver's store of unexpected messages stays bounded.
  // The peer first: a dead one is PEER_DOWN even when no credit is left.
  PeerSlot& ps = peers_[node];
  uint64_t eager_max = config_.tcp.eager_max_bytes;
  if (node != self()) {
    transport::Endpoint* ep;
    LT_RETURN_IF_ERROR(endpoint(node, default_deadline(), &ep));
    if (shm_ != nullptr && ps.via.load(std::memory_order_relaxed) == shm_) {
      eager_max = config_.shm.eager_max_bytes;
    }
  }
  int32_t used = ps.msg_in_flight.fetch_add(1, std::memory_order_seq_cst);
  if (used >= static_cast<int32_t>(config_.engine.msg_credits)) {
    ps.msg_in_flight.fetch_sub(1, std::memory_order_acq_rel);
    return Code::kNoResource;
  }
  if (len <= eager_max || node == self()) {
    // The request comes first: once the message is out, the call succeeds.
    ReqId id = 0;
    Result<Request*> r = static_cast<Request*>(nullptr);
    if (!no_request) r = alloc_request(ReqKind::kPlain, 0, &id);
    if (!r) {
      ps.msg_in_flight.fetch_sub(1, std::memory_order_acq_rel);
      return r.status();
    }
    MsgEager m{make_header(MsgOp::kMsgEager, 0), port, 0};
    if (node != self()) m.credits = take_owed(ps);
    Status s;
    if (node == self()) {
      // To this node: delivered here, whatever the size (one copy).
      std::vector<std::byte> msg(sizeof(m) + len);
      std::memcpy(msg.data(), &m, sizeof(m));
      if (len) std::memcpy(msg.data() + sizeof(m), buf, len);
      serve_msg(node, m.h, msg);
    } else {
      s = send(node, &m, sizeof(m), buf, len, default_deadline(), false);
    }
    if (!s.is_ok()) {
      ps.msg_in_flight.fetch_sub(1, std::memory_order_acq_rel);
      give_back_owed(ps, m.credits);  // not delivered: still owed
    }
    if (*r == nullptr) return s.is_ok() ? Result<ReqId>(ReqId{0}) : Result<ReqId>(s);
    uint64_t w = (*r)->word.load();
    (*r)->word.store((w & ~uint64_t{0xff}) | kStClaimed);
    if (!s.is_ok()) {
      release(*r);
      return s;
    }
    finish(*r, Status::ok());
    return id;
  }
  uint64_t stage_off = 0;
  // Staged when shm cannot place (no cross-memory attach): placement is one
  // copy and needs no stage, so it goes by the pull below.
  if (shm_ != nullptr && ps.via.load(std::memory_order_relaxed) == shm_ &&
      !shm_->caps().placement && stage_alloc(node, len, &stage_off)) {
    // Staged: copy it out and complete now; the receiver reads the copy.
    ReqId id = 0;
    Result<Request*> r = static_cast<Request*>(nullptr);
    if (!no_request) r = alloc_request(ReqKind::kPlain, 0, &id);
    if (!r) {
      stage_free(node, stage_off);
      ps.msg_in_flight.fetch_sub(1, std::memory_order_acq_rel);
      return r.status();
    }
    std::memcpy(stage_.addr + stage_off, buf, len);
    MsgRts m{make_header(MsgOp::kMsgRts, 0), port, 0, len, stage_.rkey, stage_off};
    m.credits = take_owed(ps);
    Status s = send(node, &m, sizeof(m), nullptr, 0, default_deadline(), false);
    if (!s.is_ok()) {
      stage_free(node, stage_off);
      ps.msg_in_flight.fetch_sub(1, std::memory_order_acq_rel);
      give_back_owed(ps, m.credits);
      if (*r != nullptr) release(*r);
      return s;
    }
    if (*r == nullptr) return ReqId{0};
    uint64_t w = (*r)->word.load();
    (*r)->word.store((w & ~uint64_t{0xff}) | kStClaimed);
    finish(*r, Status::ok());
    return id;
  }
  if (no_request) {
    ps.msg_in_flight.fetch_sub(1, std::memory_order_acq_rel);
    return Code::kUnsupported;  // goes by the pull: the caller uses send_async
  }
  ReqId id;
  auto r = alloc_request(ReqKind::kSendRndv, node, &id);
  if (!r) {
    ps.msg_in_flight.fetch_sub(1, std::memory_order_acq_rel);
    return r.status();
  }
  (*r)->send_buf = static_cast<const std::byte*>(buf);
  (*r)->out_len = len;
  (*r)->spin_extra_us.store(rendezvous_spin_us(len), std::memory_order_relaxed);
  MsgRts m{make_header(MsgOp::kMsgRts, id), port, 0, len, 0, 0};
  m.credits = take_owed(ps);
  Status s = send_request(*r, id, node, &m, sizeof(m), nullptr, 0);
  if (!s.is_ok()) {
    ps.msg_in_flight.fetch_sub(1, std::memory_order_acq_rel);
    give_back_owed(ps, m.credits);
    return s;
  }
  return id;
}

Result<ReqId> Engine::recv_async(uint32_t port, void* buf, size_t cap, NodeId* src, size_t* len) {
  if (!joined_.load()) return Code::kNotJoined;
  if (src == nullptr || len == nullptr || (buf == nullptr && cap != 0)) return Code::kInvalidArg;
  ReqId id;
  auto r = alloc_request(ReqKind::kRecv, 0, &id);
  if (!r) return r.status();
  Request* req = *r;
  req->out = static_cast<std::byte*>(buf);
  req->out_len = cap;
  req->rpc_len = len;
  req->msg_src = src;
  req->msg_port = port;
  match_recv(req, id);
  return id;
}

// Matches a pending receive with the oldest message waiting on its port, or
// queues it. An eager message is copied in at once; a rendezvous one is
// pulled from its sender (the receive then waits on that node).
void Engine::match_recv(Request* req, ReqId id) {
  Unexpected u;
  bool place = false, credit_due = false;
  {
    std::lock_guard<SpinLock> g(msg_mu_);
    Port* p = &port_locked(req->msg_port);
    if (p->unexpected.empty()) {
      req->peer.store(0);
      p->posted.push_back({id, req});
      return;
    }
    const Unexpected& f = p->unexpected.front();
    // Claim before taking the message, so a racing cancel cannot lose it. A
    // receive that pulls its message becomes PLACING: it cannot be withdrawn
    // until the data is in (or the sender is lost), since the pull has
    // consumed the sender's message. Its peer is set first, so a peer loss
    // finds it.
    const bool pulls = f.rts && f.stage_rkey == 0;
    place = pulls && can_place(f.src, f.len, req->out_len);
    if (pulls) req->peer.store(f.src);
    uint32_t gen = static_cast<uint32_t>(id >> 32);
    uint64_t expect = word(gen, kStPending);
    if (!req->word.compare_exchange_strong(expect, word(gen, pulls ? kStPlacing : kStClaimed))) {
      return;
    }
    u = std::move(p->unexpected.front());
    p->unexpected.pop_front();
    if (!u.rts) credit_due = count_consumed_locked(u.src);
  }
  if (!u.rts) {
    deliver_eager(req, u.src, u.data);
    if (credit_due) send_credit(u.src);
    return;
  }
  if (u.stage_rkey != 0) {
    deliver_staged(req, u.src, u.len, u.stage_rkey, u.stage_off);
    return;
  }
  req->spin_extra_us.store(rendezvous_spin_us(u.len), std::memory_order_relaxed);
  MsgPull pull{make_header(MsgOp::kMsgPull, u.sender_req), id, 0, 0};
  if (place) offer_placement(req, u.src, u.len, &pull);
  // Publish the request's fields (and a registration) to whichever thread
  // completes the receive (the answer may come through another process's
  // shared memory, an edge TSan cannot see); an RMW, so a concurrent
  // peer-down claim is kept.
  req->word.fetch_or(0, std::memory_order_release);
  send_pull(req, id, u.src, pull);
}

// Extra spin for a waiter on a `len`-byte rendezvous: about the time its
// copy takes at 4 GB/s, at most kMaxRendezvousSpinUs. A waiter that sleeps
// through the copy pays a wake-up (tens of µs here) after it.
uint32_t Engine::rendezvous_spin_us(uint64_t len) {
  return static_cast<uint32_t>(std::min<uint64_t>(len >> 12, kMaxRendezvousSpinUs));
}

// True when the sender `from` can write a `len`-byte message straight into
// a receive buffer of `cap` bytes (the transport to it places writes).
bool Engine::can_place(NodeId from, uint64_t len, uint64_t cap) const {
  if (from == 0 || from >= kMaxNodes || len == 0 || len > cap || len > UINT32_MAX) return false;
  transport::Transport* t = peers_[from].via.load(std::memory_order_acquire);
  return t != nullptr && t->caps().placement;
}

// Registers the receive's buffer with the transport that reaches `from` and
// names it in the pull. Both ends of a pair pick the same transport (the
// choice depends on both nodes' offers), so the rkey is one the sender's
// endpoint understands. Nothing is offered if registration fails: the
// sender then sends the bytes in MsgData.
void Engine::offer_placement(Request* req, NodeId from, uint64_t len, MsgPull* pull) {
  transport::Transport* t = peers_[from].via.load(std::memory_order_acquire);
  if (t == nullptr) return;
  auto mr =
      t->register_memory(std::span<std::byte>(req->out, len), transport::Access::kRemoteWrite);
  if (!mr.is_ok() || mr->rkey == 0) return;
  req->place_t = t;
  req->place_mr = *mr;
  pull->dst_addr = reinterpret_cast<uintptr_t>(req->out);
  pull->dst_rkey = mr->rkey;
}

void Engine::drop_placement(Request* r) {
  if (r->place_t == nullptr) return;
  r->place_t->deregister_memory(r->place_mr);
  r->place_t = nullptr;
  r->place_mr = {};
}

// Sends a receive's pull; a receive whose pull cannot go fails with why.
void Engine::send_pull(Request* req, ReqId id, NodeId to, const MsgPull& pull) {
  Status s = send(to, &pull, sizeof(pull), nullptr, 0, default_deadline(), true);
  if (s.is_ok()) return;
  // Unless a peer-down sweep failed it first (and its slot may be reused).
  uint32_t gen = static_cast<uint32_t>(id >> 32);
  uint64_t w = word(gen, kStPlacing);
  if (req->word.compare_exchange_strong(w, word(gen, kStClaimed))) finish(req, s);
}

// The sender's side of placement: one kWrite of the message into the
// receiver's registered buffer.
Status Engine::place_write(NodeId to, const std::byte* buf, uint64_t len, uint64_t addr,
                         uint64_t rkey) {
  if (len > UINT32_MAX) return Code::kInvalidArg;
  transport::Endpoint* ep;
  Deadline d = default_deadline();
  LT_RETURN_IF_ERROR(endpoint(to, d, &ep));
  WorkRequest wr;
  wr.op = transport::Op::kWrite;
  wr.flags = transport::kWrMustQueue;
  wr.num_sge = 1;
  wr.sge[0] = {buf, static_cast<uint32_t>(len), 0};
  wr.remote = {addr, rkey};
  return post_one(to, ep, wr, d);
}

void Engine::serve_msg(NodeId from, const MsgHeader& h, std::span<const std::byte> b) {
  switch (static_cast<MsgOp>(h.op)) {
    case MsgOp::kMsgEager:
    case MsgOp::kMsgRts: {
      bool rts = h.op == static_cast<uint8_t>(MsgOp::kMsgRts);
      uint32_t port = rts ? load<MsgRts>(b).port : load<MsgEager>(b).port;
      apply_credits(from, rts ? load<MsgRts>(b).credits : load<MsgEager>(b).credits);
      Request* r = nullptr;
      std::unique_lock<SpinLock> g(msg_mu_);
      Port* p = &port_locked(port);
      if (!claim_posted(*p, &r)) {
        Unexpected u;
        u.src = from;
        u.rts = rts;
        if (rts) {
          auto m = load<MsgRts>(b);
          u.len = m.len;
          u.sender_req = h.req_id;
          u.stage_rkey = m.stage_rkey;
          u.stage_off = m.stage_off;
        } else {
          auto data = b.subspan(sizeof(MsgEager));
          u.len = data.size();
          u.data.assign(data.begin(), data.end());
        }
        p->unexpected.push_back(std::move(u));
        return;
      }
      if (!rts) {
        bool credit_due = count_consumed_locked(from);
        g.unlock();
        deliver_eager(r, from, b.subspan(sizeof(MsgEager)));
        if (credit_due) send_credit(from);
        return;
      }
      g.unlock();
      if (auto m = load<MsgRts>(b); m.stage_rkey != 0) {
        deliver_staged(r, from, m.len, m.stage_rkey, m.stage_off);
        return;
      }
      // Matched a waiting receive: pull the data into it (or have the
      // sender place it there).
      r->peer.store(from);
      uint64_t w = r->word.load();
      uint64_t recv_id = (w >> 8 << 32) | r->idx;
      MsgPull pull{make_header(MsgOp::kMsgPull, h.req_id), recv_id, 0, 0};
      uint64_t len = load<MsgRts>(b).len;
      r->spin_extra_us.store(rendezvous_spin_us(len), std::memory_order_relaxed);
      if (can_place(from, len, r->out_len)) offer_placement(r, from, len, &pull);
      // PLACING, placed or pulled: the pull consumes the sender's message, so
      // the receive cannot be withdrawn until the data is in (match_recv).
      r->word.store((w & ~uint64_t{0xff}) | kStPlacing, std::memory_order_release);
      send_pull(r, recv_id, from, pull);
      return;
    }
    case MsgOp::kMsgPull: {
      // The receiver is ready: send the rendezvous data, complete our send.
      auto q = load<MsgPull>(b);
      uint32_t idx = static_cast<uint32_t>(h.req_id);
      uint32_t gen = static_cast<uint32_t>(h.req_id >> 32);
      if (idx >= num_reqs_.load(std::memory_order_acquire)) return;
      Request* r = req_at(idx);
      uint64_t expect = word(gen, kStPending);
      // Claim first: only then are the request's plain fields ours to read.
      bool claimed =
          r->peer.load() == from && r->word.compare_exchange_strong(expect, word(gen, kStClaimed));
      if (claimed && r->kind != ReqKind::kSendRndv) {
        r->word.store(word(gen, kStPending), std::memory_order_release);  // not a send: undo
        claimed = false;
      }
      if (!claimed) {
        // The send was cancelled (timed out): tell the receiver, whose
        // receive then takes the next message instead.
        late_.fetch_add(1, std::memory_order_relaxed);
        MsgHeader d = make_header(MsgOp::kMsgData, q.recv_id, Code::kTimedOut);
        (void)send(from, &d, sizeof(d), nullptr, 0, default_deadline(), true);
        return;
      }
      if (q.dst_rkey != 0) {
        // Single copy: write into the receiver's buffer, then say so (the
        // transport delivers MsgPlaced after the written bytes).
        Status ws = place_write(from, r->send_buf, r->out_len, q.dst_addr, q.dst_rkey);
        if (ws.is_ok()) {
          MsgPlaced pl{make_header(MsgOp::kMsgPlaced, q.recv_id), r->out_len};
          finish(r, send(from, &pl, sizeof(pl), nullptr, 0, default_deadline(), true));
          return;
        }
        if (ws.code() == Code::kPeerDown) {
          finish(r, ws);
          return;
        }
        // Refused (a ptrace policy may forbid cross-memory attach): send the bytes.
        LT_DEBUG("placement to node %u refused (%s); sending the data", from, ws.text());
      }
      MsgHeader d = make_header(MsgOp::kMsgData, q.recv_id);
      Status s = send(from, &d, sizeof(d), r->send_buf, r->out_len, default_deadline(), true);
      finish(r, s);
      return;
    }
    case MsgOp::kMsgCredit:
      apply_credits(from, load<MsgCredit>(b).count);
      return;
    case MsgOp::kMsgStaged:
      stage_free(from, load<MsgStaged>(b).stage_off);
      return;
    default:
      malformed_.fetch_add(1, std::memory_order_relaxed);
  }
}

// ---------------------------------------------------------------- sync

namespace {
// Owner token of a lock: the calling thread. Locks are per thread, so two
// threads of one node exclude each other.
uint64_t lock_owner() { return static_cast<uint64_t>(syscall(SYS_gettid)); }
bool valid_sync_name(const std::string& n) { return !n.empty() && n.size() <= kMaxName; }
}  // namespace

Status Engine::lock(const std::string& name, Deadline d) {
  if (!joined_.load()) return Code::kNotJoined;
  if (!valid_sync_name(name)) return Code::kInvalidArg;
  CtlArgs a;
  a.has_u64 = true;
  a.u64 = lock_owner();
  uint64_t req = 0;
  auto r = membership_.name_call(CtlType::kLockAcquire, name, d, a, &req);
  if (r.status().code() == Code::kTimedOut) {
    // Withdraw the waiting acquire; if the grant crossed it, this releases.
    (void)membership_.post_only(CtlType::kLockRelease, membership_.new_req(), name, a);
  }
  return r.status();
}

Status Engine::unlock(const std::string& name, Deadline d) {
  if (!joined_.load()) return Code::kNotJoined;
  if (!valid_sync_name(name)) return Code::kInvalidArg;
  CtlArgs a;
  a.has_u64 = true;
  a.u64 = lock_owner();
  return membership_.name_call(CtlType::kLockRelease, name, d, a).status();
}

Status Engine::barrier(const std::string& name, uint32_t count, Deadline d) {
  if (!joined_.load()) return Code::kNotJoined;
  if (!valid_sync_name(name) || count == 0) return Code::kInvalidArg;
  CtlArgs a;
  a.has_u32 = true;
  a.u32 = count;
  uint64_t req = 0;
  auto r = membership_.name_call(CtlType::kBarrier, name, d, a, &req);
  if (r.status().code() == Code::kTimedOut) {
    CtlArgs w;
    w.has_u32 = true;
    w.u32 = 0;  // withdraw arrival `req`
    (void)membership_.post_only(CtlType::kBarrier, req, name, w);
  }
  return r.status();
}

// ---------------------------------------------------------------- serving

void Engine::reply_status(NodeId to, uint64_t req_id, Status s) {
  MsgHeader h = make_header(MsgOp::kReply, req_id, s.code());
  (void)send(to, &h, sizeof(h), nullptr, 0, default_deadline(), true);
}

void Engine::serve(NodeId from, const MsgHeader& h, std::span<const std::byte> b) {
  // Only the progress token holder serves: a plain increment (no locked
  // instruction per message), read racily by the progress loop and stats().
  served_.store(served_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  switch (static_cast<MsgOp>(h.op)) {
    case MsgOp::kReadReq: {
      auto q = load<RangeReq>(b);
      Status s = with_lmr(q.lmr.key, [&](std::shared_ptr<LocalLmr>& l) -> Status {
        LT_RETURN_IF_ERROR(check_ref(*l, q.lmr.key, q.lmr, kRightRead, q.offset, q.len));
        if (q.len > max_payload_ - sizeof(MsgHeader)) return Code::kInvalidArg;
        // The transport copies what the socket does not take, so the LMR is
        // only read while we hold it.
        MsgHeader rh = make_header(MsgOp::kReply, h.req_id);
        RacyAccess racy;  // the LMR bytes (other send paths keep the checks)
        (void)send(from, &rh, sizeof(rh), l->mem + q.offset, q.len, default_deadline(), true);
        return Status::ok();
      });
      if (!s.is_ok()) reply_status(from, h.req_id, s);
      return;
    }
    case MsgOp::kWriteReq:
    case MsgOp::kMemsetReq: {
      auto q = load<RangeReq>(b);
      bool write = h.op == static_cast<uint8_t>(MsgOp::kWriteReq);
      Status s = with_lmr(q.lmr.key, [&](std::shared_ptr<LocalLmr>& l) -> Status {
        if (write && b.size() - sizeof(RangeReq) != q.len) return Code::kMalformed;
        if (!write && q.value > 0xff) return Code::kMalformed;
        LT_RETURN_IF_ERROR(check_ref(*l, q.lmr.key, q.lmr, kRightWrite, q.offset, q.len));
        if (write) {
          lmr_copy(l->mem + q.offset, b.data() + sizeof(RangeReq), q.len);
        } else {
          lmr_fill(l->mem + q.offset, static_cast<int>(q.value), q.len);
        }
        return Status::ok();
      });
      reply_status(from, h.req_id, s);
      return;
    }
    case MsgOp::kMemcpyReq: {
      auto q = load<MemcpyReq>(b);
      Status s = with_lmr(q.dst.key, [&](std::shared_ptr<LocalLmr>& d) -> Status {
        LT_RETURN_IF_ERROR(check_ref(*d, q.dst.key, q.dst, kRightWrite, q.dst_offset, q.len));
        return with_lmr(q.src.key, [&](std::shared_ptr<LocalLmr>& s) -> Status {
          LT_RETURN_IF_ERROR(check_ref(*s, q.src.key, q.src, kRightRead, q.src_offset, q.len));
          lmr_copy(d->mem + q.dst_offset, s->mem + q.src_offset, q.len);
          return Status::ok();
        });
      });
      reply_status(from, h.req_id, s);
      return;
    }
    case MsgOp::kAllocReq: {
      auto q = load<AllocReq>(b);
      if (q.size == 0 || q.size > config_.engine.max_lmr_bytes) {
        reply_status(from, h.req_id, q.size == 0 ? Code::kInvalidArg : Code::kNoMemory);
        return;
      }
      auto l = new_lmr(q.size, from);
      if (!l) {
        reply_status(from, h.req_id, l.status());
        return;
      }
      AllocReply rep{make_header(MsgOp::kAllocReply, h.req_id),
                     (*l)->key,
                     (*l)->secret.k0,
                     (*l)->secret.k1,
                     q.size,
                     (*l)->region.rkey};
      (void)send(from, &rep, sizeof(rep), nullptr, 0, default_deadline(), true);
      return;
    }
    case MsgOp::kFreeReq: {
      auto q = load<FreeReq>(b);
      Status s = with_lmr(q.lmr.key, [&](std::shared_ptr<LocalLmr>& l) -> Status {
        return check_ref(*l, q.lmr.key, q.lmr, kRightAdmin, 0, 0);
      });
      if (s.is_ok()) s = lmrs_.erase(q.lmr.key, nullptr);
      reply_status(from, h.req_id, s);
      return;
    }
    case MsgOp::kMsgEager:
    case MsgOp::kMsgRts:
    case MsgOp::kMsgStaged:
    case MsgOp::kMsgPull:
    case MsgOp::kMsgCredit:
      serve_msg(from, h, b);
      return;
    case MsgOp::kRpcReq:
      serve_rpc(from, h, b);
      return;
    case MsgOp::kAtomicReq: {
      auto q = load<AtomicReq>(b);
      uint64_t old = 0;
      auto kind = static_cast<AtomicKind>(q.kind);
      Status s = with_lmr(q.lmr.key, [&](std::shared_ptr<LocalLmr>& l) -> Status {
        if (q.pad != 0 || (kind != AtomicKind::kFetchAdd && kind != AtomicKind::kCompareSwap) ||
            (kind == AtomicKind::kFetchAdd && q.compare != 0)) {
          return Code::kMalformed;
        }
        LT_RETURN_IF_ERROR(check_ref(*l, q.lmr.key, q.lmr, kRightAtomic, q.offset, 8));
        if (q.offset % 8 != 0) return Code::kAlign;
        old = apply_atomic(l->mem + q.offset, kind, q.operand, q.compare);
        return Status::ok();
      });
      if (!s.is_ok()) {
        reply_status(from, h.req_id, s);
        return;
      }
      AtomicReply rep{make_header(MsgOp::kAtomicReply, h.req_id), old};
      (void)send(from, &rep, sizeof(rep), nullptr, 0, default_deadline(), true);
      return;
    }
    case MsgOp::kMapReq: {
      auto q = load<MapReq>(b);
      if (q.name_len == 0 || q.name_len > kMaxName || b.size() - sizeof(MapReq) != q.name_len) {
        reply_status(from, h.req_id, Code::kMalformed);
        return;
      }
      std::string name(reinterpret_cast<const char*>(b.data() + sizeof(MapReq)), q.name_len);
      std::shared_ptr<Mapping> src;
      Status s;
      {
        std::lock_guard<std::mutex> g(published_mu_);
        auto it = published_.find(name);
        if (it == published_.end()) {
          s = Code::kNotFound;
        } else if (q.rights == 0 || (q.rights & it->second.second) != q.rights) {
          s = Code::kPerm;
        } else {
          s = handles_.get(it->second.first, &src);
        }
      }
      if (!s.is_ok()) {
        reply_status(from, h.req_id, s);
        return;
      }
      MapReply rep{make_header(MsgOp::kMapReply, h.req_id),
                   src->owner,
                   q.rights,
                   src->size,
                   LmrRef{src->key, cap_for(src->secret, src->key, q.rights), q.rights, 0},
                   src->rkey};
      (void)send(from, &rep, sizeof(rep), nullptr, 0, default_deadline(), true);
      return;
    }
    default:
      malformed_.fetch_add(1, std::memory_order_relaxed);
  }
}

void Engine::complete(NodeId from, const MsgHeader& h, std::span<const std::byte> b) {
  uint32_t idx = static_cast<uint32_t>(h.req_id);
  uint32_t gen = static_cast<uint32_t>(h.req_id >> 32);
  if (idx >= num_reqs_.load(std::memory_order_acquire)) {
    late_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  Request* r = req_at(idx);
  if (static_cast<MsgOp>(h.op) == MsgOp::kRpcReply && from < kMaxNodes) {
    // The server freed our ring slot, whether or not the call is still waited for.
    return_rpc_credit(from);
  }
  auto op = static_cast<MsgOp>(h.op);
  bool msg_data = op == MsgOp::kMsgData || op == MsgOp::kMsgPlaced;
  if (msg_data) {
    // The message is consumed here even if its receive was cancelled.
    credit_consumed(from);
  }
  uint64_t expect = word(gen, kStPending);
  bool claimed =
      r->peer.load() == from && (r->word.compare_exchange_strong(expect, word(gen, kStClaimed)) ||
                                 (msg_data && expect == word(gen, kStPlacing) &&
                                  r->word.compare_exchange_strong(expect, word(gen, kStClaimed))));
  if (!claimed) {
    late_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  Status s = static_cast<Code>(h.status);
  if (r->kind == ReqKind::kRecv && op == MsgOp::kMsgData && !s.is_ok()) {
    // The sender withdrew its rendezvous message: wait for the next one.
    drop_placement(r);
    r->word.store(word(gen, kStPending), std::memory_order_release);
    match_recv(r, h.req_id);
    return;
  }
  if (s.is_ok()) {
    switch (r->kind) {
      case ReqKind::kRead:
      case ReqKind::kCopyRead:
        if (op != MsgOp::kReply || b.size() - sizeof(MsgHeader) != r->out_len) {
          s = Code::kMalformed;
        } else {
          std::memcpy(r->out, b.data() + sizeof(MsgHeader), r->out_len);
        }
        break;
      case ReqKind::kAlloc:
        if (op != MsgOp::kAllocReply) {
          s = Code::kMalformed;
        } else {
          r->alloc = load<AllocReply>(b);
        }
        break;
      case ReqKind::kMap:
        if (op != MsgOp::kMapReply) {
          s = Code::kMalformed;
        } else {
          r->mapr = load<MapReply>(b);
        }
        break;
      case ReqKind::kRecv: {
        if (op == MsgOp::kMsgPlaced) {
          // Already in the buffer (the bytes came before this message).
          uint64_t n = load<MsgPlaced>(b).len;
          if (r->place_t == nullptr || n > r->place_mr.len) {
            s = Code::kMalformed;
          } else {
            *r->rpc_len = n;
            *r->msg_src = from;
          }
          break;
        }
        if (op != MsgOp::kMsgData) {
          s = Code::kMalformed;
          break;
        }
        auto data = b.subspan(sizeof(MsgHeader));
        *r->rpc_len = data.size();
        *r->msg_src = from;
        if (data.size() > r->out_len) {
          s = Code::kTruncated;
        } else if (!data.empty()) {
          std::memcpy(r->out, data.data(), data.size());
        }
        break;
      }
      case ReqKind::kSendRndv:
      case ReqKind::kRpcRecv:  // completed locally, never by a peer's reply
        s = Code::kMalformed;
        break;
      case ReqKind::kRpc: {
        if (op != MsgOp::kRpcReply) {
          s = Code::kMalformed;
          break;
        }
        size_t n = b.size() - sizeof(MsgHeader);
        *r->rpc_len = n;
        if (n > r->out_len) {
          s = Code::kTruncated;
        } else if (n > 0) {
          std::memcpy(r->out, b.data() + sizeof(MsgHeader), n);
        }
        break;
      }
      case ReqKind::kAtomic:
        if (op != MsgOp::kAtomicReply) {
          s = Code::kMalformed;
        } else {
          uint64_t old = load<AtomicReply>(b).old;
          std::memcpy(r->out, &old, sizeof(old));
        }
        break;
      case ReqKind::kPlain:
        if (op != MsgOp::kReply || b.size() != sizeof(MsgHeader)) s = Code::kMalformed;
        break;
    }
  }
  if (s.is_ok() && r->kind == ReqKind::kCopyRead) {
    // Phase 2 of a cross-node memcpy: write the bounce buffer to dst.
    const Mapping& d = *r->copy_dst;
    if (d.owner == self()) {
      LmrRef dref{d.key, d.cap, d.rights, 0};
      s = with_lmr(d.key, [&](std::shared_ptr<LocalLmr>& l) -> Status {
        LT_RETURN_IF_ERROR(check_ref(*l, d.key, dref, kRightWrite, r->copy_dst_off, r->out_len));
        lmr_copy(l->mem + r->copy_dst_off, r->bounce.get(), r->out_len);
        return Status::ok();
      });
    } else {
      r->kind = ReqKind::kPlain;
      r->peer.store(d.owner);
      RangeReq q{make_header(MsgOp::kWriteReq, h.req_id),
                 LmrRef{d.key, d.cap, d.rights, 0},
                 r->copy_dst_off,
                 r->out_len,
                 0,
                 0};
      // Once pending, a timeout or peer-down sweep may release the request:
      // keep the data in a local owner until the transport has taken it.
      std::unique_ptr<std::byte[]> data = std::move(r->bounce);
      uint64_t len = r->out_len;
      r->word.store(word(gen, kStPending), std::memory_order_release);
      Status ss = send(d.owner, &q, sizeof(q), data.get(), len, default_deadline(), true);
      if (ss.is_ok()) return;
      uint64_t w = word(gen, kStPending);
      if (!r->word.compare_exchange_strong(w, word(gen, kStClaimed))) return;
      s = ss;
    }
  }
  finish(r, s);
}

EngineStats Engine::stats() const { return {served_.load(), malformed_.load(), late_.load()}; }

}  // namespace lt::proto
