// The protocol engine of one process: membership, the LMRs this node owns,
// what the process holds (handles, requests, ports, RPC registrations), and
// progress. Every operation is a request with a completion; blocking calls
// wait on it.
//
// One class defined by concern across proto/ (eRPC's layout): this header
// declares it, and each part lives in its own file, named in the private
// section below. The state of each concern is a small class that owns its
// lock (RequestTable, PortTable, Credits, StageAllocator, RpcRegistry,
// LmrStore, HandleTable, PeerTable, TransportSet). Being that index, with
// each part's members declared under its file's name, this header runs past
// the 500 lines the other files keep to.
//
// Threading: all public methods are thread-safe. Progress (polling the
// transports and serving incoming requests) is done by whichever thread holds
// the progress token: a waiting caller while it spins, else the progress
// thread, which blocks in epoll when idle. Handlers never block.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/config.h"
#include "common/spin_gauge.h"
#include "proto/cork_watch.h"
#include "proto/lmr/handles.h"
#include "proto/lmr/lmr_store.h"
#include "proto/member_events.h"
#include "proto/membership.h"
#include "proto/msg.h"
#include "proto/msg/credits.h"
#include "proto/msg/ports.h"
#include "proto/msg/stage.h"
#include "proto/park_timer.h"
#include "proto/peers.h"
#include "proto/request_table.h"
#include "proto/rpc/registry.h"
#include "proto/rpc/rpc_ring.h"
#include "proto/rpc/workers.h"
#include "proto/traffic.h"
#include "proto/transport_set.h"
#include "qos/scheduler.h"
#include "transport/transport.h"

namespace lt::proto {

class NativeOps;  // rma/native_ops.h

struct EngineStats {
  uint64_t served = 0;        // requests served for peers
  uint64_t malformed = 0;     // messages dropped by the decoder
  uint64_t late_replies = 0;  // replies for cancelled or unknown requests
  uint64_t ring_calls = 0;    // RPCs this node made into a server's ring
  uint64_t ring_replies = 0;  // replies this node wrote into a caller's reply ring
  uint64_t split_recvs = 0;   // rendezvous messages received split (msg/rndv_split.cc)
};

/// What one process holds in an engine: its LMR handles and published
/// names, its requests, message ports and RPC registrations and reply
/// tokens. (Locks are per thread and need no state here.) A node daemon
/// serving many processes from one engine keeps one of these per process;
/// an embedded engine has exactly one.
struct ClientState {
  explicit ClientState(const Config& config)
      : handles(1u << 16), requests(config.engine.max_outstanding) {}
  HandleTable handles;
  RequestTable requests;
  PortTable ports;
  RpcRegistry rpcs;
  ReplyTokens reply_tokens;
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

  /// This node's id (0 before join): the membership's, kept here at join
  /// (it never changes after; a rejoin claims the same id) so that the
  /// per-message checks make no virtual call.
  NodeId self() const { return self_; }
  /// kNotJoined before join; kClosed once ltier-manager declared this node
  /// down while it was alive (a stall past the down time: expel()).
  Status usable() const {
    if (expelled_.load(std::memory_order_relaxed)) return Code::kClosed;
    return joined_.load() ? Status::ok() : Status(Code::kNotJoined);
  }
  std::vector<Member> members() const {
    return membership_ ? membership_->members() : std::vector<Member>{};
  }
  Deadline default_deadline() const { return Deadline::lazy_ms(config_.engine.op_timeout_ms); }
  const Config& config() const { return config_; }
  /// The address book's record of `node` (this node's included): kNotFound.
  Result<Member> node_info(NodeId node) const;
  /// The node called `name` (the highest id, if several have that name), or
  /// the one that joined with cluster.rank `rank`, waiting until `d` for it
  /// to join: kNotFound when none has by then.
  Result<NodeId> node_by_name(const std::string& name, Deadline d) const;
  Result<NodeId> node_by_rank(uint32_t rank, Deadline d) const;
  /// The address this node publishes for `transport` ("" when it does not run it).
  std::string local_address(std::string_view transport) const;
  /// The next membership event (up, down, expelled, manager lost, rejoined),
  /// waiting until `d`: kTimedOut, kClosed once the engine left. Works after
  /// this node was expelled too: that is when the application needs it.
  Result<MemberEvent> member_event(Deadline d) { return events_.next(d); }
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
  using RpcHandler = proto::RpcHandler;
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
  /// A request already waiting that fits is taken at the call: kDoneReqId.
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
  uint32_t credit_epoch() const { return credits_.epoch(); }
  Status wait_credits(uint32_t seen, Deadline d);
  class CreditWatch {
   public:
    explicit CreditWatch(Engine& e) : w_(e.credits_) {}

