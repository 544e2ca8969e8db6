// Configuration: one struct per layer with in-class defaults, loaded from a
// YAML file and then overridden by LTIER_* environment variables. Read at init
// only. Every key is described by a ConfigKey (help text for
// `ltier-info --config`); the table is built per Config instance, so there is
// no static registry.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/qos_config.h"
#include "common/status.h"

namespace lt {

struct ClusterConfig {
  std::string backend = "manager";             // manager | pmix | etcd (proto::make_membership)
  std::string manager = "127.0.0.1:7700";      // host:port of ltier-manager
  std::string etcd = "http://127.0.0.1:2379";  // etcd endpoints, comma-separated
  std::string etcd_prefix = "/ltier/default";  // the cluster's keys in etcd
  uint32_t etcd_lease_ms = 3000;  // a silent node is seen down after this (at least 2000)
  std::string secret = "ltier-dev-secret";
  std::string node_name;            // default: hostname.pid
  std::string rank;                 // this process's rank in a launched job; empty: none
  uint32_t join_timeout_ms = 5000;  // LT_join gives up after this
};

struct TcpConfig {
  std::string listen = "127.0.0.1:0";  // address:port the node's tcp transport binds
  std::string advertise;               // address peers dial; default: the bound address
  uint32_t connect_timeout_ms = 2000;
  // Messages above this go by rendezvous. 64 KiB less room for the frame's
  // headers: an eager frame then fits in one TCP segment of the largest size
  // (64 KiB, TSO and GSO). A frame one byte longer costs a second, tiny
  // segment per message, and on loopback a stream of them moves a third of
  // the bytes (raw sockets alike: 65483-byte sends 2.7-3.5 GB/s, 65484-byte
  // ones 1.0-1.1).
  uint32_t eager_max_bytes = (64u << 10) - 256;
  uint32_t max_msg_bytes = 64u << 20;  // frames larger than this are malformed
  uint32_t sndbuf_bytes = 4u << 20;    // SO_SNDBUF/SO_RCVBUF; 0 keeps the kernel default
  uint32_t rcvbuf_bytes = 4u << 20;
  uint32_t max_queued_bytes = 256u << 20;  // per-connection send backlog before back-pressure
};

struct ShmConfig {
  uint32_t ring_bytes = 4u << 20;          // each direction's ring per connection; a power of two
  uint32_t ring_budget_bytes = 16u << 20;  // rings in use across a process's connections
  uint32_t max_msg_bytes = 64u << 20;      // largest message; above a quarter ring it is fragmented
  // Messages above this go by rendezvous: one copy by the kernel, where an
  // eager message is copied into the ring and out again (and into the store
  // of unexpected messages when its receive lags). Streaming 32 and 64 KiB
  // messages moves about twice the bytes by rendezvous; a ping-pong of them
  // takes 10-20% longer. 16 KiB is where the two meet.
  uint32_t eager_max_bytes = 16u << 10;
  uint32_t stage_bytes = 64u << 20;  // rendezvous staging memory per engine; 0: pull by message
  uint32_t cma = 1;  // 1: single-copy rendezvous with process_vm_writev where allowed
  // Rendezvous messages below this are staged even where placement works:
  // process_vm_writev pins the receiver's pages on every call, and on a
  // Zen 5 VM the stage's second copy cost less up to 512 KiB with one CPU
  // placing (streaming 64 KiB moved 3.9x the bytes). With both CPUs copying
  // (split_min_bytes) an Intel Xeon VM placed 128-512 KiB messages in half
  // the time the stage took, so placement starts at 256 KiB. Larger
  // messages, and those that find the stage full, are placed. 0: place
  // every rendezvous message.
  uint32_t cma_min_bytes = 256u << 10;
  // Placed messages of at least this size are split: the receiver reads the
  // second half from the sender's buffer while the sender writes the first,
  // so both CPUs copy. 0: the sender writes it all.
  uint32_t split_min_bytes = 256u << 10;
};

struct VerbsConfig {
  std::string device;              // empty: the nearest device with an ACTIVE port
  uint32_t port = 0;               // 0: its first ACTIVE port
  std::string gid_index = "auto";  // auto: RoCE v2 over IPv4 first
  std::string listen;              // control channel host:port; empty: the GID's IPv4, any port
  uint32_t qps_per_peer = 2;       // RC QPs to each peer for messages, shared by all threads
  uint32_t rdma_qps_per_peer = 1;  // RC QPs to each peer for one-sided ops; 0: the message QPs
  uint32_t rc_qp_budget = 0;       // RC QPs in connections at most; 0: no limit
  uint32_t send_depth = 128;       // work requests outstanding per QP
  uint32_t send_ring_bytes = 256u << 10;   // per QP: messages copied here until sent
  uint32_t recv_buffers = 256;             // receive buffers in the shared receive queue
  uint32_t recv_buffer_bytes = 16u << 10;  // larger messages travel in fragments
  uint32_t max_msg_bytes = 64u << 20;      // largest message a post accepts
  uint32_t eager_max_bytes = 16u << 10;    // messages above this go by rendezvous
  uint32_t pool_bytes = 64u << 20;         // LMR memory is carved from pools of this size
  uint32_t bounce_bytes = 256u << 10;      // per QP: staging for unregistered local buffers
  uint32_t spin_us = 20;                   // a one-sided op polls this long at least, then sleeps
  uint32_t connect_timeout_ms = 2000;
  std::string atomic_mode = "auto";  // auto: rc peers' atomics native; cpu: by request
  uint32_t ud_window = 128;          // ud: datagrams in flight per peer (a power of two)
  uint32_t ud_congestion = 1;     // ud: a congestion window below ud_window moved by 1: receivers'
                                  // marks, losses and timeouts; 2: marks only; 0: fixed
  uint32_t ud_send_slots = 4096;  // ud: registered send buffers of one MTU, all peers
  uint32_t ud_recv_buffers = 1024;     // ud: receive buffers of one MTU
  uint32_t ud_peer_timeout_ms = 5000;  // ud: a peer silent this long while data waits is lost
  uint32_t ud_loss_percent = 0;        // ud, tests only: datagrams dropped on receipt
  uint32_t rc_fault_after = 0;  // rc, tests only: the QP of the Nth post goes to error (once)
  uint32_t ud_fault_after = 0;  // ud, tests only: the QP goes to error at the Nth post (once)
  uint32_t ud_fault_stuck = 0;  // ud, tests only: posts held by the device then never completed
};

struct EngineConfig {
  uint32_t spin_us = 50;                // a waiter spins this long before it blocks
  uint32_t progress_spin_us = 30;       // after serving a peer, the progress thread polls this long
  uint32_t move_spinners = 1;           // a waiter may move off a CPU it shares with its peer
  uint32_t op_timeout_ms = 10000;       // default timeout of blocking calls
  uint32_t max_outstanding = 4096;      // request slots per engine
  uint64_t max_lmr_bytes = 1ull << 34;  // largest single LT_malloc served by this node
  uint32_t rpc_ring_slots = 1024;       // RPC calls a client may have outstanding at one server
  uint32_t msg_credits = 256;           // messages a sender may leave unconsumed at one receiver
  uint32_t rpc_workers = 0;             // handler threads; 0 runs handlers on the progress thread
};

struct QosConfig {
  std::string tenant = "default";
  std::string default_class;            // this process's class; empty: the tenant's default
  std::string board = "auto";           // the host's QoS board: auto, none, or a shm name
  uint32_t max_outstanding_ops = 4096;  // per-tenant quota on in-flight operations
  QosPolicy policy;                     // qos.classes and qos.tenants (common/qos_config.h)
};

struct MetricsConfig {
  std::string listen;  // HOST:PORT for Prometheus scrapes; empty: none
};

struct Config {
  ClusterConfig cluster;
  TcpConfig tcp;
  ShmConfig shm;
  VerbsConfig verbs;
  EngineConfig engine;
  QosConfig qos;
  MetricsConfig metrics;
  // Allowed transports (LTIER_TRANSPORTS, like UCX_TLS): shm for peers on this
  // host (same boot id and network namespace), rc where both ends have an
  // RDMA device, tcp for the others. One this node cannot open steps aside.
  std::string transports = "shm,rc,ud,tcp";
};

enum class KeyType : uint8_t { kString, kU32, kU64 };

struct ConfigKey {
  const char* path;  // YAML path, "tcp.listen"
  const char* env;   // LTIER_TCP_LISTEN
  const char* help;
  KeyType type;
  void* field;
};

/// The keys of `c`, bound to its fields.
std::vector<ConfigKey> config_keys(Config& c);
std::string config_value(const ConfigKey& k);

/// Loads `yaml_path` (skipped when empty) over the defaults, then applies the
/// LTIER_* environment. Unknown keys, wrong types and YAML syntax errors give
/// kInvalidArg with `*error` naming the key or the line.
Status load_config(const std::string& yaml_path, Config* out, std::string* error);
/// The same from YAML text (tests, fuzzing).
Status load_config_text(const std::string& yaml_text, Config* out, std::string* error);
/// Applies LTIER_* variables only.
Status apply_env(Config* c, std::string* error);

/// "host:port" -> parts; the port must be 0..65535.
Status parse_host_port(const std::string& s, std::string* host, uint16_t* port);

}  // namespace lt
