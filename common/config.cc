#include "common/config.h"

#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string_view>

#include "common/qos_yaml.h"

namespace lt {

std::vector<ConfigKey> config_keys(Config& c) {
  using K = KeyType;
  return {
      {"transports", "LTIER_TRANSPORTS",
       "allowed transports, comma-separated: shm (peers on this host), rc (RDMA RC QPs), ud "
       "(RDMA UD, where rc cannot serve a peer), tcp (all others)",
       K::kString, &c.transports},
      {"cluster.backend", "LTIER_CLUSTER_BACKEND",
       "how nodes find each other: manager (ltier-manager at cluster.manager), pmix (the "
       "processes of an mpirun/srun job) or etcd (an etcd cluster at cluster.etcd)",
       K::kString, &c.cluster.backend},
      {"cluster.manager", "LTIER_MANAGER", "host:port of ltier-manager", K::kString,
       &c.cluster.manager},
      {"cluster.etcd", "LTIER_ETCD",
       "etcd client endpoints, comma-separated (http://host:2379); the first that answers serves",
       K::kString, &c.cluster.etcd},
      {"cluster.etcd_prefix", "LTIER_ETCD_PREFIX",
       "where the cluster keeps its keys in etcd; clusters sharing an etcd differ in it",
       K::kString, &c.cluster.etcd_prefix},
      {"cluster.etcd_lease_ms", "LTIER_ETCD_LEASE_MS",
       "etcd: a node silent this long (a lease time, whole seconds, at least 2000) is down",
       K::kU32, &c.cluster.etcd_lease_ms},
      {"cluster.secret", "LTIER_SECRET", "cluster secret; the manager refuses other values",
       K::kString, &c.cluster.secret},
      {"cluster.node_name", "LTIER_NODE_NAME", "name shown in the address book (default host.pid)",
       K::kString, &c.cluster.node_name},
      {"cluster.rank", "LTIER_RANK",
       "this process's rank in a job (ltier-run sets it); LT_node_by_rank finds it; empty: none",
       K::kString, &c.cluster.rank},
      {"cluster.join_timeout_ms", "LTIER_JOIN_TIMEOUT_MS", "LT_join gives up after this", K::kU32,
       &c.cluster.join_timeout_ms},
      {"tcp.listen", "LTIER_TCP_LISTEN", "address:port the tcp transport binds (port 0: any)",
       K::kString, &c.tcp.listen},
      {"tcp.advertise", "LTIER_TCP_ADVERTISE", "address peers dial (default: bound address)",
       K::kString, &c.tcp.advertise},
      {"tcp.connect_timeout_ms", "LTIER_TCP_CONNECT_TIMEOUT_MS", "tcp connect timeout", K::kU32,
       &c.tcp.connect_timeout_ms},
      {"tcp.eager_max_bytes", "LTIER_TCP_EAGER_MAX_BYTES",
       "LT_send: messages up to this size go eagerly, larger ones by rendezvous", K::kU32,
       &c.tcp.eager_max_bytes},
      {"tcp.max_msg_bytes", "LTIER_TCP_MAX_MSG_BYTES",
       "largest frame accepted; larger is malformed", K::kU32, &c.tcp.max_msg_bytes},
      {"tcp.sndbuf_bytes", "LTIER_TCP_SNDBUF_BYTES", "SO_SNDBUF (0: kernel default)", K::kU32,
       &c.tcp.sndbuf_bytes},
      {"tcp.rcvbuf_bytes", "LTIER_TCP_RCVBUF_BYTES", "SO_RCVBUF (0: kernel default)", K::kU32,
       &c.tcp.rcvbuf_bytes},
      {"tcp.max_queued_bytes", "LTIER_TCP_MAX_QUEUED_BYTES",
       "per-connection send backlog before posts get back-pressure", K::kU32,
       &c.tcp.max_queued_bytes},
      {"verbs.device", "LTIER_VERBS_DEVICE",
       "RDMA device (ltier-info --devices lists them); empty: the nearest with an ACTIVE port",
       K::kString, &c.verbs.device},
      {"verbs.port", "LTIER_VERBS_PORT", "device port; 0: its first ACTIVE port", K::kU32,
       &c.verbs.port},
      {"verbs.gid_index", "LTIER_VERBS_GID_INDEX",
       "GID table index; auto: a RoCE v2 GID of an IPv4 address, else any RoCE v2 GID", K::kString,
       &c.verbs.gid_index},
      {"verbs.listen", "LTIER_VERBS_LISTEN",
       "rc: host:port of the control channel that exchanges QP addresses; empty: the chosen "
       "GID's IPv4 address, any port",
       K::kString, &c.verbs.listen},
      {"verbs.qps_per_peer", "LTIER_VERBS_QPS_PER_PEER",
       "rc: QPs to each peer, shared by every thread (a thread keeps to one)", K::kU32,
       &c.verbs.qps_per_peer},
      {"verbs.rdma_qps_per_peer", "LTIER_VERBS_RDMA_QPS_PER_PEER",
       "rc: more QPs to each peer that carry only one-sided ops, so none waits behind a message "
       "the peer has no receive buffer for yet (0: one-sided ops share the message QPs)",
       K::kU32, &c.verbs.rdma_qps_per_peer},
      {"verbs.rc_qp_budget", "LTIER_VERBS_RC_QP_BUDGET",
       "rc: QPs this node holds in connections at most; a peer that would take more is reached "
       "over the next transport (0: no limit)",
       K::kU32, &c.verbs.rc_qp_budget},
      {"verbs.send_depth", "LTIER_VERBS_SEND_DEPTH", "rc: work requests outstanding per QP",
       K::kU32, &c.verbs.send_depth},
      {"verbs.send_ring_bytes", "LTIER_VERBS_SEND_RING_BYTES",
       "rc: per QP, registered memory that messages are copied into until the device sent them",
       K::kU32, &c.verbs.send_ring_bytes},
      {"verbs.recv_buffers", "LTIER_VERBS_RECV_BUFFERS",
       "rc: receive buffers in the receive queue shared by all peers", K::kU32,
       &c.verbs.recv_buffers},
      {"verbs.recv_buffer_bytes", "LTIER_VERBS_RECV_BUFFER_BYTES",
       "rc: size of each receive buffer; larger messages travel in fragments", K::kU32,
       &c.verbs.recv_buffer_bytes},
      {"verbs.max_msg_bytes", "LTIER_VERBS_MAX_MSG_BYTES", "rc: largest message a post accepts",
       K::kU32, &c.verbs.max_msg_bytes},
      {"verbs.eager_max_bytes", "LTIER_VERBS_EAGER_MAX_BYTES",
       "LT_send over rc: messages up to this size go eagerly, larger ones by rendezvous", K::kU32,
       &c.verbs.eager_max_bytes},
      {"verbs.pool_bytes", "LTIER_VERBS_POOL_BYTES",
       "rc: LMR memory comes from registered pools of this size (at most 128 MiB; larger LMRs "
       "get a registration of their own)",
       K::kU32, &c.verbs.pool_bytes},
      {"verbs.bounce_bytes", "LTIER_VERBS_BOUNCE_BYTES",
       "rc: per QP, registered staging for one-sided ops on unregistered local buffers", K::kU32,
       &c.verbs.bounce_bytes},
      {"verbs.spin_us", "LTIER_VERBS_SPIN_US",
       "rc: a one-sided op's caller polls for its completion at least this long before it "
       "sleeps",
       K::kU32, &c.verbs.spin_us},
      {"verbs.connect_timeout_ms", "LTIER_VERBS_CONNECT_TIMEOUT_MS",
       "rc: the QP address exchange with a new peer gives up after this", K::kU32,
       &c.verbs.connect_timeout_ms},
      {"verbs.atomic_mode", "LTIER_VERBS_ATOMIC_MODE",
       "rc: auto: peers' atomics on this node's LMRs are the device's, and where the device's "
       "are not atomic with the CPU's (IBV_ATOMIC_HCA) this node's own go through the device "
       "too; cpu: all are CPU atomics, rc peers' by request",
       K::kString, &c.verbs.atomic_mode},
      {"verbs.ud_window", "LTIER_VERBS_UD_WINDOW",
       "ud: datagrams in flight to one peer before its acknowledgements (a power of two, 8 to "
       "1024)",
       K::kU32, &c.verbs.ud_window},
      {"verbs.ud_congestion", "LTIER_VERBS_UD_CONGESTION",
       "ud: 1: datagrams in flight to a peer follow a congestion window (halved on loss, "
       "grown on acknowledgements, at most verbs.ud_window); 0: always verbs.ud_window",
       K::kU32, &c.verbs.ud_congestion},
      {"verbs.ud_send_slots", "LTIER_VERBS_UD_SEND_SLOTS",
       "ud: registered send buffers of one MTU, shared by all peers; a datagram keeps its "
       "buffer until acknowledged",
       K::kU32, &c.verbs.ud_send_slots},
      {"verbs.ud_recv_buffers", "LTIER_VERBS_UD_RECV_BUFFERS",
       "ud: receive buffers of one MTU in the shared receive queue", K::kU32,
       &c.verbs.ud_recv_buffers},
      {"verbs.ud_peer_timeout_ms", "LTIER_VERBS_UD_PEER_TIMEOUT_MS",
       "ud: a peer that acknowledges nothing this long while datagrams wait is lost", K::kU32,
       &c.verbs.ud_peer_timeout_ms},
      {"verbs.ud_loss_percent", "LTIER_VERBS_UD_LOSS_PERCENT",
       "ud, for tests: this percentage of received datagrams is dropped on purpose (0 to 50)",
       K::kU32, &c.verbs.ud_loss_percent},
      {"verbs.rc_fault_after", "LTIER_VERBS_RC_FAULT_AFTER",
       "rc, for tests: the queue pair that carries the Nth work request posted is moved to the "
       "error state, once (0: never), as a retry or access error would",
       K::kU32, &c.verbs.rc_fault_after},
      {"verbs.ud_fault_after", "LTIER_VERBS_UD_FAULT_AFTER",
       "ud, for tests: the UD queue pair is moved to the error state at the Nth post, once (0: "
       "never), as a local error would; ud resets it and sends its datagrams again",
       K::kU32, &c.verbs.ud_fault_after},
      {"verbs.ud_fault_stuck", "LTIER_VERBS_UD_FAULT_STUCK",
       "ud, for tests, with verbs.ud_fault_after: this many sends the device holds when the QP "
       "goes to error are never completed, flushed or not (as Soft-RoCE on Linux 6.1 can do); "
       "ud resets the QP a second later regardless and takes their slots back",
       K::kU32, &c.verbs.ud_fault_stuck},
      {"shm.ring_bytes", "LTIER_SHM_RING_BYTES",
       "shm: bytes of each direction's message ring per connection (a power of two, >= 4096); "
       "both rings live in one memfd segment",
       K::kU32, &c.shm.ring_bytes},
      {"shm.ring_budget_bytes", "LTIER_SHM_RING_BUDGET_BYTES",
       "shm: ring bytes small messages cycle through, shared among a process's connections: "
       "each uses a window at the start of its ring, this divided by the number of "
       "connections (a power of two, at least 16 KiB, at most shm.ring_bytes); a larger "
       "message widens it for a while. 0: every connection uses its whole ring",
       K::kU32, &c.shm.ring_budget_bytes},
      {"shm.max_msg_bytes", "LTIER_SHM_MAX_MSG_BYTES",
       "shm: largest message a post accepts; messages above a quarter of the ring travel in "
       "fragments and are reassembled by the receiver",
       K::kU32, &c.shm.max_msg_bytes},
      {"shm.eager_max_bytes", "LTIER_SHM_EAGER_MAX_BYTES",
       "LT_send over shm: messages up to this size go eagerly, larger ones by rendezvous", K::kU32,
       &c.shm.eager_max_bytes},
      {"shm.stage_bytes", "LTIER_SHM_STAGE_BYTES",
       "LT_send over shm: memory per engine where a rendezvous message is staged (the sender "
       "copies it there and completes; the receiver reads it straight into its buffer); "
       "0, a full stage or a larger message: the receiver pulls it by message",
       K::kU32, &c.shm.stage_bytes},
      {"shm.cma", "LTIER_SHM_CMA",
       "LT_send over shm: 1 places rendezvous messages straight into the receiver's buffer "
       "(process_vm_writev, one copy) where the kernel allows it; 0, or where it does not: the "
       "stage (shm.stage_bytes), then the pull",
       K::kU32, &c.shm.cma},
      {"shm.cma_min_bytes", "LTIER_SHM_CMA_MIN_BYTES",
       "LT_send over shm: with shm.cma, rendezvous messages of at least this size are placed; "
       "smaller ones are staged while the stage has room (two copies, no system call: the "
       "kernel pins the receiver's pages for every placement); 0: place them all",
       K::kU32, &c.shm.cma_min_bytes},
      {"shm.split_min_bytes", "LTIER_SHM_SPLIT_MIN_BYTES",
       "LT_send over shm: placed messages of at least this size are split, the receiver "
       "reading the second half from the sender's buffer while the sender writes the first "
       "(both CPUs copy); 0: the sender writes it all",
       K::kU32, &c.shm.split_min_bytes},
      {"engine.spin_us", "LTIER_SPIN_US",
       "a waiting caller spins at least this long (longer, up to 500 us, where waits here "
       "usually last longer), then blocks",
       K::kU32, &c.engine.spin_us},
      {"engine.progress_spin_us", "LTIER_PROGRESS_SPIN_US",
       "after serving a peer, the progress thread keeps polling at least this long (up to "
       "twice the usual gap between requests, at most 500 us) before it sleeps",
       K::kU32, &c.engine.progress_spin_us},
      {"engine.move_spinners", "LTIER_MOVE_SPINNERS",
       "1: a waiting caller that keeps handing its CPU to a same-host peer running there moves "
       "itself to another CPU of its affinity mask (the mask is kept); 0: it never moves",
       K::kU32, &c.engine.move_spinners},
      {"engine.op_timeout_ms", "LTIER_OP_TIMEOUT_MS", "default timeout of blocking calls", K::kU32,
       &c.engine.op_timeout_ms},
      {"engine.max_outstanding", "LTIER_MAX_OUTSTANDING", "request slots per engine", K::kU32,
       &c.engine.max_outstanding},
      {"engine.max_lmr_bytes", "LTIER_MAX_LMR_BYTES", "largest LT_malloc this node serves", K::kU64,
       &c.engine.max_lmr_bytes},
      {"engine.rpc_ring_slots", "LTIER_RPC_RING_SLOTS",
       "RPC credits: calls one client may have outstanding at one server (at least 1)", K::kU32,
       &c.engine.rpc_ring_slots},
      {"engine.msg_credits", "LTIER_MSG_CREDITS",
       "LT_send: messages a sender may have unconsumed at one receiver, a quarter of them for "
       "messages above 1 KiB (bounds its store; at least 1)",
       K::kU32, &c.engine.msg_credits},
      {"engine.rpc_workers", "LTIER_RPC_WORKERS",
       "threads that run RPC handlers; 0 runs them on the progress thread (handlers must then "
       "not block)",
       K::kU32, &c.engine.rpc_workers},
      {"qos.tenant", "LTIER_TENANT", "tenant this process joins as", K::kString, &c.qos.tenant},
      {"qos.class", "LTIER_QOS_CLASS",
       "class of this process's calls (one its tenant may use); empty: the tenant's default",
       K::kString, &c.qos.default_class},
      {"metrics.listen", "LTIER_METRICS_LISTEN",
       "HOST:PORT where this engine serves its metrics to Prometheus (GET /metrics); empty: "
       "none",
       K::kString, &c.metrics.listen},
      {"qos.board", "LTIER_QOS_BOARD",
       "shared memory the engines of this host exchange QoS state through: auto "
       "(ltier-qos-UID), none (this engine alone), or a name",
       K::kString, &c.qos.board},
      {"qos.max_outstanding_ops", "LTIER_MAX_OUTSTANDING_OPS",
       "tenant quota on operations in flight (LT_ERR_QUOTA above it)", K::kU32,
       &c.qos.max_outstanding_ops},
  };
}

std::string config_value(const ConfigKey& k) {
  switch (k.type) {
    case KeyType::kString:
      return *static_cast<std::string*>(k.field);
    case KeyType::kU32:
      return std::to_string(*static_cast<uint32_t*>(k.field));
    case KeyType::kU64:
      return std::to_string(*static_cast<uint64_t*>(k.field));
  }
  return {};
}

namespace {

Status set_value(const ConfigKey& k, const std::string& v, std::string* error) {
  if (k.type == KeyType::kString) {
    *static_cast<std::string*>(k.field) = v;
    return Status::ok();
  }
  // Decimal digits only: no sign, no spaces, no octal or hex surprises.
  bool bad = v.empty() || v.size() > 20 || v.find_first_not_of("0123456789") != std::string::npos;
  errno = 0;
  unsigned long long n = bad ? 0 : std::strtoull(v.c_str(), nullptr, 10);
  if (errno != 0 || (k.type == KeyType::kU32 && n > UINT32_MAX)) bad = true;
  if (bad) {
    if (error) *error = std::string(k.path) + ": expected an unsigned integer, got '" + v + "'";
    return Code::kInvalidArg;
  }
  if (k.type == KeyType::kU32) {
    *static_cast<uint32_t*>(k.field) = static_cast<uint32_t>(n);
  } else {
    *static_cast<uint64_t*>(k.field) = n;
  }
  return Status::ok();
}

// True when some key lives under `path` ("tcp" for "tcp.listen").
bool is_section(const std::string& path, const std::vector<ConfigKey>& keys) {
  for (const auto& k : keys) {
    if (std::string_view(k.path).starts_with(path) && k.path[path.size()] == '.') return true;
  }
  return false;
}

Status walk(const YAML::Node& node, const std::string& prefix, std::vector<ConfigKey>& keys,
            QosPolicy* qos, std::string* error) {
  if (!node.IsMap()) {
    if (error) *error = (prefix.empty() ? std::string("top level") : prefix) + ": expected a map";
    return Code::kInvalidArg;
  }
  for (const auto& kv : node) {
    std::string name = kv.first.as<std::string>();
    std::string path = prefix.empty() ? name : prefix + "." + name;
    if (is_qos_list(path)) {
      LT_RETURN_IF_ERROR(parse_qos_list(kv.second, path, qos, error));
      continue;
    }
    if (kv.second.IsMap()) {
      // Only into sections that exist: an alias may make a map contain
      // itself (tcp: &t {x: *t}), and a chain of aliases can make the tree
      // exponentially large, so walking unknown maps could recurse forever.
      if (!is_section(path, keys)) {
        if (error) *error = "unknown config section '" + path + "' (see ltier-info --config)";
        return Code::kInvalidArg;
      }
      LT_RETURN_IF_ERROR(walk(kv.second, path, keys, qos, error));
      continue;
    }
    const ConfigKey* key = nullptr;
    for (const auto& k : keys) {
      if (path == k.path) key = &k;
    }
    if (key == nullptr) {
      if (error) *error = "unknown config key '" + path + "' (see ltier-info --config)";
      return Code::kInvalidArg;
    }
    if (!kv.second.IsScalar()) {
      if (error) *error = path + ": expected a scalar";
      return Code::kInvalidArg;
    }
    LT_RETURN_IF_ERROR(set_value(*key, kv.second.Scalar(), error));
  }
  return Status::ok();
}

}  // namespace

Status load_config_text(const std::string& text, Config* out, std::string* error) {
  Config c = *out;
  auto keys = config_keys(c);
  try {
    YAML::Node root = YAML::Load(text);
    if (root.IsDefined() && !root.IsNull()) {
      LT_RETURN_IF_ERROR(walk(root, "", keys, &c.qos.policy, error));
    }
  } catch (const YAML::Exception& e) {
    if (error) *error = std::string("YAML: ") + e.what();
    return Code::kInvalidArg;
  }
  LT_RETURN_IF_ERROR(validate_qos_policy(c.qos.policy, error));
  *out = std::move(c);
  return Status::ok();
}

Status apply_env(Config* out, std::string* error) {
  Config c = *out;
  for (const auto& k : config_keys(c)) {
    const char* v = std::getenv(k.env);
    if (v != nullptr) {
      Status s = set_value(k, v, error);
      if (!s.is_ok()) {
        if (error) *error = std::string(k.env) + ": " + *error;
        return s;
      }
    }
  }
  *out = std::move(c);
  return Status::ok();
}

Status load_config(const std::string& yaml_path, Config* out, std::string* error) {
  Config c = *out;
  if (!yaml_path.empty()) {
    std::ifstream f(yaml_path);
    if (!f) {
      if (error) *error = "cannot open config file '" + yaml_path + "'";
      return Code::kInvalidArg;
    }
    std::stringstream ss;
    ss << f.rdbuf();
    Status s = load_config_text(ss.str(), &c, error);
    if (!s.is_ok()) {
      if (error) *error = yaml_path + ": " + *error;
      return s;
    }
  }
  LT_RETURN_IF_ERROR(apply_env(&c, error));
  *out = std::move(c);
  return Status::ok();
}

Status parse_host_port(const std::string& s, std::string* host, uint16_t* port) {
  auto colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == s.size()) return Code::kInvalidArg;
  std::string p = s.substr(colon + 1);
  if (p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos) {
    return Code::kInvalidArg;
  }
  unsigned long n = std::strtoul(p.c_str(), nullptr, 10);
  if (n > 65535) return Code::kInvalidArg;
  *host = s.substr(0, colon);
  *port = static_cast<uint16_t>(n);
  return Status::ok();
}

}  // namespace lt