   private:
    Credits::Watch w_;
  };
  EngineStats stats() const;
  /// Each transport's name and what it holds now (LT_stats).
  std::vector<std::pair<std::string, transport::TransportStats>> transport_stats() const;
  const qos::Scheduler& scheduler() const { return sched_; }
  /// Traffic with each live peer, per transport (PeerTraffic::transport is
  /// the index in transport_stats()).
  std::vector<PeerTraffic> peer_traffic() const;

 private:
  struct Results {
    AllocReply alloc{};
    MapReply mapr{};
  };
  static constexpr NodeId kMaxNodes = kNodeSlots;

  // ---- engine.cc: lifecycle, peers going away
  void peer_gone(NodeId n, bool member_down);
  /// `p` holds its node slot from now on (the membership knows it, or a
  /// transport identified it): what an older node of the slot left in the
  /// peer table and the credits is reset. False when a newer node holds it.
  bool claim_peer(NodeId p);
  // The manager declared this node down: every call fails from now on.
  void expel();
  bool on_manager_readable(std::vector<Membership::Event>* events);  // false: manager gone
  // What the membership reported: peers gone, expulsion, and the events
  // the application reads.
  void apply_events(const std::vector<Membership::Event>& events);

  Result<LmrHandle> malloc_held(NodeId node, uint64_t size, uint32_t rights, Deadline d);

  // ---- request_ops.cc: requests, waiting
  // `bytes`: the payload, which a throttled QoS class pays tokens for.
  Result<Request*> alloc_request(ReqKind kind, NodeId peer, ReqId* id, uint64_t bytes = 0) {
    if (expelled_.load(std::memory_order_relaxed)) return Code::kClosed;
    qos::Ticket ticket;
    ticket.peer = peer;
    LT_RETURN_IF_ERROR(sched_.admit(bytes, default_deadline(), &ticket));
    auto r = client_.requests.claim(kind, peer, id);
    if (!r) {
      sched_.retire(ticket);
      return r.status().code() == Code::kNoResource ? Status(sched_.out_of_slots()) : r.status();
    }
    (*r)->admitted = true;
    (*r)->ticket = ticket;
    return r;
  }
  Result<ReqId> done_request(Status s);
  /// A request claimed by its caller and nobody else yet: completed now with
  /// `s` (an op done at once), or freed unsent (returning `s`, its error).
  Result<ReqId> finish_now(Request* r, ReqId id, Status s) {
    r->set_claimed();
    finish(r, s);
    return id;
  }
  Status drop_unsent(Request* r, Status s) {
    r->set_claimed();
    release(r);
    return s;
  }
  void finish(Request* r, Status s) {
    drop_placement(r);
    r->ticket.peer = r->peer.load(std::memory_order_relaxed);
    sched_.complete(r->ticket);  // its RTT sample, with QoS on, judged by its peer's
    r->complete(s);
  }
  void release(Request* r);
  Request* lookup(ReqId id) { return client_.requests.lookup(id); }
  void fail_requests_to(NodeId peer, Code c);
  Status wait_impl(ReqId id, Deadline d, Results* res);
  Status collect(Request* r, Results* res);  // a done request's status and results; frees it
  Status waited_in_handler();                // a wait by the token's holder (request_ops.cc)
  Status wait_or_cancel(ReqId id, Deadline d, Results* res);
  // A spinner stops: its wait is over (it may call again soon), it sleeps on
  // its futex (unparks the progress thread), or it polls asleep (request_ops.cc).
  enum class SpinEnd { kDone, kSleeps, kPolls };
  void end_spin(SpinEnd how);
  // A caller whose spin ran out while the progress thread is parked sleeps
  // on the transports itself (become_poller, poll_asleep): the completion
  // that ends its wait wakes it directly, not the progress thread, which
  // would then wake it (two wake-ups, each a context switch on a busy core).
  bool become_poller();
  bool poll_asleep(Request* r, Deadline d);
  void open_poller_set();

