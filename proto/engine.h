// The protocol core of one Engine: membership, the LMR table this node owns,
// the handles this process holds, the request table, and progress. Every
// operation is a request with a completion; blocking calls wait on it.
//
// Threading: all public methods are thread-safe. Progress (polling the
// transport and serving incoming requests) is done by whichever thread holds
// the progress token: a waiting caller while it spins, else the progress
// thread, which blocks in epoll when idle. Handlers never block.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/config.h"
#include "common/siphash.h"
#include "common/spinlock.h"
#include "proto/membership.h"
#include "proto/msg.h"
#include "proto/slot_table.h"
#include "qos/scheduler.h"
#include "transport/transport.h"

namespace lt::proto {

using LmrHandle = uint64_t;
using ReqId = uint64_t;

struct EngineStats {
  uint64_t served = 0;        // requests served for peers
  uint64_t malformed = 0;     // messages dropped by the decoder
  uint64_t late_replies = 0;  // replies for cancelled or unknown requests
};

class Engine {
 public:
  explicit Engine(const Config& config);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// Binds the transport, joins through ltier-manager, starts the progress
  /// thread. kAuth (wrong secret), kPeerDown (no manager), kTimedOut.
  Status join();
  /// Leaves the cluster; ops still in flight fail with kClosed.
  void leave();

  NodeId self() const { return membership_.self(); }
  std::vector<Member> members() const { return membership_.members(); }
  Deadline default_deadline() const { return Deadline::lazy_ms(config_.engine.op_timeout_ms); }
  const Config& config() const { return config_; }
  std::string transport_address() const;
  /// The transport this node uses for `node` ("tcp", "shm", "self") and
  /// why; connects first if the peer was not used yet. kPeerDown.
  Result<std::pair<std::string, std::string>> peer_transport(NodeId node);

  // LMR directory (blocking, control path).
  Result<LmrHandle> malloc(NodeId node, uint64_t size, uint32_t rights, Deadline d);
  Status free(LmrHandle h, Deadline d);
  Status publish(LmrHandle h, const std::string& name, uint32_t max_rights, Deadline d);
  Result<LmrHandle> map(const std::string& name, uint32_t rights, Deadline d);
  Status unmap(LmrHandle h);
  Result<uint64_t> lmr_size(LmrHandle h) const;

  // One-sided operations. Each returns a request to wait() on; argument
  // errors (kBadHandle, kPerm, kOutOfBounds, kInvalidArg) are returned here
  // and nothing is sent.
  Result<ReqId> read_async(LmrHandle h, uint64_t off, void* buf, uint64_t len);
  Result<ReqId> write_async(LmrHandle h, uint64_t off, const void* buf, uint64_t len);
  Result<ReqId> memset_async(LmrHandle h, uint64_t off, uint8_t value, uint64_t len);
  Result<ReqId> memcpy_async(LmrHandle dst, uint64_t dst_off, LmrHandle src, uint64_t src_off,
                             uint64_t len);

  /// 64-bit atomics on an 8-byte aligned word of an LMR, atomic with respect
  /// to each other from every node (not to plain writes of the same word).
  /// *old receives the prior value when the request completes successfully.
  /// kAlign (offset % 8), kPerm (no atomic right), kOutOfBounds.
  Result<ReqId> fetch_add_async(LmrHandle h, uint64_t off, uint64_t add, uint64_t* old);
  Result<ReqId> compare_swap_async(LmrHandle h, uint64_t off, uint64_t expected, uint64_t desired,
                                   uint64_t* old);

  /// Named locks held by the calling thread, granted in FIFO order by
  /// ltier-manager (fair). kExists: this thread already holds it (locks are
  /// not reentrant). kTimedOut: not granted in time (the request is
  /// withdrawn). A node that dies releases its locks.
  Status lock(const std::string& name, Deadline d);
  /// kPerm when the calling thread does not hold the lock.
  Status unlock(const std::string& name, Deadline d);
  /// Waits until `count` callers (any nodes, any threads) have reached
  /// barrier `name`; the name is then reusable for the next generation.
  /// kInvalidArg when count disagrees with the current generation's.
  Status barrier(const std::string& name, uint32_t count, Deadline d);

