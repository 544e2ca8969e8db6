/* ltier C API: remote memory over a cluster of engines.
 *
 * Conventions: every function returns 0 on success or a negative LT_ERR_*
 * code (LT_strerror describes it, LT_errname names it); out-parameters are
 * last and set only on success. All functions are thread-safe, with two
 * exceptions: LT_leave must not race other calls on the same engine, and a
 * request (lt_req_t) is waited on or tested by one thread at a time. Handles (lt_lmr_t, lt_req_t)
 * are opaque 64-bit values local to this process and unforgeable (a random tag or salt per engine):
 * a stale, forged or foreign handle gives -LT_ERR_BAD_HANDLE and touches no memory. No remote
 * address or key is ever visible here.
 *
 * Blocking calls wait at most engine.op_timeout_ms (config; default 10 s) and
 * then return -LT_ERR_TIMEDOUT; a waiting caller spins for engine.spin_us and
 * then sleeps, so waiting does not burn a core.
 */
#ifndef LTIER_LT_H_
#define LTIER_LT_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes; functions return their negation. */
enum {
  LT_OK = 0,
  LT_ERR_INVAL = 1,         /* invalid argument (caller bug) */
  LT_ERR_BAD_HANDLE = 2,    /* invalid, forged or stale handle */
  LT_ERR_OUT_OF_BOUNDS = 3, /* offset/length outside the LMR */
  LT_ERR_PERM = 4,          /* the handle lacks the right for this op */
  LT_ERR_PEER_DOWN = 5,     /* the node holding the memory is down or unreachable */
  LT_ERR_TIMEDOUT = 6,      /* the call's deadline passed */
  LT_ERR_AGAIN = 7,         /* out of request slots or back-pressure: retry */
  LT_ERR_QUOTA = 8,         /* the tenant's quota is exhausted: retry after completions */
  LT_ERR_UNSUPPORTED = 9,
  LT_ERR_MALFORMED = 10, /* malformed message or input */
  LT_ERR_NOT_FOUND = 11, /* no LMR published under that name */
  LT_ERR_EXISTS = 12,    /* name already published */
  LT_ERR_AUTH = 13,      /* ltier-manager refused the cluster secret */
  LT_ERR_NO_MEMORY = 14,
  LT_ERR_NOT_JOINED = 15,
  LT_ERR_ALIGN = 16,
  LT_ERR_NO_HANDLER = 17,
  LT_ERR_TRUNCATED = 18,
  LT_ERR_CLOSED = 19, /* the engine left the cluster while the op was in flight */
  LT_ERR_INTERNAL = 20,
  LT_ERR_SYS = 21 /* a system call failed (see the log) */
};

/* LMR rights. */
enum { LT_READ = 1, LT_WRITE = 2, LT_ATOMIC = 4, LT_RW = LT_READ | LT_WRITE };

typedef struct lt_engine lt_engine_t; /* one per process (or per tenant) */
typedef uint64_t lt_lmr_t;            /* a handle on a local or remote memory region */
typedef uint64_t lt_req_t;            /* an operation in flight */
/* The request of an operation complete at its call (an eager LT_send_async:
 * its buffer is free, and nothing is left to wait for). LT_wait, LT_test and
 * LT_cancel return 0 for it at once, any number of times. No operation in
 * flight ever has this value. */
#define LT_REQ_DONE ((lt_req_t)0)
typedef uint32_t lt_node_t; /* node id given by ltier-manager; never 0 */

/* Options for LT_join; NULL fields and a NULL pointer mean "config file or
 * default". Precedence: defaults < config file < LTIER_* environment < these. */
typedef struct lt_join_opts {
  const char* config_path; /* YAML file (else $LTIER_CONFIG, else none) */
  const char* manager;     /* host:port of ltier-manager */
  const char* secret;      /* cluster secret */
  const char* tenant;      /* tenant name (QoS) */
  const char* listen;      /* host:port this node's tcp transport binds */
} lt_join_opts_t;

