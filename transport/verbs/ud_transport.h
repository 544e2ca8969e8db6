// ud transport: reliable messages over one RDMA unreliable-datagram QP
// (ARCHITECTURE §6e), the fallback for peers that rc cannot serve (its QP
// budget is spent, or the RC connection cannot be made). One UD QP serves
// every peer, so QPs do not grow with peers at all; reliability is ltier's
// (ud_conn.h). Messages only: one-sided ops are emulated through the owner
// by proto, as over tcp.
//
// A peer is reached through its published address (GID, QPN, LID, MTU):
// connect() makes an address handle and opens the stream with a kSyn at
// once, without a round trip; the kSyn's hello authenticates this node to
// the peer, which answers with its own.
//
// Memory: registered send slots of one MTU shared by all peers
// (verbs.ud_send_slots), and verbs.ud_recv_buffers receive buffers in a
// shared receive queue. Wake-ups follow rc's pattern, with a timerfd in the
// wait set for retransmissions and delayed acknowledgements, and only the
// receive CQ armed (send completions are reaped when the poller runs).
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/config.h"
#include "common/net.h"
#include "common/spinlock.h"
#include "transport/conn_table.h"
#include "transport/hello.h"
#include "transport/transport.h"
#include "transport/verbs/done_queue.h"
#include "transport/verbs/ud_conn.h"
#include "transport/verbs/verbs_device.h"

struct ibv_qp;
struct ibv_wc;

namespace lt::transport::verbs {

class UdTransport final : public Transport {
 public:
  explicit UdTransport(const Config& config);
  ~UdTransport() override;
  /// Picks and opens the device (its context and PD taken from `share`
  /// when another transport of the engine opened it first), makes the QP
  /// and the buffers. kNotFound (no usable device; the log says why),
  /// kInvalidArg (a bad key), kNoMemory, kSys.
  Status init(TransportShare* share = nullptr);

  const char* name() const override { return "ud"; }
  const Caps& caps() const override { return caps_; }
  std::string local_address() const override { return address_; }
  void set_identity(NodeId self, uint64_t cluster_token, const Mac& hello_key) override;
  Result<std::unique_ptr<Endpoint>> connect(const PeerInfo& peer, Deadline d) override;
  Result<MemRegion> register_memory(std::span<std::byte> mem, Access a) override;
  size_t poll(std::span<Completion> out) override;
  void release_rx(std::span<const Completion> done) override;
  int wait_fd() const override { return epfd_.get(); }
  void prepare_sleep() override;
  TransportStats stats() const override;

  // For connections.
  NodeId self() const { return self_.load(std::memory_order_acquire); }
  const VerbsConfig& config() const { return config_; }
  uint32_t mtu() const { return mtu_; }
  std::byte* slot_ptr(uint32_t slot) { return send_mem_ + size_t{slot} * slot_stride_; }
  /// `n` free send slots into out[0, n), or none (false).
  bool take_slots(uint32_t n, uint32_t* out);
  /// A post of `slot` to the device is about to be made (undone by
  /// slot_done when it fails).
  void slot_posted(uint32_t slot);
  void slot_done(uint32_t slot);
  /// The sender is done with `slot`; it is free once the device is too.
  void release_slot(uint32_t slot);
  bool slot_in_device(uint32_t slot) const {
    return (slot_state_[slot].load(std::memory_order_acquire) & kInDeviceMask) != 0;
  }
  /// Posts datagrams to `c`; returns how many the device took.
  size_t send(UdConn& c, const UdSend* s, size_t n);
  void report_send_done(uint64_t wr_id);
  /// `c` has datagrams waiting for slots or for room in the send queue.
  void note_backlog(UdConn* c);
  /// A datagram went out again; a connection's congestion window was cut.
  void note_retransmit() { retransmits_.fetch_add(1, std::memory_order_relaxed); }
  /// `marked`: the cut answered a receiver's mark, not a loss or a timeout.
  void note_window_cut(bool marked = false) {
    window_cuts_.fetch_add(1, std::memory_order_relaxed);
    if (marked) mark_cuts_.fetch_add(1, std::memory_order_relaxed);
  }
  /// A completion failed: the QP may be in error; the poller looks
  /// (recover_qp).
  void note_qp_error() { qp_error_.store(true, std::memory_order_release); }
  /// Receive buffers posted now (for the log).
  uint32_t rx_posted() const { return rx_posted_; }
  /// A connection needs the poller by `at_ns` (a retransmission timer).
  void need_timer(uint64_t at_ns);

 private:
  static constexpr uint32_t kInDeviceMask = 0xffff, kReleased = 0x10000;
  Status open_device(TransportShare* share);
  Status make_qp();
  Status ready_qp();
  // ud_recover.cc: a QP in error put back in service.
  void recover_qp(uint64_t now);
  uint32_t take_back_slots();
  /// When a fenced poller must look again: 0 now (stay awake), a failed
  /// reset's retry time, UINT64_MAX not fenced.
  uint64_t fence_deadline(uint64_t now) const;
  bool fault_due();
  void break_qp_for_test();
  Status make_buffers();
  Result<ibv_ah*> make_ah(const UdAddress& a, std::string* why);
  UdSyn make_syn(NodeId to);
  void say_bye();
  void free_slot(uint32_t slot);