  /// An RPC handler: reads `in`, writes at most out.size() bytes to `out`,
  /// sets *out_len, returns the status the caller gets. Runs on the thread
  /// doing progress (normally the progress thread): it must not block.
  using RpcHandler = std::function<Status(NodeId src, std::span<const std::byte> in,
                                          std::span<std::byte> out, size_t* out_len)>;
  /// kExists if func_id has a handler; kInvalidArg above 65535.
  Status register_rpc(uint32_t func_id, RpcHandler h);
  /// Server-loop RPC (LITE's recvRPC/replyRPC): requests for func_id queue
  /// here until a thread takes one with recv_rpc_async and answers it with
  /// reply_rpc. kExists if func_id already has a handler or a queue.
  Status register_rpc_queue(uint32_t func_id);
  /// Takes the oldest queued request for func_id (FIFO across clients). On
  /// completion *src, *len and *token are set; kTruncated (with *len the
  /// needed size) when the request exceeds cap: it then stays queued.
  /// kInvalidArg when func_id was not registered with register_rpc_queue.
  Result<ReqId> recv_rpc_async(uint32_t func_id, void* buf, size_t cap, NodeId* src, size_t* len,
                               uint64_t* token);
  /// Answers the request `token` names with `out` (status s is what the
  /// caller gets; a non-ok status carries no data). kBadHandle for an
  /// unknown or already answered token; kInvalidArg for a reply above the
  /// largest message (the token stays valid); kPeerDown if the caller died.
  Status reply_rpc(uint64_t token, const void* out, size_t len, Status s);
  /// Calls func_id on `node`. On completion *out_len is the reply's length;
  /// kTruncated (with *out_len the needed size) when it exceeds out_cap.
  /// kNoHandler, kPeerDown, kTimedOut; kNoResource when all
  /// engine.rpc_ring_slots credits to that node are in use.
  Result<ReqId> rpc_async(NodeId node, uint32_t func_id, const void* in, size_t in_len, void* out,
                          size_t out_cap, size_t* out_len);

  /// Messaging. send_async: eager up to tcp.eager_max_bytes (buf is free
  /// when it returns), rendezvous above (buf must stay valid until the
  /// request completes). Order is kept per (source, port). Each destination
  /// grants engine.msg_credits unconsumed messages; without a credit:
  /// kNoResource (nothing sent). kInvalidArg above tcp.max_msg_bytes.
  Result<ReqId> send_async(NodeId node, uint32_t port, const void* buf, size_t len);
  /// LT_send's fast path for a message that is complete once posted (eager,
  /// or staged over shm): no request slot. kUnsupported when it must be
  /// pulled instead (nothing taken: use send_async and wait); otherwise as
  /// send_async.
  Status send_now(NodeId node, uint32_t port, const void* buf, size_t len);
  /// Receives the next message on `port` from any node. On completion
  /// *src and *len are set; kTruncated (with *len the needed size; the
  /// message is consumed) when it exceeds cap.
  Result<ReqId> recv_async(uint32_t port, void* buf, size_t cap, NodeId* src, size_t* len);

  /// Waits for `id`; returns the operation's status and frees the request.
  /// kTimedOut leaves the request in flight (wait again, or cancel()).
  Status wait(ReqId id, Deadline d);
  /// Non-blocking: kNoResource while in flight; otherwise as wait().
  Status test(ReqId id);
  /// Waits; on timeout cancels the request (a late reply is dropped).
  Status wait_or_cancel(ReqId id, Deadline d) { return wait_or_cancel(id, d, nullptr); }

  /// The local checks of an access (handle, rights, bounds), without doing it:
  /// a multi-request operation validates its whole range first.
  Status check_access(LmrHandle h, uint32_t need, uint64_t off, uint64_t len) const;