/* Joins the cluster: binds the transport, joins through the membership
 * service (cluster.backend: ltier-manager, PMIx or etcd), starts the progress
 * thread. -LT_ERR_AUTH: wrong secret; -LT_ERR_PEER_DOWN: no manager (or etcd,
 * or PMIx server) there; -LT_ERR_INVAL: bad config (logged). */
int LT_join(const lt_join_opts_t* opts, lt_engine_t** out);
/* Leaves the cluster and frees the engine; ops in flight fail with
 * -LT_ERR_CLOSED; memory this node hosts for others is released. */
int LT_leave(lt_engine_t* e);

lt_node_t LT_node_id(const lt_engine_t* e);
/* The host:port this node's tcp transport listens on (NUL-terminated);
 * -LT_ERR_TRUNCATED when cap is too small. */
int LT_local_address(const lt_engine_t* e, char* buf, size_t cap);
/* Live nodes, this one included, ascending. *n is the total; at most cap ids
 * are written. */
int LT_nodes(lt_engine_t* e, lt_node_t* ids, size_t cap, size_t* n);

/* A node as the address book knows it. rank is the cluster.rank it joined with
 * (LTIER_RANK, which ltier-run sets), or LT_NO_RANK; name is its
 * cluster.node_name (LTIER_NODE_NAME; default host.pid), NUL-terminated. */
#define LT_NO_RANK UINT32_MAX
typedef struct lt_node_info {
  lt_node_t id;
  uint32_t rank;
  char name[257];
} lt_node_info_t;
/* -LT_ERR_NOT_FOUND when `node` is not a live node. */
int LT_node_info(lt_engine_t* e, lt_node_t node, lt_node_info_t* out);
/* The node called `name` (the highest id, if several live ones have it), or the node that
 * joined with rank `rank`. A node that has not joined yet is waited for up to
 * timeout_us (0: look once; negative: engine.op_timeout_ms), then
 * -LT_ERR_NOT_FOUND. */
int LT_node_by_name(lt_engine_t* e, const char* name, int64_t timeout_us, lt_node_t* node);
int LT_node_by_rank(lt_engine_t* e, uint32_t rank, int64_t timeout_us, lt_node_t* node);

/* Membership events, oldest first, from the moment of LT_join:
 *   LT_EV_UP            `node` joined;
 *   LT_EV_DOWN          `node` left or was declared down (its id is never reused);
 *   LT_EV_EXPELLED      this node (`node`, its old id) was declared down while it was
 *                       alive (stalled past the manager's down time), or a restarted
 *                       manager refused it back: every call now fails with
 *                       -LT_ERR_CLOSED; LT_leave and LT_join again to rejoin under a new id;
 *   LT_EV_MANAGER_LOST  the connection to ltier-manager broke: the engine reconnects on
 *                       its own; calls that need the manager (names, locks, barriers)
 *                       fail with -LT_ERR_PEER_DOWN meanwhile, the data path goes on;
 *   LT_EV_REJOINED      reconnected to the (restarted) manager under the same id.
 * Waits up to timeout_us (0: look once; negative: engine.op_timeout_ms) for
 * one: -LT_ERR_TIMEDOUT when none came. At most 1024 events wait; older ones
 * are dropped and `missed` says how many before this one. Still works after
 * LT_EV_EXPELLED. */
typedef enum lt_event_kind {
  LT_EV_UP = 0,
  LT_EV_DOWN = 1,
  LT_EV_EXPELLED = 2,
  LT_EV_MANAGER_LOST = 3,
  LT_EV_REJOINED = 4,
} lt_event_kind_t;
typedef struct lt_member_event {
  int kind; /* lt_event_kind_t */
  lt_node_t node;
  uint32_t missed;
} lt_member_event_t;
int LT_member_event(lt_engine_t* e, int64_t timeout_us, lt_member_event_t* ev);
/* "up", "down", "expelled", "manager_lost", "rejoined"; "?" otherwise. */
const char* LT_event_name(int kind);