  // ---- peers.cc: endpoints and the single post path
  // The endpoint to `p` into *out, which keeps it valid while it lives: the
  // cached one here (every post asks), else endpoint_slow() in peers.cc.
  Status endpoint(NodeId p, Deadline d, EndpointRef* out) {
    if (transport::Endpoint* e = peers_.valid(p) ? peers_.usable(p) : nullptr) [[likely]] {
      out->set(e);
      return Status::ok();
    }
    return endpoint_slow(p, d, out);
  }
  Status endpoint_slow(NodeId p, Deadline d, EndpointRef* out);
  Status connect_peer(NodeId p, Deadline d, EndpointRef* out);
  // more: another post to `p` follows soon (rpc_async), so it may be held. express: an RPC
  // call or reply, which may pass other threads' messages (Endpoint::post_express).
  Status send(NodeId p, const void* hdr, size_t hlen, const void* data, size_t dlen, Deadline d,
              bool reply, bool more = false, bool express = false);
  // The same on an endpoint the caller holds (an EndpointRef of its own).
  Status send_on(NodeId p, transport::Endpoint* ep, const void* hdr, size_t hlen, const void* data,
                 size_t dlen, Deadline d, bool reply, bool more = false, bool express = false);
  Status send_request(Request* r, NodeId p, const void* hdr, size_t hlen, const void* data,
                      size_t dlen, bool more = false, bool express = false);
  Status send_request_by_ref(Request* r, ReqId id, NodeId p, const void* hdr, size_t hlen,
                             const void* data, size_t dlen);
  void drop_unsent(Request* r);
  Status post_all(NodeId p, transport::Endpoint* ep, std::span<const transport::WorkRequest> wrs,
                  Deadline d, size_t* posted = nullptr);
  Status post_rest(NodeId p, transport::Endpoint* ep, std::span<const transport::WorkRequest> wrs,
                   Deadline d, size_t* posted, Result<size_t> r);
  void count_tx(NodeId p, std::span<const transport::WorkRequest> wrs);  // traffic_
  // One message of `bytes` posted to `p` through `via` (post_short).
  void count_tx_one(NodeId p, const transport::Transport* via, uint64_t bytes) {
    traffic_.tx(p, transports_.index_of(via), 1, bytes);
  }
  // sched_.post, and for a thread whose posts are deferred (and held, on a
  // transport that gathers) a pass asked for.
  Result<size_t> post_via_sched(NodeId p, transport::Endpoint* ep,
                                std::span<const transport::WorkRequest> wrs) {
    auto r = sched_.post(*ep, wrs);
    if (sched_.defers_posts()) [[unlikely]] {
      const transport::Transport* t = peers_.via(p);
      if (t == nullptr || t->caps().gathers) ask_for_flush();
    }
    return r;
  }
  // Deferred posts wait in their transport for a pass's flush(): one comes
  // soon (the wake fd rings, at most once per pass).
  void ask_for_flush();
  void reply_status(NodeId to, uint64_t req_id, Status s);