  /// Blocking fast paths: false when the op cannot be done at once here
  /// (use the async form); else true with its status in *s. At once means
  /// the LMR lives on this node, or on a same-host peer over shm (native).
  bool read_now(LmrHandle h, uint64_t off, void* buf, uint64_t len, Status* s);
  bool write_now(LmrHandle h, uint64_t off, const void* buf, uint64_t len, Status* s);
  bool atomic_now(LmrHandle h, uint64_t off, bool fetch_add, uint64_t operand, uint64_t compare,
                  uint64_t* old, Status* s);

  /// Largest length one read/write/cross-node memcpy request carries
  /// (bounded by tcp.max_msg_bytes). Blocking calls split longer ranges.
  uint64_t max_op_bytes() const { return max_payload_ - sizeof(RangeReq); }

  /// One progress pass; true if it found work. A waiter passes its
  /// request's state word: the pass ends after the batch that completes it.
  bool progress(const std::atomic<uint64_t>* watch = nullptr);

  /// Credits (message or RPC) came back since credit_epoch() returned
  /// `seen`? Callers out of credits make a CreditWatch, read the epoch, try,
  /// and on kNoResource wait here: spin (polling, like wait()) for
  /// engine.spin_us, then sleep until credits come back or the deadline
  /// (kTimedOut). Returned credits move the epoch only while a CreditWatch
  /// exists (a locked instruction per message otherwise): a return that
  /// came before the watch is seen by the try after it.
  uint32_t credit_epoch() const { return credit_seq_.load(std::memory_order_acquire); }
  Status wait_credits(uint32_t seen, Deadline d);
  class CreditWatch {
   public:
    explicit CreditWatch(Engine& c) : c_(c) {
      c_.credit_watchers_.fetch_add(1, std::memory_order_seq_cst);
    }
    ~CreditWatch() { c_.credit_watchers_.fetch_sub(1, std::memory_order_seq_cst); }
    CreditWatch(const CreditWatch&) = delete;
    CreditWatch& operator=(const CreditWatch&) = delete;

   private:
    Engine& c_;
  };
  EngineStats stats() const;
  const qos::Scheduler& scheduler() const { return sched_; }

 private:
  struct Mapping;
  struct LocalLmr;
  struct Request;
  enum class ReqKind : uint8_t;

  struct Results {
    AllocReply alloc{};
    MapReply mapr{};
  };
  Status wait_impl(ReqId id, Deadline d, Results* res);
  Status wait_or_cancel(ReqId id, Deadline d, Results* res);

  // Requests.
  Result<Request*> alloc_request(ReqKind kind, NodeId peer, ReqId* id);
  Result<ReqId> done_request(Status s);
  void finish(Request* r, Status s);
  void release(Request* r);
  Request* lookup(ReqId id);
  void fail_requests_to(NodeId peer, Code c);

  // Peers.
  Status endpoint(NodeId p, Deadline d, transport::Endpoint** out);
  void retire_endpoint(NodeId p);
  // more: another post to `p` is sure to follow soon (see rpc_async), so a
  // stream transport may hold this one for the same system call.
  Status send(NodeId p, const void* hdr, size_t hlen, const void* data, size_t dlen, Deadline d,
              bool reply, bool more = false);
  Status send_request(Request* r, ReqId id, NodeId p, const void* hdr, size_t hlen,
                      const void* data, size_t dlen, bool more = false);
  Status post_one(NodeId p, transport::Endpoint* ep, const transport::WorkRequest& wr, Deadline d);