/* Allocates size bytes (zeroed) on `node`; this process becomes the LMR's
 * master and gets a handle with `rights`. */
int LT_malloc(lt_engine_t* e, lt_node_t node, uint64_t size, uint32_t rights, lt_lmr_t* out);
/* Master only: frees the LMR; every handle on it becomes stale. */
int LT_free(lt_engine_t* e, lt_lmr_t lmr);
/* Master only: makes the LMR mappable by `name` with at most `max_rights`. */
int LT_publish(lt_engine_t* e, lt_lmr_t lmr, const char* name, uint32_t max_rights);
/* Asks the LMR's master for a handle with `rights`; -LT_ERR_NOT_FOUND,
 * -LT_ERR_PERM when rights exceed what was published. */
int LT_map(lt_engine_t* e, const char* name, uint32_t rights, lt_lmr_t* out);
/* Drops a mapped handle (not the master's: use LT_free). */
int LT_unmap(lt_engine_t* e, lt_lmr_t lmr);
int LT_lmr_size(lt_engine_t* e, lt_lmr_t lmr, uint64_t* size);

/* One-sided operations; blocking. buf must stay valid until they return. */
int LT_read(lt_engine_t* e, lt_lmr_t lmr, uint64_t offset, void* buf, uint64_t len);
int LT_write(lt_engine_t* e, lt_lmr_t lmr, uint64_t offset, const void* buf, uint64_t len);
int LT_memset(lt_engine_t* e, lt_lmr_t lmr, uint64_t offset, int value, uint64_t len);
/* Copies between LMRs, which may live on different nodes. */
int LT_memcpy(lt_engine_t* e, lt_lmr_t dst, uint64_t dst_offset, lt_lmr_t src, uint64_t src_offset,
              uint64_t len);

/* 64-bit atomics on an 8-byte aligned word of an LMR (offset % 8 == 0, else
 * -LT_ERR_ALIGN), for handles with LT_ATOMIC (else -LT_ERR_PERM). They are
 * atomic with respect to each other from every node and thread; a plain
 * LT_write of the same word is not ordered with them. *old receives the
 * word's prior value (for compare-swap: the swap happened iff *old == expected). */
int LT_fetch_add(lt_engine_t* e, lt_lmr_t lmr, uint64_t offset, uint64_t add, uint64_t* old);
int LT_compare_swap(lt_engine_t* e, lt_lmr_t lmr, uint64_t offset, uint64_t expected,
                    uint64_t desired, uint64_t* old);
/* Async: *old is written when the request completes successfully. */
int LT_fetch_add_async(lt_engine_t* e, lt_lmr_t lmr, uint64_t offset, uint64_t add, uint64_t* old,
                       lt_req_t* req);
int LT_compare_swap_async(lt_engine_t* e, lt_lmr_t lmr, uint64_t offset, uint64_t expected,
                          uint64_t desired, uint64_t* old, lt_req_t* req);

/* Messaging to (node, port). Messages up to tcp.eager_max_bytes go eagerly
 * (copied into the receiver's store if no receive is waiting); larger ones by
 * rendezvous (the receiver pulls them once a receive matches, straight from
 * the sender's buffer). Order is kept per (source, port). A sender may leave
 * engine.msg_credits messages unconsumed at one receiver (a quarter of them
 * for a message above 1 KiB): then LT_send waits and LT_send_async returns
 * -LT_ERR_AGAIN (nothing is sent or dropped).
 * While more than an eighth of them are unconsumed, a stream transport (tcp)
 * holds small messages back and sends them together, within a few
 * milliseconds even if the caller makes no further call.
 * LT_send returns when buf may be reused. -LT_ERR_INVAL above
 * tcp.max_msg_bytes. */
int LT_send(lt_engine_t* e, lt_node_t node, uint32_t port, const void* buf, size_t len);
/* buf must stay valid until the request completes (rendezvous). A message
 * sent eagerly (engine.eager_max and below) is complete at the call: *req is
 * then LT_REQ_DONE. */
