// rc transport: RDMA reliable connected QPs over libibverbs (ARCHITECTURE
// §6d). One device, port and GID (device.h choose()), one protection domain,
// one completion channel; K QPs per peer shared by every thread (a thread
// keeps to one, so its posts stay in order); one send CQ shared by all
// QPs, polled by the poller and by any thread waiting for a one-sided op;
// one shared receive queue of recv_buffers buffers and its CQ, polled by the
// poller only.
//
// Messages are SENDs into the shared receive queue (channel.h frames and
// fragments them); kRecv rx points into the receive buffer (or, for a
// fragmented message, its reassembly) until release_rx. One-sided ops are
// RDMA READ/WRITE/WRITE_WITH_IMM/atomics done when post returns, on LMR
// memory from registered pools (mem_pool.h). Peers are reached through the
// address "host:port" of the control listener that exchanges QP addresses
// (verbs_conn.h).
//
// A control thread, asleep in epoll but for connection set-up, answers
// peers' QP exchanges and watches every control socket: a peer's exchange
// never waits for this engine's poller, and EOF on a socket marks its
// connection broken for the poller to close (kPeerLost).
//
// Wake-ups: wait_fd() is an epoll set of the completion channel and an
// "awake" eventfd kept readable while the CQs are not armed. Only
// prepare_sleep() arms, when the poller is about to block: the receive CQ,
// and the send CQ only while messages are in flight (a one-sided op's
// completion is its caller's to poll, and would only wake the poller for
// nothing); it polls once more, and only then lets the awake fd go quiet.
// Callers spinning on their requests poll with the CQs unarmed, as
// perftest does.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/config.h"
#include "common/net.h"
#include "common/spin_gauge.h"
#include "common/spinlock.h"
#include "transport/conn_table.h"
#include "transport/hello.h"
#include "transport/transport.h"
#include "transport/verbs/done_queue.h"
#include "transport/verbs/mem_pool.h"
#include "transport/verbs/onesided_cq.h"
#include "transport/verbs/verbs_conn.h"
#include "transport/verbs/verbs_device.h"

struct ibv_wc;

namespace lt::transport::verbs {

inline constexpr std::string_view kHelloLabel = "ltier rc hello v1";

class VerbsTransport final : public Transport {
 public:
  explicit VerbsTransport(const Config& config);
  ~VerbsTransport() override;
  /// Picks and opens the device (its context and PD taken from `share`
  /// when another transport of the engine opened it first), makes the
  /// receive path and binds the control listener. kNotFound (no usable
  /// device; the log says why), kInvalidArg (a bad key), kNoMemory, kSys.
  Status init(TransportShare* share = nullptr);

  const char* name() const override { return "rc"; }
  const Caps& caps() const override { return caps_; }
  std::string local_address() const override { return address_; }
  void set_identity(NodeId self, uint64_t cluster_token, const Mac& hello_key) override;
  Result<std::unique_ptr<Endpoint>> connect(const PeerInfo& peer, Deadline d) override;
  Result<MemRegion> register_memory(std::span<std::byte> mem, Access a) override;
  void deregister_memory(const MemRegion& r) override;
  Result<MemRegion> alloc_memory(size_t len, Access a) override;
  void free_memory(const MemRegion& r) override;
  Result<MemRegion> export_memory(std::span<std::byte> mem, Access a) override;
  void unexport_memory(const MemRegion& r) override;
  Status local_atomic(const WorkRequest& wr) override;  // loopback.cc
  size_t poll(std::span<Completion> out) override;
  void release_rx(std::span<const Completion> done) override;
  int wait_fd() const override { return epfd_.get(); }
  void prepare_sleep() override;
  TransportStats stats() const override;

  /// RC QPs this transport holds now (connected, spare and closing).
  size_t qp_count() const { return qps_.load(std::memory_order_relaxed); }
  size_t registrations() const { return pools_->registrations(); }

