// One peer of the ud transport (ARCHITECTURE §6e): the address handle of
// its UD QP, the stream this node sends it (ud_tx.cc) and the stream it
// sends this node (ud_rx.cc).
//
// Sending: a message is cut into datagrams of at most the path MTU, each
// copied into a registered send slot and numbered; at most the congestion
// window (ud_cwnd.h; never more than `window`) are unacknowledged. A
// datagram stays in its slot until acknowledged: the receiver's cumulative
// ack frees, its selective ack (the 64 after) steers fast retransmission of
// holes, and a timer (RTO from the measured RTT, doubling) resends what no
// ack covers. No sign of the peer for verbs.ud_peer_timeout_ms while
// datagrams wait: the peer is lost.
// Messages that do not fit the window now wait, copied, in a queue.
//
// Receiving (the poller's): datagrams are taken in sequence; early ones
// wait in their receive buffers (up to `window` ahead), duplicates are
// dropped and acknowledged again. A message of one datagram is handed to
// the engine in its receive buffer; a longer one is reassembled.
//
// Thread contract: post() from any thread; the send state is under tx_mu_,
// never held across a post to the device. The receive state is the
// poller's; senders read only the ack word (atomic) to piggy-back it.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "transport/transport.h"
#include "transport/verbs/ud_cwnd.h"
#include "transport/verbs/ud_wire.h"

struct ibv_ah;

namespace lt::transport::verbs {

class UdTransport;

/// One datagram to post: `bytes` of send slot `slot` (header included).
/// `seq` is its number, or kNoSeq for an acknowledgement.
struct UdSend {
  uint32_t slot;
  uint32_t bytes;
  uint32_t seq;
};
inline constexpr uint32_t kNoSeq = 0xffffffffu;
inline constexpr uint32_t kNoSlot = 0xffffffffu;
inline constexpr size_t kUdBatch = 32;  // datagrams per post to the device
inline constexpr uint32_t kMaxUdWindow = 1024;

class UdConn : public std::enable_shared_from_this<UdConn> {
 public:
  UdConn(UdTransport* t, NodeId peer, ibv_ah* ah, uint32_t qpn, uint32_t mtu);
  ~UdConn();
  UdConn(const UdConn&) = delete;
  UdConn& operator=(const UdConn&) = delete;

  Result<size_t> post(std::span<const WorkRequest> wrs);
  NodeId peer() const { return peer_.load(std::memory_order_relaxed); }
  ibv_ah* ah() const { return ah_; }
  uint32_t qpn() const { return qpn_; }
  uint32_t payload_max() const { return payload_max_; }
  /// The transport is going away: the address handle goes with it.
  void drop_ah();

  // For ConnTable (conn_table.h).
  std::atomic<NodeId> peer_;
  std::atomic<bool> dead_{false};
  uint64_t created_ns_ = 0;
  std::atomic<bool> broken_{false};  // malformed stream: the poller closes it

  // --- sending (ud_tx.cc) ---
  uint32_t tx_stream() const { return tx_stream_; }
  /// Sends the kSyn that opens this node's stream: once, first. False when
  /// no send slot is free.
  bool start(const UdSyn& syn);
  /// The poller: an acknowledgement of this node's stream; `marked` when
  /// the receiver was short of receive buffers (kUdMark).
  void on_ack(uint32_t cum, uint64_t sack, uint64_t now, bool marked = false);
  /// The poller: resends what is due, sends what waits for the window.
  /// Returns when it next needs the poller (0: never); *lost when the peer
  /// gave no sign for `peer_timeout_ns` while datagrams waited.
  uint64_t on_timer(uint64_t now, uint64_t peer_timeout_ns, bool* lost);
  /// When on_timer next has work (0: never), without doing any.
  uint64_t tx_deadline(uint64_t now, uint64_t peer_timeout_ns);
  /// Sends what waits for slots, the window or the device's send queue.
  void pump();
  /// The QP was reset (ud_recover.cc): every datagram in flight was lost
  /// with it, and is sent again now, without a window cut.
  void resend_in_flight();
  /// Posts that the device did not take: they go again with the next pump.
  void requeue(const UdSend* s, size_t n);
  /// The connection closed: every slot it held goes back, queued data too.
  void close_tx();