int LT_send_async(lt_engine_t* e, lt_node_t node, uint32_t port, const void* buf, size_t len,
                  lt_req_t* req);
/* Receives the next message on `port` from any node, waiting up to
 * timeout_us (negative: engine.op_timeout_ms). *src and *len are set; a
 * message longer than cap gives -LT_ERR_TRUNCATED with *len the needed size
 * (the message is consumed). */
int LT_recv(lt_engine_t* e, uint32_t port, void* buf, size_t cap, lt_node_t* src, size_t* len,
            int64_t timeout_us);
/* An eager message already waiting on `port` that fits in cap is taken at
 * the call: *src and *len are set and *req is LT_REQ_DONE. */
int LT_recv_async(lt_engine_t* e, uint32_t port, void* buf, size_t cap, lt_node_t* src, size_t* len,
                  lt_req_t* req);

/* Which transport this node uses for `node` ("shm", "rc", "tcp", or "self") and
 * why, as NUL-terminated strings truncated to their buffers. Connects to the
 * peer first if it was not used yet. -LT_ERR_PEER_DOWN, -LT_ERR_INVAL. */
int LT_peer_transport(lt_engine_t* e, lt_node_t node, char* name, size_t name_cap, char* why,
                      size_t why_cap);

/* RPC (LITE's). A handler reads `in`, writes at most out_cap bytes to `out`,
 * sets *out_len and returns 0 or a negative LT_ERR_* code, which the caller
 * receives. Handlers run on the engine's progress thread: they must not
 * block. func_id: 0..65535. -LT_ERR_EXISTS if func_id already has one. */
typedef int (*lt_rpc_fn)(void* ctx, lt_node_t src, const void* in, size_t in_len, void* out,
                         size_t out_cap, size_t* out_len);
int LT_regRPC(lt_engine_t* e, uint32_t func_id, lt_rpc_fn fn, void* ctx);
/* Handler threads: with engine.rpc_workers = N > 0 (LTIER_RPC_WORKERS), the
 * handlers registered above run on a pool of N engine threads instead and
 * may block; replies still go back in any order. */

/* Server-loop RPC (LITE's recvRPC/replyRPC), for servers that answer in
 * their own threads. LT_regRPC_loop makes func_id's requests queue (FIFO
 * across clients) until a thread takes one with LT_recvRPC; the thread then
 * answers it once with LT_replyRPC. -LT_ERR_EXISTS if func_id is taken. */
typedef uint64_t lt_rpc_token_t; /* names one request awaiting its reply */
int LT_regRPC_loop(lt_engine_t* e, uint32_t func_id);
/* Waits up to timeout_us (negative: engine.op_timeout_ms) for a request to
 * func_id: copies it to buf, sets *src, *len and *token. A request longer
 * than cap gives -LT_ERR_TRUNCATED with *len the needed size; it stays
 * queued for the next LT_recvRPC (nothing is lost). -LT_ERR_TIMEDOUT,
 * -LT_ERR_INVAL if func_id was not registered with LT_regRPC_loop. */
int LT_recvRPC(lt_engine_t* e, uint32_t func_id, void* buf, size_t cap, lt_node_t* src, size_t* len,
               lt_rpc_token_t* token, int64_t timeout_us);
/* A request already queued that fits in cap is taken at the call: *req is
 * then LT_REQ_DONE. */
int LT_recvRPC_async(lt_engine_t* e, uint32_t func_id, void* buf, size_t cap, lt_node_t* src,
                     size_t* len, lt_rpc_token_t* token, lt_req_t* req);
/* Sends the reply for `token`: out[0, out_len) with status 0, or a negative
 * LT_ERR_* status the caller receives instead (no data). The token is then
 * spent: -LT_ERR_BAD_HANDLE for an unknown or spent token;
 * -LT_ERR_INVAL for a reply above tcp.max_msg_bytes (the token stays valid);
 * -LT_ERR_PEER_DOWN if the caller's node is gone. */