  // Serving peers.
  void handle(const transport::Completion& c);
  void serve(NodeId from, const MsgHeader& h, std::span<const std::byte> b);
  void complete(NodeId from, const MsgHeader& h, std::span<const std::byte> b);
  // Single-copy rendezvous (placement): see ARCHITECTURE "Placement".
  static uint32_t rendezvous_spin_us(uint64_t len);
  bool can_place(NodeId from, uint64_t len, uint64_t cap) const;
  void offer_placement(Request* req, NodeId from, uint64_t len, MsgPull* pull);
  void drop_placement(Request* r);
  void send_pull(Request* req, ReqId id, NodeId to, const MsgPull& pull);
  Status place_write(NodeId to, const std::byte* buf, uint64_t len, uint64_t addr, uint64_t rkey);
  void reply_status(NodeId to, uint64_t req_id, Status s);
  Status check_ref(const LocalLmr& l, uint64_t key, const LmrRef& ref, uint32_t need, uint64_t off,
                   uint64_t len) const;
  Result<ReqId> atomic_async(LmrHandle h, uint64_t off, AtomicKind kind, uint64_t operand,
                             uint64_t compare, uint64_t* old);
  Status local_copy(const Mapping& dst, uint64_t doff, const Mapping& src, uint64_t soff,
                    uint64_t len);

  /// Runs f(shared_ptr<LocalLmr>&) on the LMR `key` names. The table lock is
  /// not held while f runs; the shared_ptr keeps the memory alive even if
  /// the LMR is freed meanwhile.
  template <typename F>
  Status with_lmr(uint64_t key, F&& f);
  Status check_range(LmrHandle h, uint32_t need, uint64_t off, uint64_t len, Mapping* m) const;
  Result<std::shared_ptr<LocalLmr>> new_lmr(uint64_t size, NodeId master);
  bool copy_now(const Mapping& m, bool write, uint64_t off, std::byte* buf, uint64_t len,
                Status* s);
  bool atomic_now_on(const Mapping& m, uint64_t off, AtomicKind kind, uint64_t operand,
                     uint64_t compare, uint64_t* old, Status* s);
  transport::Endpoint* native_endpoint(const Mapping& m);
  Status native_op(const Mapping& m, transport::Endpoint* ep, const transport::WorkRequest& wr);
  uint64_t cap_for(const SipKey& secret, uint64_t key, uint32_t rights) const;
  void progress_loop();
  void on_member_down(NodeId n);
  struct Unexpected;
  struct PostedRecv {
    ReqId id;
    Request* r;
  };
  struct Port;
  void deliver_eager(Request* r, NodeId from, std::span<const std::byte> data);
  // Message credits: a message consumed here is counted under msg_mu_
  // (count_consumed_locked, true when a MsgCredit is due), and the count goes
  // back piggybacked (take_owed) or in that MsgCredit (send_credit).
  bool count_consumed_locked(NodeId from);
  void credit_consumed(NodeId from);  // count_consumed_locked + send_credit, taking msg_mu_
  void send_credit(NodeId to);
  Result<ReqId> send_impl(NodeId node, uint32_t port, const void* buf, size_t len, bool no_request);
  // Rendezvous staging over shm (shm.stage_bytes): the sender copies a
  // message into its stage and completes; the receiver reads it natively.
  bool stage_alloc(NodeId peer, uint64_t len, uint64_t* off);
  void stage_free(NodeId peer, uint64_t off);
  void stage_release_peer(NodeId peer);
  void deliver_staged(Request* r, NodeId from, uint64_t len, uint64_t rkey, uint64_t off);
  void apply_credits(NodeId from, uint32_t count);
  void reset_credits(NodeId p);
  void serve_msg(NodeId from, const MsgHeader& h, std::span<const std::byte> b);
  bool claim_posted(Port& p, Request** out);
  void unpost(Request* r, ReqId id);
  void match_recv(Request* req, ReqId id);
  void return_rpc_credit(NodeId n);
  struct QueuedRpc;
  struct RpcQueue;
  struct RpcJob;
  void serve_rpc(NodeId from, const MsgHeader& h, std::span<const std::byte> b);
  void deliver_rpc(Request* r, NodeId from, uint64_t caller_req, std::span<const std::byte> in);
  void run_rpc(NodeId from, uint64_t caller_req, const RpcHandler& fn,
               std::span<const std::byte> in, std::span<std::byte> out);
  void rpc_worker_loop();
  bool on_manager_readable(std::vector<Membership::Event>* events);  // false: manager gone