  // ---- progress.cc: polling, the progress thread
  void progress_loop();
  /// The progress thread is about to sleep on the transports: each arms its
  /// wake-ups (Transport::prepare_sleep) under the progress token. False when
  /// a caller holds the token or asked for a pass meanwhile: look again first.
  bool prepare_sleep();
  // ---- dispatch.cc: an arrived message to the part that owns it
  void handle(const transport::Completion& c);
  // Keeps a tcp or verbs header's CPU hint when its sender shares our CPUs.
  void note_cpu(NodeId from, const MsgHeader& h);
  void serve(NodeId from, const MsgHeader& h, std::span<const std::byte> b);
  void complete(NodeId from, const MsgHeader& h, std::span<const std::byte> b);
  /// Claims the request a reply names (generation and peer must match);
  /// null when it is not waited for any more (counted as late).
  Request* claim_for_reply(NodeId from, const MsgHeader& h, bool msg_data);

  // ---- lmr/directory.cc: malloc, free, publish, map; their serving side
  void serve_alloc(NodeId from, const MsgHeader& h, std::span<const std::byte> b);
  void serve_free(NodeId from, const MsgHeader& h, std::span<const std::byte> b);
  void serve_map(NodeId from, const MsgHeader& h, std::span<const std::byte> b);
  void serve_revoke(NodeId from, const MsgHeader& h, std::span<const std::byte> b);
  void revoke_mappers(const Mapping& m, const std::vector<NodeId>& mappers, Deadline d);
  Status free_remote(const Mapping& m, Deadline d);

  // ---- rma/rma.cc: read, write, memset, memcpy (message emulation)
  bool memset_now(const Mapping& m, uint64_t off, uint8_t value, uint64_t len, Status* s);
  bool memcpy_now(const Mapping& d, uint64_t doff, const Mapping& s, uint64_t soff, uint64_t len,
                  Status* st);
  bool copy_now(const Mapping& m, bool write, uint64_t off, std::byte* buf, uint64_t len,
                Status* s);
  Status local_copy(const Mapping& dst, uint64_t doff, const Mapping& src, uint64_t soff,
                    uint64_t len);
  Result<ReqId> memcpy_remote(const Mapping& d, uint64_t dst_off, const Mapping& s,
                              uint64_t src_off, uint64_t len);
  void serve_read(NodeId from, const MsgHeader& h, std::span<const std::byte> b);
  void serve_write(NodeId from, const MsgHeader& h, std::span<const std::byte> b);
  void serve_memcpy(NodeId from, const MsgHeader& h, std::span<const std::byte> b);
  /// Phase 2 of a cross-node memcpy: the bounce buffer to dst. True when the
  /// request is still in flight (its write went out).
  bool copy_second_half(Request* r, const MsgHeader& h, Status* s);
  // ---- rma/native.cc: one-sided ops straight on a peer's memory
  /// Whether the op on `m` can go natively (ep set), else through the owner.
  bool native_endpoint(const Mapping& m, EndpointRef* ep, uint64_t* rkey);
  /// `ops` holds the op (rma/native_ops.h); its check is written beside it.
  Status native_op(const Mapping& m, uint64_t rkey, transport::Endpoint* ep, NativeOps& ops);
  const transport::MappedRegion* kept_view(const Mapping& m, uint64_t* rkey) const;
  Status view_op(const Mapping& m, uint64_t rkey, const transport::MappedRegion& v, NativeOps& ops);
  Status post_checked(NodeId owner, transport::Endpoint* ep,
                      std::span<const transport::WorkRequest> wrs);
  Status applied(NodeId owner, std::span<const transport::WorkRequest> wrs, Result<size_t> r);
  // ---- rma/atomics.cc
  Status local_atomic(LocalLmr& l, uint64_t off, AtomicKind kind, uint64_t operand,
                      uint64_t compare, uint64_t* old);
  bool atomic_now_on(const Mapping& m, uint64_t off, AtomicKind kind, uint64_t operand,
                     uint64_t compare, uint64_t* old, Status* s);
  Result<ReqId> atomic_async(LmrHandle h, uint64_t off, AtomicKind kind, uint64_t operand,
                             uint64_t compare, uint64_t* old);
  void serve_atomic(NodeId from, const MsgHeader& h, std::span<const std::byte> b);