int LT_replyRPC(lt_engine_t* e, lt_rpc_token_t token, const void* out, size_t out_len, int status);
/* Calls func_id on `node` and waits (engine.op_timeout_ms). *out_len is the
 * reply's length; if it exceeds out_cap: -LT_ERR_TRUNCATED, with *out_len the
 * needed size and nothing copied. -LT_ERR_NO_HANDLER: nothing registered for
 * func_id there. -LT_ERR_PEER_DOWN, -LT_ERR_TIMEDOUT. Calls to one server are
 * bounded by engine.rpc_ring_slots credits (blocking calls wait for one). */
int LT_RPC(lt_engine_t* e, lt_node_t node, uint32_t func_id, const void* in, size_t in_len,
           void* out, size_t out_cap, size_t* out_len);
/* Async: many calls may be outstanding per thread; -LT_ERR_AGAIN when all
 * credits to that server are in use. For a per-call timeout, LT_wait with
 * that timeout and LT_cancel on -LT_ERR_TIMEDOUT. */
int LT_RPC_async(lt_engine_t* e, lt_node_t node, uint32_t func_id, const void* in, size_t in_len,
                 void* out, size_t out_cap, size_t* out_len, lt_req_t* req);
/* Abandons a request in flight: its buffers are free when this returns and a
 * late completion is dropped. Returns the request's status if it completed
 * meanwhile, else -LT_ERR_TIMEDOUT. */
int LT_cancel(lt_engine_t* e, lt_req_t req);

/* Named locks and barriers, served by ltier-manager.
 * LT_lock: the calling thread takes lock `name`, waiting up to timeout_us
 * (negative: engine.op_timeout_ms). Waiters are granted in arrival order
 * (FIFO, so starvation-free). Locks are per thread and not reentrant
 * (-LT_ERR_EXISTS if this thread already holds it). On -LT_ERR_TIMEDOUT the
 * wait is withdrawn. A node that leaves or dies releases its locks.
 * LT_unlock: -LT_ERR_PERM unless the calling thread holds the lock.
 * LT_barrier: returns once `count` callers (threads on any nodes) have
 * reached `name`; the name is then ready for the next generation. A
 * different count while a generation is open: -LT_ERR_INVAL.
 * Names: 1..128 bytes. -LT_ERR_PEER_DOWN when the manager is unreachable. */
int LT_lock(lt_engine_t* e, const char* name, int64_t timeout_us);
int LT_unlock(lt_engine_t* e, const char* name);
int LT_barrier(lt_engine_t* e, const char* name, uint32_t count, int64_t timeout_us);

/* Async forms: argument errors return at once; otherwise *req completes later
 * (LT_wait / LT_test). buf must stay valid until the request completes. */
int LT_read_async(lt_engine_t* e, lt_lmr_t lmr, uint64_t offset, void* buf, uint64_t len,
                  lt_req_t* req);
int LT_write_async(lt_engine_t* e, lt_lmr_t lmr, uint64_t offset, const void* buf, uint64_t len,
                   lt_req_t* req);
int LT_memset_async(lt_engine_t* e, lt_lmr_t lmr, uint64_t offset, int value, uint64_t len,
                    lt_req_t* req);
int LT_memcpy_async(lt_engine_t* e, lt_lmr_t dst, uint64_t dst_offset, lt_lmr_t src,
                    uint64_t src_offset, uint64_t len, lt_req_t* req);

/* Waits up to timeout_us (negative: the engine's default op timeout) and
 * returns the operation's status, freeing the request. -LT_ERR_TIMEDOUT
 * leaves the request in flight: wait again later. */
int LT_wait(lt_engine_t* e, lt_req_t req, int64_t timeout_us);
/* Non-blocking: *done = 0 while in flight (returns 0); else *done = 1 and
 * returns the operation's status, freeing the request. */
int LT_test(lt_engine_t* e, lt_req_t req, int* done);

/* Called by LT_config_keys once per configuration key. */
typedef void (*lt_config_key_fn)(void* ctx, const char* key, const char* env, const char* value,
                                 const char* help);