  // --- receiving (ud_rx.cc; the poller's) ---
  struct Rx {
    uint32_t stream = 0;        // the peer's stream; 0 until its kSyn
    uint32_t next = 0;          // the next seq expected
    std::vector<int32_t> held;  // early datagrams' receive buffers, by seq & mask; -1 none
    uint32_t held_count = 0;
    std::unique_ptr<std::byte[]> msg;  // a message being reassembled
    uint32_t msg_len = 0, msg_off = 0, msg_imm = 0;
    bool in_msg = false;
    bool in_acks = false;  // listed for an acknowledgement after this poll
    bool closed = false;
    bool ack_now = false;  // a duplicate or an early datagram: acknowledge at once
    bool mark = false;     // datagrams came while buffers ran low: the next ack is marked
    uint32_t unacked = 0;  // datagrams taken since the last acknowledgement
    uint64_t ack_due = 0;  // a delayed acknowledgement is due then; 0: none
  } rx;
  /// (stream << 32 | next) of the peer's stream, for senders to piggy-back.
  std::atomic<uint64_t> ack_word{0};
  /// The highest `next` any datagram acknowledged.
  std::atomic<uint32_t> acked_upto{0};
  /// Bit i: rx.next + 1 + i is held.
  uint64_t sack_bits() const;

 private:
  struct Seg {
    uint32_t slot = kNoSlot;
    uint32_t bytes = 0;
    uint64_t sent_ns = 0;  // last sent; 0: not yet
    bool sacked = false;
    bool resent = false;  // sent more than once: no RTT sample
    bool fast = false;    // resent for a hole the peer reported, since the last timeout
    bool queued = false;  // in want_
  };
  struct Waiting {  // a message copied, not all of it in datagrams yet
    std::vector<std::byte> bytes;
    uint32_t imm = 0;
    uint32_t off = 0;
  };

  /// Datagrams that may be numbered now: the congestion window less those in flight.
  uint32_t room() const {
    const uint32_t used = nxt_ - una_;
    return cwnd_.window() > used ? cwnd_.window() - used : 0;
  }
  /// Numbers a datagram of the bytes of `a` then `b` in `slot`.
  void add_segment(uint32_t slot, UdType type, uint8_t flags, uint32_t imm, uint32_t msg_len,
                   std::span<const std::byte> a, std::span<const std::byte> b);
  bool add_message(const WorkRequest& wr, uint32_t len);
  void fill_locked();
  void want(uint32_t seq);
  size_t collect_locked(UdSend* out, size_t max, uint64_t now);
  void post_all(std::unique_lock<std::mutex>& lock);
  void rtt_sample(uint64_t rtt);

  UdTransport* t_;
  ibv_ah* ah_;
  const uint32_t qpn_;
  const uint32_t payload_max_;
  const uint32_t window_;  // a power of two
  const uint32_t tx_stream_;
  const size_t waiting_cap_;

  std::mutex tx_mu_;
  std::vector<Seg> segs_;       // by seq & (window - 1)
  std::vector<uint32_t> want_;  // seqs to (re)send, a ring of 2 x window entries
  uint32_t want_head_ = 0, want_n_ = 0;
  uint32_t una_ = 0, nxt_ = 0;  // oldest unacknowledged, next to number
  std::deque<Waiting> waiting_;
  size_t waiting_bytes_ = 0;
  UdCwnd cwnd_;
  uint64_t srtt_ns_ = 0, rttvar_ns_ = 0, rto_ns_;
  uint64_t progress_ns_ = 0;   // last sign of the peer while datagrams waited
  bool need_backlog_ = false;  // waiting for slots: the poller pumps it
  bool tx_closed_ = false;     // close_tx ran: nothing more is sent
};

}  // namespace lt::transport::verbs