  Config config_;
  qos::Scheduler sched_;
  Membership membership_;
  // Transports in use, and the ones peers are picked among (either may be
  // null). Set at join, then read-only.
  std::vector<std::unique_ptr<transport::Transport>> transports_;
  transport::Transport* tcp_ = nullptr;
  transport::Transport* shm_ = nullptr;
  std::string host_id_;
  uint32_t max_payload_ = 0;
  /// The transport for a peer and why: shm when it runs on this host (same
  /// boot id and network namespace) and both allow shm, else tcp.
  transport::Transport* pick_transport(const transport::PeerInfo& info, const char** why) const;

  SlotTable<std::shared_ptr<LocalLmr>> lmrs_;    // memory this node owns
  SlotTable<std::shared_ptr<Mapping>> handles_;  // handles this process holds

  std::mutex published_mu_;
  std::map<std::string, std::pair<LmrHandle, uint32_t>> published_;  // name -> handle, rights

  // Request slots come in chunks made on first need: a fresh engine touches
  // (and page-faults) only what it uses. Chunks are never freed before the
  // engine, so a Request* stays valid; lookups check idx < num_reqs_.
  static constexpr uint32_t kReqChunk = 64;
  Request* req_at(uint32_t idx) const;
  Status grow_requests();
  std::unique_ptr<std::unique_ptr<Request[]>[]> chunks_;
  uint32_t max_reqs_ = 0;
  std::atomic<uint32_t> num_reqs_{0};
  std::mutex grow_mu_;
  std::atomic<uint64_t> free_head_{0};  // [aba tag:32][index+1:32]

  static constexpr NodeId kMaxNodes = kMaxNodeId;
  struct PeerSlot {
    std::atomic<transport::Endpoint*> ep{nullptr};
    std::atomic<transport::Transport*> via{nullptr};  // the transport of `ep`
    std::atomic<const char*> why{nullptr};            // why that one (a string literal)
    std::atomic<bool> down{false};
    std::atomic<int32_t> rpc_in_flight{0};  // RPC credits used at this server
    std::atomic<int32_t> msg_in_flight{0};  // message credits used at this receiver
    // Its messages consumed here (written under msg_mu_ only) and how many of
    // those went back as credits; the difference is owed (wrapping counts).
    std::atomic<uint32_t> consumed{0};
    std::atomic<uint32_t> credited{0};
  };
  std::shared_mutex rpc_mu_;  // handlers_ is read per call, written at registration
  std::unordered_map<uint32_t, std::shared_ptr<RpcHandler>> handlers_;  // never erased
  std::unordered_map<uint32_t, std::unique_ptr<RpcQueue>> rpc_queues_;  // never erased
  // The handlers again, read per call without a lock: function id >> 8
  // picks a page of 256 slots (made at registration, under rpc_mu_).
  using HandlerSlot = std::atomic<const RpcHandler*>;
  std::atomic<HandlerSlot*> handler_pages_[256] = {};
  std::vector<std::unique_ptr<HandlerSlot[]>> handler_page_store_;  // under rpc_mu_
  const RpcHandler* handler_for(uint32_t func_id) const;
  std::unique_ptr<std::byte[]> rpc_out_;  // reply scratch; used by the progress token holder
  size_t rpc_out_cap_ = 0;
  std::mutex rpcq_mu_;  // guards every RpcQueue's contents and pending_replies_
  struct PendingReply {
    NodeId src;
    uint64_t caller_req;
  };
  std::unordered_map<uint64_t, PendingReply> pending_replies_;  // token -> caller
  uint64_t next_token_ = 1;
  // Worker pool (engine.rpc_workers > 0): handlers run there, not on the
  // progress thread, and may block.
  std::mutex jobs_mu_;
  std::condition_variable jobs_cv_;
  std::deque<RpcJob> jobs_;
  bool jobs_stop_ = false;
  std::vector<std::thread> rpc_workers_;
  // Guards ports_ and the cache (short sections: queue operations and an
  // eager message's copy into the unexpected store; no system call).
  SpinLock msg_mu_;
  std::unordered_map<uint32_t, std::unique_ptr<Port>> ports_;
  uint32_t last_port_num_ = 0;  // the last port looked up, and its entry
  Port* last_port_ = nullptr;
  // Making a port when this many exist first drops the empty ones (then the
  // mark doubles past what is left), so ports used once do not pile up.
  static constexpr size_t kPortSweepAt = 1024;
  size_t port_sweep_at_ = kPortSweepAt;
  Port& port_locked(uint32_t port);
  static uint32_t take_owed(PeerSlot& ps);
  static void give_back_owed(PeerSlot& ps, uint32_t n) {  // taken but not delivered
    if (n != 0) ps.credited.fetch_sub(n, std::memory_order_acq_rel);
  }
  std::unique_ptr<PeerSlot[]> peers_;
  std::mutex stage_mu_;  // guards the stage allocator (no syscalls but the first alloc)
  transport::MemRegion stage_{};
  bool stage_failed_ = false;
  std::map<uint64_t, uint64_t> stage_free_;  // offset -> length, coalesced
  struct StageUse {
    NodeId peer;
    uint64_t len;
  };
  std::unordered_map<uint64_t, StageUse> stage_used_;  // offset -> use
  std::mutex connect_mu_;
  std::vector<std::unique_ptr<transport::Endpoint>> endpoints_;  // owned; never freed early