  // ---- rpc/rpc_server.cc, rpc/rpc_loop.cc
  // ring_slot: the request came into slot ring_slot of our ring for `from`
  // (rpc/rpc_ring.h), and the reply may go back into the same slot of its.
  void serve_rpc(NodeId from, const MsgHeader& h, std::span<const std::byte> b, int ring_slot = -1);
  void run_rpc(NodeId from, uint64_t caller_req, const RpcHandler& fn,
               std::span<const std::byte> in, std::span<std::byte> out, int ring_slot = -1);
  // ---- rpc/rpc_ring.cc: calls and replies by write-with-immediate into rings
  void ask_ring(NodeId node);
  void serve_ring(NodeId from, const MsgHeader& h, std::span<const std::byte> b);
  Status ring_write(NodeId to, uint64_t rkey, uint32_t slot, uint32_t imm, const void* hdr,
                    size_t hlen, const void* data, size_t dlen, bool reply);
  bool rpc_by_ring(Request* r, ReqId id, NodeId node, const RpcReq& q, const void* in,
                   size_t in_len, Status* s, bool* ask);
  bool reply_by_ring(NodeId to, int slot, const MsgHeader& rh, const std::byte* data, size_t n);
  void handle_ring(NodeId from, uint32_t imm);
  void ring_done(NodeId from, uint64_t req_id, int hint = -1);
  std::span<std::byte> rpc_scratch();
  Result<ReqId> rpc_self(uint32_t func_id, const void* in, size_t in_len, void* out, size_t out_cap,
                         size_t* out_len);
  void reply_self(uint64_t caller_req, const void* out, size_t len, Status s);
  void queue_rpc(RpcQueue* queue, NodeId from, uint64_t caller_req, std::span<const std::byte> in);
  void deliver_rpc(Request* r, NodeId from, uint64_t caller_req, std::span<const std::byte> in);
  bool take_waiting_call(RpcQueue* queue, void* buf, size_t cap, NodeId* src, size_t* len,
                         uint64_t* token);
  void unpost(Request* r, ReqId id);