/* Loads the configuration as LT_join would (defaults, then config_path or
 * $LTIER_CONFIG when NULL, then LTIER_* variables) and reports every key with
 * its effective value. -LT_ERR_INVAL for a broken file or value (logged). */
int LT_config_keys(const char* config_path, lt_config_key_fn fn, void* ctx);

/* One port of an RDMA device, as libibverbs reports it. */
#define LT_MAX_GIDS 16
typedef struct {
  char device[64];     /* rxe0, mlx5_0 */
  uint32_t port;       /* 1-based */
  char state[16];      /* ACTIVE, DOWN, ... */
  char link_layer[16]; /* Ethernet (RoCE) or InfiniBand */
  uint32_t active_mtu; /* bytes */
  int32_t numa_node;   /* -1: unknown */
  uint32_t near;       /* 1: its CPUs include the caller's */
  uint32_t atomics;    /* 0: none; 1: atomic among the device's own (IBV_ATOMIC_HCA);
                          2: atomic with the CPU's too (IBV_ATOMIC_GLOB) */
  uint32_t max_qp, max_qp_wr, max_sge, max_cqe, max_mr, max_srq, max_qp_rd_atom;
  uint64_t max_mr_size;
  uint32_t num_gids; /* valid entries in gids (at most LT_MAX_GIDS) */
  struct {
    uint32_t index;
    char gid[48];  /* fe80::..., ::ffff:192.0.2.1 */
    char type[16]; /* RoCE v2, RoCE v1, IB */
  } gids[LT_MAX_GIDS];
  uint32_t chosen; /* 1: the port and GID (chosen_gid) a verbs transport would use */
  uint32_t chosen_gid;
} lt_device_port_t;
/* Lists the RDMA device ports (up to cap in out; *count gets how many there
 * are) and marks the one the configuration (config_path or $LTIER_CONFIG,
 * LTIER_VERBS_*) picks. When none is usable, why (if not NULL) gets the
 * reason, naming devices, ports, GIDs, MTU and the key to change.
 * -LT_ERR_UNSUPPORTED: built without libibverbs. */
int LT_devices(const char* config_path, lt_device_port_t* out, uint32_t cap, uint32_t* count,
               char* why, size_t why_cap);

/* What one transport of this node holds now. */
#define LT_MAX_TRANSPORTS 4
typedef struct lt_transport_stats {
  char name[8];               /* "shm", "rc", "tcp" */
  uint64_t connections;       /* live connections to peers */
  uint64_t queue_pairs;       /* rc: QPs in use, verbs.qps_per_peer + verbs.rdma_qps_per_peer
                                 per connected peer (shared by every thread), and any still
                                 closing */
  uint64_t spare_queue_pairs; /* rc: QPs made ahead of need, not connected yet */
  uint64_t registrations;     /* rc: memory registrations with the device (pools) */
  uint64_t retransmits;       /* ud: datagrams sent again (timeouts, reported holes) */
  uint64_t window_cuts;       /* ud: congestion window cuts, summed over peers (receivers'
                                 marks, losses and retransmission timeouts) */
  uint64_t qp_resets;         /* ud: times its QP was found in error and put back in service */
} lt_transport_stats_t;
typedef struct lt_stats {
  uint64_t served;       /* requests from peers this node's CPU served (messages, RPC,
                            reads and writes by message); peers' native one-sided ops
                            (over shm or rc) never count: no thread of this node runs */
  uint64_t malformed;    /* messages dropped as malformed */
  uint64_t late_replies; /* replies to requests cancelled or already answered */
  uint64_t ring_calls;   /* RPCs this node wrote into a server's ring (rc: one RDMA
                            WRITE_WITH_IMM each, LITE's path); others went as messages */
  uint64_t ring_replies; /* replies this node wrote into a caller's reply ring */
  uint64_t split_recvs;  /* rendezvous messages this node received split: it read the second
                            half from the sender's buffer while the sender placed the first
                            (shm, shm.split_min_bytes) */
  uint32_t num_transports;
  lt_transport_stats_t transports[LT_MAX_TRANSPORTS];
} lt_stats_t;
/* This node's counters and what its transports hold now. -LT_ERR_INVAL. */
int LT_stats(lt_engine_t* e, lt_stats_t* out);