  std::atomic<bool> busy_{false}, want_{false};
  std::atomic<uint32_t> spinners_{0};  // callers spinning in wait(), polling for everyone
  std::atomic<uint32_t> credit_seq_{0}, credit_sleepers_{0};  // wait_credits() futex
  std::atomic<uint32_t> credit_watchers_{0};                  // live CreditWatch objects
  void credits_returned();           // bumps the epoch and wakes credit waiters
  void credit_came_back();           // credits_returned() if anyone watches (CreditWatch)
  void end_spin(bool will_sleep);    // a spinner stops; unparks the progress thread if needed
  std::atomic<bool> parked_{false};  // the progress thread is parked for them
  // The progress token holder while it handles a batch, and whether more
  // completions of that batch follow the one being handled (holder-only):
  // replies it sends meanwhile are corked (kWrMore) and go out together.
  static constexpr int kMaxBatchesPerPass = 16;
  // While passes find work, the progress thread looks at the manager socket
  // this often (its answers to lock, barrier and name calls, membership).
  static constexpr uint64_t kBusyManagerCheckNs = 100000;
  static constexpr uint64_t kSpinYieldNs = 4000;          // a waiter yields its core this often
  static constexpr uint64_t kMaxRendezvousSpinUs = 1000;  // see rendezvous_spin_us
  static constexpr uint64_t kMaxParkNs = 1000000;         // progress thread's longest park (1 ms)
  static constexpr int32_t kRpcCorkDepth = 2;  // outstanding calls before rpc_async corks
  static constexpr uint64_t kMaxPassNs = 2000000;
  std::atomic<std::thread::id> holder_{};
  bool more_in_batch_ = false;
  std::vector<transport::Completion> cq_;  // used by the progress token holder only
  // A transport whose last batch (one message of at most kHoldRxBytes that
  // completed a waiter) is released at the start of the next pass; holder-only.
  transport::Transport* held_rx_ = nullptr;
  transport::Completion held_cq_{};
  static constexpr uint32_t kHoldRxBytes = 4096;

  std::atomic<bool> running_{false};
  std::atomic<bool> joined_{false};
  int wake_fd_ = -1;
  std::thread progress_thread_;
  std::atomic<std::thread::id> progress_tid_{};  // set by the progress thread itself
  std::atomic<uint64_t> served_{0}, malformed_{0}, late_{0};
};

}  // namespace lt::proto