  // ---- msg/send.cc, msg/recv.cc, msg/rndv.cc, msg/credits.cc, msg/stage.cc
  Result<ReqId> send_impl(NodeId node, uint32_t port, const void* buf, size_t len, bool no_request);
  // These three complete at their post and return kDoneReqId.
  Result<ReqId> send_to_self(uint32_t port, const void* buf, size_t len, MsgCreditGuard& credit);
  // `ep`: the endpoint to `node`, held by send_impl for the whole send.
  Result<ReqId> send_eager(NodeId node, transport::Endpoint* ep, bool gathers, uint32_t port,
                           const void* buf, size_t len, MsgCreditGuard& credit);
  Result<ReqId> send_staged(NodeId node, transport::Endpoint* ep, uint32_t port, const void* buf,
                            size_t len, uint64_t stage_off, MsgCreditGuard& credit);
  Result<ReqId> send_rndv(NodeId node, transport::Transport* via, uint32_t port, const void* buf,
                          size_t len, MsgCreditGuard& credit);
  Status admit_send(NodeId node, uint64_t bytes);  // QoS's gate for a send that takes no request
  void serve_msg(NodeId from, const MsgHeader& h, std::span<const std::byte> b);
  void arrive(NodeId from, const MsgHeader& h, std::span<const std::byte> b);
  // A receive's request (kRecv, or kRpcRecv with the function id as port),
  // its buffer and outputs set.
  Result<Request*> receive_request(ReqKind kind, uint32_t port, void* buf, size_t cap, NodeId* src,
                                   size_t* len, ReqId* id);
  void match_recv(Request* req, ReqId id);
  bool take_waiting(uint32_t port, void* buf, size_t cap, NodeId* src, size_t* len);
  void deliver_eager(Request* r, NodeId from, std::span<const std::byte> data);
  void deliver_staged(Request* r, NodeId from, uint64_t len, uint64_t rkey, uint64_t off,
                      bool credit_now);
  /// Sets a receive's length and source, then copies `data` in or fails it
  /// with kTruncated: the status to finish it with.
  static Status fill_recv(Request* r, NodeId from, std::span<const std::byte> data,
                          bool set_src = true);
  // Rendezvous (and single-copy placement: see ARCHITECTURE "Placement").
  static uint32_t rendezvous_spin_us(uint64_t len);
  bool can_place(NodeId from, uint64_t len, uint64_t cap) const;
  void offer_placement(Request* req, NodeId from, uint64_t len, MsgPull* pull);
  void drop_placement(Request* r);
  // ep: the endpoint to `to` the caller holds, or null (looked up here).
  bool send_pull(Request* req, ReqId id, NodeId to, transport::Endpoint* ep, const MsgPull& pull);
  void pull_matched(Request* r, NodeId from, uint64_t sender_req, uint64_t len, RndvSrc src);
  void start_pull(Request* r, ReqId id, NodeId from, uint64_t sender_req, uint64_t len,
                  RndvSrc src);
  void serve_pull(NodeId from, const MsgHeader& h, std::span<const std::byte> b);
  Status place_write(NodeId to, const std::byte* src, uint64_t msg_len, const MsgPull& q,
                     uint64_t bytes, ReqId by_ref_id, bool* wrote);
  bool sends_by_ref(NodeId to) const;
  void sent_by_ref(ReqId id, Status s);  // a kSendDone
  // Split rendezvous (msg/rndv_split.cc): both ends copy part of a message.
  void offer_split(Request* r, transport::Transport* via, uint32_t gen, MsgRts* m);
  void end_split_send(Request* r, uint32_t gen, Status s);
  void serve_pulled(NodeId from, const MsgHeader& h);
  uint64_t split_head(NodeId from, uint64_t len, RndvSrc src) const;
  void read_split_tail(Request* r, ReqId id, NodeId from, uint64_t sender_req, std::byte* dst,
                       uint64_t len, uint64_t head, RndvSrc src);
  bool split_reply(Request* r, ReqId id, NodeId from, MsgOp op, Status s,
                   std::span<const std::byte> b);
  void end_split_recv(Request* r, ReqId id);
  Status complete_recv(Request* r, NodeId from, MsgOp op, std::span<const std::byte> b);
  // A message consumed here: counted (Credits::count_consumed under the
  // port table's lock), and the credits go back piggybacked or in a
  // MsgCredit (send_credit).
  void credit_consumed(NodeId from, bool credit_now);  // credit_now: kFlagCreditNow
  void send_credit(NodeId to);

  Config config_;
  // Spin budgets learned from waits (common/spin_gauge.h): a caller's wait
  // for a request or credits, and the progress thread's gap between served
  // requests. Both start at the configured spin and stop at kMaxLearnedSpinNs.
  SpinGauge wait_gauge_, serve_gauge_;
  static constexpr uint64_t kMaxLearnedSpinNs = 500000;
  qos::Scheduler sched_;
  Traffic traffic_;  // per peer and transport, counted by each thread in its own block
  std::unique_ptr<Membership> membership_;  // ltier-manager's today (make_membership)
  NodeId self_ = 0;                         // membership_->self() once joined
  MemberEvents events_;
  TransportSet transports_;  // set at join, then read-only
  uint32_t max_payload_ = 0;