  // For channels and connections.
  MemPools& pools() { return *pools_; }
  MemPools& local_pools() { return *local_pools_; }
  uint32_t fragment_bytes() const { return config_.recv_buffer_bytes; }
  const VerbsConfig& config() const { return config_; }
  /// verbs.rc_fault_after: true for the post that should break its QP.
  bool fault_due() {
    return config_.rc_fault_after != 0 &&
           posts_seen_.fetch_add(1, std::memory_order_relaxed) + 1 == config_.rc_fault_after;
  }
  bool cq_room() const {
    return posted_.load(std::memory_order_relaxed) < cq_limit_.load(std::memory_order_relaxed);
  }
  void count_posted(uint32_t n) { posted_.fetch_add(n, std::memory_order_relaxed); }
  void count_done(uint32_t n) { posted_.fetch_sub(n, std::memory_order_relaxed); }
  /// A message (SEND, or WRITE_WITH_IMM posted like one) is about to be
  /// posted: its completion may be what the poller must see (a kSendDone,
  /// ring room for a waiting sender, a failure), so a sleeping poller's send
  /// CQ is armed first. One-sided ops are not counted: their caller polls
  /// the send CQ itself until they complete.
  void msg_posting();
  void msgs_done(uint32_t n) { msgs_out_.fetch_sub(n, std::memory_order_relaxed); }
  /// Polls the send CQ unless another thread is at it. Any thread.
  void poll_send_cq();
  /// The same for the one-sided QPs' CQ (onesided_cq.h).
  void poll_onesided_cq();
  void report_send_done(uint64_t wr_id, Code code);
  void note_backlog(Channel* c);
  void break_conn(VerbsConn* c);
  /// How long a one-sided op takes here, learned (channel.h wait_for).
  SpinGauge& op_gauge() { return op_gauge_; }

 private:
  friend class VerbsConn;
  Status open_device(TransportShare* share);
  Status open_control();
  // verbs_connect.cc: the QP address exchange; qp_supply.cc: QPs and channels.
  // What a channel carries: its registered memory follows (verbs_conn.h).
  enum class ChannelRole : uint8_t { kMessages, kOneSided, kBoth };
  Result<std::unique_ptr<Channel>> make_channel(VerbsConn* conn, ChannelRole role);
  Status make_channels(VerbsConn* conn, uint32_t k, uint32_t r);
  Status connect_channels(VerbsConn* conn, const ConnectReply& remote, std::string* why);
  Result<std::shared_ptr<VerbsConn>> dial(const PeerInfo& peer, Deadline d);
  bool qp_budget_allows(uint32_t k) const;
  // The control thread.
  // Its epoll tags; others are conns.
  static constexpr uint64_t kListenTag = 1, kRefillTag = 2, kStopTag = 4;
  // The poller's epoll tags (wait_fd()): the completion channel, the awake fd.
  static constexpr uint64_t kCqChannelTag = 2, kAwakeFdTag = 3;
  void control_loop();
  void accept_all();
  void on_control(const std::shared_ptr<VerbsConn>& c, uint32_t events);
  bool answer_request(VerbsConn* c);
  Status watch(const std::shared_ptr<VerbsConn>& c);
  void unwatch(VerbsConn* c);
  void abandon(const std::shared_ptr<VerbsConn>& c);
  void add_channels(VerbsConn* c);
  void remove_channels(VerbsConn* c);
  // LMR room the control thread keeps registered ahead (refill_spares): a few small
  // LMRs, or proto's RPC ring for one peer (128 KiB).
  static constexpr size_t kLmrHeadroomBytes = 256u << 10;
  void refill_spares();
  void refill_qps();
  void want_refill();
  bool exchanges_under_way();
  bool await_answered(NodeId node, Deadline d);
  void end_exchange_locked(NodeId node);  // watch_mu_ held
  // One more QP; `message_cq`: on the send CQ, which grows with them.
  void count_qp(bool message_cq = true);
  void poll_cq(ibv_cq* cq, SpinLock& mu);
  RcOptions qp_options(bool onesided) const;
  Status open_loopback();  // loopback.cc

  // verbs_recv.cc: the receive path.
  size_t poll_recv(std::span<Completion> out, size_t n);
  bool deliver(const ibv_wc& wc, Completion* out);
  void post_recv(const uint32_t* idx, size_t count);

  void close_conn(VerbsConn* c, std::span<Completion> out, size_t* n, const char* why);
  void sweep_closed(bool all);
  void handle_events();
  void try_arm();
  void kick();
  Status add_to_epoll(int fd, uint64_t tag);