typedef struct lt_peer_stats {
  lt_node_t node;
  char transport[8];         /* "shm", "rc", "ud", "tcp" */
  uint64_t tx_ops, tx_bytes; /* work requests this node posted to the peer: messages, RPC
                                calls and replies, one-sided ops, protocol messages; their
                                bytes, headers included */
  uint64_t rx_ops, rx_bytes; /* messages from the peer this node took in. Peers' native
                                one-sided ops on this node's memory (shm, rc) involve no
                                thread here and are not seen */
} lt_peer_stats_t;
/* Traffic with each live peer since this engine joined, per transport: up to
 * `cap` entries into out, by node, and the number there is into *n (above
 * cap: call again with room for *n). Counted per thread, with no locked
 * instruction; a read while traffic flows may miss the latest operations.
 * -LT_ERR_INVAL. */
int LT_peer_stats(lt_engine_t* e, lt_peer_stats_t* out, size_t cap, size_t* n);
/* "HOST:PORT" where this engine serves Prometheus metrics (metrics.listen,
 * with the port the system chose for :0). -LT_ERR_UNSUPPORTED when it serves
 * none; -LT_ERR_TRUNCATED when cap is too small. */
int LT_metrics_address(const lt_engine_t* e, char* buf, size_t cap);

/* ---- QoS (docs/API.md "QoS classes and tenants") ----
 * With qos.classes configured, every call belongs to a priority class: the
 * calling thread's (LT_set_class), else the process's (qos.class,
 * LTIER_QOS_CLASS), else its tenant's default class. Lower classes are
 * rate-limited while a higher class is active and its RTT is above target. */

/* The calling thread's calls on `e` go to class `name` from now on; NULL or
 * "" returns it to the process's class. When that class names cpus the
 * thread moves onto them (back to its own CPUs for a class without any);
 * when it names a cpu_policy the thread runs under it (its own policy back
 * for a class without one, where the kernel allows: see docs/CONFIG.md).
 * -LT_ERR_NOT_FOUND: no such class;
 * -LT_ERR_PERM: this tenant may not use it; -LT_ERR_UNSUPPORTED: no
 * qos.classes configured. */
int LT_set_class(lt_engine_t* e, const char* name);

typedef struct lt_class_stats {
  char name[64];
  uint32_t priority;   /* 0 is the highest */
  uint64_t ops, bytes; /* admitted so far, and their payload */
  uint64_t in_flight;  /* admitted, not yet completed */
  uint64_t waiting;    /* calls waiting for the class's tokens now */
  uint64_t delayed;    /* calls that had to wait for tokens, so far */
  uint64_t throttles;  /* times throttling of this class started */
  uint64_t rtt_p50_ns; /* of all completed operations of the class */
  uint64_t rtt_p99_ns;
  uint64_t target_rtt_ns;   /* configured or derived; 0 until measured */
  uint64_t rate;            /* bytes/s allowed now; UINT64_MAX when not throttled */
  uint32_t throttled_peers; /* peers it is throttled towards alone (rate: the least of them) */
} lt_class_stats_t;
/* The classes this engine's tenant may use, in priority order: up to `cap`
 * into out, their number into *n. -LT_ERR_UNSUPPORTED with no qos.classes
 * configured. */
int LT_class_stats(lt_engine_t* e, lt_class_stats_t* out, size_t cap, size_t* n);

/* "peer node is down or unreachable"; accepts either sign. */
const char* LT_strerror(int err);
/* "LT_ERR_PEER_DOWN" */
const char* LT_errname(int err);

#ifdef __cplusplus
}
#endif

#endif /* LTIER_LT_H_ */