  LmrStore lmrs_;       // memory this node owns
  ClientState client_;  // what this process holds
  PeerTable peers_;
  RpcRings rings_{kMaxNodes};
  Credits credits_;
  StageAllocator stage_;
  RpcWorkerPool rpc_workers_;
  std::unique_ptr<std::byte[]> rpc_out_;  // reply scratch; used by the progress token holder
  size_t rpc_out_cap_ = 0;

  // Progress (progress.cc). One thread polls at a time (busy_); see progress().
  std::atomic<bool> busy_{false}, want_{false};
  std::atomic<bool> flush_asked_{false};  // ask_for_flush() rang; a pass clears it, then flushes
  std::atomic<uint32_t> spinners_{0};     // callers spinning in wait(), polling for everyone
  std::atomic<bool> parked_{false};       // the progress thread is parked for them
  // Waits that ended within their spin: it moving means a caller is busy
  // calling, though between two calls it may not be spinning right now.
  std::atomic<uint64_t> spin_ends_{0};
  std::atomic<bool> sleeper_{false};  // a caller went to sleep: don't park for spin_ends_
  // A caller asleep on the transports themselves (poll_asleep): the progress
  // thread stays parked for it. At most one at a time.
  std::atomic<bool> poller_{false};
  std::atomic<uint32_t> futex_sleepers_{0};  // callers asleep on a futex: someone must poll
  int poller_epfd_ = -1;                     // every transport's wait_fd() and poller_fd_
  int poller_fd_ = -1;                       // rung when the poller's request completes
  PeerCpu peer_cpu_;  // where the last hinted record's sender ran (YieldPacer)
  ParkTimer park_timer_;
  CorkWatch corks_;  // eager messages held back under a stream (msg/send.cc)
  static constexpr int kMaxBatchesPerPass = 16;
  // Empty passes a progress() call makes with the token before it lets go
  // (progress.cc says why).
  static constexpr int kEmptyPassesPerCall = 4;
  // While passes find work, the progress thread looks at the manager socket
  // this often (its answers to lock, barrier and name calls, membership).
  static constexpr uint64_t kBusyManagerCheckNs = 100000;
  static constexpr uint64_t kSpinYieldNs =
      4000;  // the longest gap between a spinner's yields (YieldPacer)
  static constexpr uint64_t kMaxRendezvousSpinUs = 1000;  // see rendezvous_spin_us
  static constexpr uint64_t kCollectEveryNs = 1000000;    // retired endpoints looked at (1 ms)
  static constexpr int32_t kRpcCorkDepth = 2;  // outstanding calls before rpc_async corks
  static constexpr uint64_t kMaxPassNs = 2000000;
  static constexpr size_t kCqBatch = 64;
  // The progress token holder while it handles a batch, and whether more
  // completions of that batch follow the one being handled (holder-only):
  // replies it sends meanwhile are corked (kWrMore) and go out together.
  std::atomic<std::thread::id> holder_{};
  std::atomic<bool> handler_wait_told_{false};  // waited_in_handler() logged once
  bool more_in_batch_ = false;
  std::vector<transport::Completion> cq_;  // used by the progress token holder only
  // A transport whose last batch (one message of at most kHoldRxBytes that
  // completed a waiter) is released at the start of the next pass; holder-only.
  transport::Transport* held_rx_ = nullptr;
  transport::Completion held_cq_{};
  static constexpr uint32_t kHoldRxBytes = 4096;

  std::atomic<bool> running_{false};
  std::atomic<bool> joined_{false};
  std::atomic<bool> expelled_{false};
  int wake_fd_ = -1;
  std::thread progress_thread_;
  std::atomic<std::thread::id> progress_tid_{};  // set by the progress thread itself
  std::atomic<uint64_t> served_{0}, malformed_{0}, late_{0}, ring_calls_{0}, ring_replies_{0},
      split_recvs_{0};
};

}  // namespace lt::proto