  // ud_rx.cc: the receive path.
  size_t poll_recv(std::span<Completion> out, size_t n);
  void on_datagram(const ibv_wc& wc, std::span<Completion> out, size_t* n);
  UdConn* accept_syn(const UdHeader& h, const std::byte* payload, uint32_t src_qp,
                     std::span<Completion> out, size_t* n);
  std::byte* rx_buf(uint32_t idx) { return rx_mem_ + size_t{idx} * rx_stride_; }
  bool drop_on_purpose();
  void take(UdConn& c, const UdHeader& h, uint32_t idx, std::span<Completion> out, size_t* n);
  void take_one(UdConn& c, uint32_t idx, std::span<Completion> out, size_t* n);
  void deliver(const Completion& c, std::span<Completion> out, size_t* n);
  void send_ack(UdConn& c, uint64_t now);
  /// c's delayed acknowledgement went out on a datagram back: forgets it
  /// (true), so that no ack of its own follows.
  static bool drop_carried_ack(UdConn& c);
  void flush_acks(uint64_t now);
  void mark_if_low(uint32_t posted_before, uint32_t reaped, bool drained);
  void set_srq_limit();
  void post_recv(uint32_t idx);
  UdConn* conn_of(NodeId node);
  void note_ack(UdConn& c);
  void refresh_conns();

  void poll_send_cq();
  // A send completion's slot: false when it has no post in the device.
  bool completion_of(uint32_t slot);
  void run_timers(uint64_t now, std::span<Completion> out, size_t* n);
  void close_conn(UdConn* c, std::span<Completion> out, size_t* n, const char* why);
  void handle_events();
  void try_arm();
  void kick();
  void set_timerfd(uint64_t at_ns);
  void settle_timer(uint64_t now);
  void lower_to_timer(uint64_t at_ns);

  VerbsConfig config_;
  Caps caps_;
  std::string address_;
  uint32_t mtu_ = 0;
  std::unique_ptr<VerbsDevice> dev_;
  ibv_qp* qp_ = nullptr;
  net::Fd epfd_, awake_fd_, timer_fd_;
  std::atomic<NodeId> self_{kNoNode};
  std::atomic<uint64_t> token_{0};
  Mac hello_key_{};
  std::atomic<uint64_t> hello_counter_{0};
  HelloCheck hellos_{kUdHelloLabel};  // the poller's
  std::atomic<bool> armed_{false};
  std::atomic<uint64_t> next_timer_ns_{UINT64_MAX};
  uint32_t loss_percent_ = 0;
  uint64_t loss_rng_ = 0x9e3779b97f4a7c15ull;

  ConnTable<UdConn> conns_;
  std::unordered_map<NodeId, UdConn*> by_node_;  // the poller's, from conns_' snapshot

  // Send slots: registered, one MTU each; a slot's state counts its posts in
  // the device and says whether its sender released it.
  std::byte* send_mem_ = nullptr;
  size_t send_len_ = 0, slot_stride_ = 0;
  uint32_t slots_ = 0;
  std::unique_ptr<Region> send_region_;
  std::unique_ptr<std::atomic<uint32_t>[]> slot_state_;
  mutable SpinLock free_mu_;
  std::vector<uint32_t> free_slots_;
  std::atomic<uint32_t> sq_used_{0};
  uint32_t sq_depth_ = 0;

  // A QP in error (recover_qp): found by a failed completion or the
  // device's event; while it is reset, sq_used_ carries kSqFence so that no
  // post is granted, and the poller waits until every post has completed.
  static constexpr uint32_t kSqFence = 1u << 30;
  std::atomic<bool> qp_error_{false};
  bool qp_watched_ = false;
  bool sq_fenced_ = false;               // the poller's
  uint64_t fenced_at_ns_ = 0;            // the poller's
  bool fence_warned_ = false;            // the poller's
  uint64_t reset_retry_ns_ = 0;          // the poller's: a failed reset is tried again then
  uint64_t retry_gap_ns_ = 0;            // the poller's
  std::atomic<uint64_t> posts_seen_{0};  // counted only with verbs.ud_fault_after set

  // Receive buffers: GRH + one MTU each, all posted to the SRQ but those
  // lent to the engine or held early.
  std::byte* rx_mem_ = nullptr;
  size_t rx_len_ = 0, rx_stride_ = 0;
  std::unique_ptr<Region> rx_region_;
  std::vector<std::unique_ptr<std::byte[]>> lent_msgs_;  // reassembled, until release_rx
  std::unique_ptr<ibv_wc[]> stash_;                      // receive completions try_arm found
  int stash_n_ = 0;
  uint32_t rx_posted_ = 0;   // the poller's
  uint32_t rx_reserve_ = 0;  // early datagrams are held only while this many stay posted
  // The receiver's signal (mark_if_low): below rx_mark_ buffers posted the
  // acks are marked; 0: no marks (verbs.ud_congestion 0). The device's SRQ
  // limit event sets srq_fired_ (through the context's AsyncEvents).
  uint32_t rx_mark_ = 0;
  bool rx_low_ = false;         // the poller's: marking until drained and refilled
  bool srq_limit_set_ = false;  // the poller's: the device's limit is armed
  bool srq_watched_ = false;
  std::atomic<bool> srq_fired_{false};

  // The poller's.
  std::deque<Completion> ready_;  // completions found while `out` was full
  std::vector<UdConn*> acks_;     // connections that took datagrams this poll

  std::mutex backlog_mu_;
  std::vector<std::shared_ptr<UdConn>> backlogged_;
  std::atomic<bool> has_backlog_{false};

  DoneQueue done_;  // user-signaled sends, reported by the next poll
  std::atomic<bool> has_broken_{false};
  std::atomic<uint64_t> retransmits_{0}, window_cuts_{0}, mark_cuts_{0}, marks_sent_{0},
      qp_resets_{0};
  std::atomic<uint64_t> stray_completions_{0};  // send completions of no post (dropped)
};

}  // namespace lt::transport::verbs