  VerbsConfig config_;
  uint32_t max_msg_ = 0;
  Caps caps_;
  std::string address_;
  std::unique_ptr<VerbsDevice> dev_;
  std::unique_ptr<OneSidedCq> ocq_;        // after dev_, before every QP: destroyed after them
  std::unique_ptr<MemPools> pools_;        // LMR memory, zero-based
  std::unique_ptr<MemPools> local_pools_;  // send rings and bounce buffers
  net::Fd listen_fd_, epfd_, awake_fd_;
  net::Fd ctl_epfd_, ctl_stop_;  // the control thread's epoll set and its stop bell
  net::Fd ctl_refill_;           // rung when refill_due_ turns true
  std::thread control_;
  // The control thread's sockets: connections being accepted and every
  // connection whose socket it watches (kept alive while watched).
  std::mutex watch_mu_;
  std::unordered_map<VerbsConn*, std::shared_ptr<VerbsConn>> watched_;
  std::unordered_multiset<NodeId> answered_;  // nodes whose kReady we await (watch_mu_)
  std::atomic<NodeId> self_{kNoNode};
  std::atomic<uint64_t> token_{0};
  Mac hello_key_{};
  std::atomic<uint64_t> hello_counter_{0};
  HelloCheck hellos_{kHelloLabel};  // the control thread's
  std::atomic<bool> armed_{false};
  std::atomic<uint64_t> posts_seen_{0};  // counted only with verbs.rc_fault_after set
  // The send CQ is armed and its event not yet taken (handle_events), and
  // messages posted and not yet completed, all QPs: try_arm arms the send
  // CQ only while there are some.
  std::atomic<bool> send_armed_{false};
  std::atomic<uint64_t> msgs_out_{0};
  void arm_send();
  std::atomic<size_t> qps_{0};
  std::atomic<uint64_t> posted_{0};    // work requests not yet completed, all QPs
  std::atomic<uint64_t> cq_limit_{0};  // posts in flight the send CQ has room for
  bool cq_fixed_ = false;              // it cannot grow further (send_cq_mu_)
  SpinGauge op_gauge_;                 // floor verbs.spin_us, cap kMaxLearnedSpinNs
  static constexpr uint64_t kMaxLearnedSpinNs = 500000;

  ConnTable<VerbsConn> conns_;

  // QPs made ahead of need: on the send CQ, and on the one-sided CQ.
  mutable std::mutex spare_mu_;
  std::vector<std::unique_ptr<RcQp>> spare_, rdma_spare_;

  // Channels by slot, for send completions (wr_id names the slot).
  struct ChannelSlot {
    std::atomic<Channel*> ch{nullptr};
    uint16_t gen = 0;
  };
  static constexpr uint32_t kMaxChannels = 1u << 16;
  static constexpr uint32_t kFirstSendQueues = 4;       // the send CQ's first size, in send queues
  static constexpr uint32_t kOneSidedCqEntries = 4096;  // one-sided ops in flight: 2 per thread
  // Made by init() once a device opened: 1 MiB written at construction
  // cost every process without a device 256 page faults in LT_join.
  std::unique_ptr<ChannelSlot[]> slots_;
  std::mutex slots_mu_;
  std::vector<uint32_t> free_slots_;
  uint32_t next_slot_ = 1;
  SpinLock send_cq_mu_;

  // Receive buffers (the poller's once made).
  std::byte* rx_mem_ = nullptr;  // mmap'd, recv_buffers x recv_buffer_bytes
  size_t rx_len_ = 0;
  std::unique_ptr<Region> rx_region_;
  std::vector<uint32_t> lent_bufs_;
  std::vector<std::vector<std::byte>> lent_msgs_;
  // QP number -> channel, for receive completions. Set before a QP can
  // receive (before the exchange's answer), cleared when it is swept.
  SpinLock qpn_mu_;
  std::unordered_map<uint32_t, Channel*> by_qpn_;
  static constexpr int kStash = 16;
  std::unique_ptr<ibv_wc[]> stash_;  // receive completions try_arm found
  int stash_n_ = 0;

  // Poller-only state.
  std::vector<std::shared_ptr<VerbsConn>> closing_;
  // Channels of swept connections: an endpoint may outlive its connection,
  // and a thread may still be inside a post on it, so they go only
  // kDeadChannelNs after the sweep (or with the transport).
  struct DeadChannel {
    std::unique_ptr<Channel> ch;
    uint64_t since_ns;
  };
  static constexpr uint64_t kDeadChannelNs = 10'000'000'000ull;
  std::vector<DeadChannel> dead_channels_;
  // Something took spare QPs or registered room since the last refill: the
  // control thread refills (want_refill rings it).
  std::atomic<bool> refill_due_{true};
  uint64_t next_sweep_ns_ = 0;

  std::mutex backlog_mu_;
  std::vector<Channel*> backlogged_;
  std::atomic<bool> has_backlog_{false};

  DoneQueue done_;  // user-signaled sends, reported by the next poll
  std::atomic<bool> has_broken_{false};

  std::mutex reg_mu_;
  std::unordered_map<uint64_t, std::unique_ptr<Region>> regs_;  // register_memory, by lkey

  // local_atomic's QP pair (loopback.cc): the live one's channel, and every
  // pair made (the last is live), freed with the transport.
  struct Loopback {
    std::shared_ptr<VerbsConn> conn;  // not in conns_: no peer, no control socket
    std::unique_ptr<RcQp> responder;
  };
  std::mutex loopback_mu_;
  std::atomic<Channel*> loopback_{nullptr};
  std::vector<Loopback> loopbacks_;
};

}  // namespace lt::transport::verbs
