// One RC QP of a connection and what posting on it needs (the rc
// transport's send side):
//  - messages are copied into the channel's send ring (registered memory)
//    or sent inline, one SEND per fragment of at most recv_buffer_bytes; the
//    immediate carries the framing (kWhole, kFirst | total length, kMore);
//  - a kWriteImm goes the same way (copied or inline, one WRITE_WITH_IMM of
//    at most one fragment into the peer's memory; the immediate is the
//    caller's): proto's RPC rings;
//  - what an accepted message cannot post now (ring or send queue full)
//    waits in a backlog, copied, that the poller pumps as completions free
//    room; later messages queue behind it, so the order holds;
//  - one-sided ops (READ, WRITE, atomics) are done when execute() returns:
//    the caller posts one signaled work request (a guarded read, or an op
//    and the guard read after it: two, chained), then polls the channel's
//    CQ itself until its completion comes (a channel of one-sided ops
//    only completes on the never-armed one-sided CQ, onesided_cq.h).
//    Local buffers in registered memory are used in place; others go through
//    the channel's bounce buffer;
//  - selective signaling: a message is signaled when the caller asks, or
//    when the ring or the send queue is half full after it, so a full ring
//    always has a completion coming that frees it. A completion frees every
//    work request before it (RC completes in order).
//
// wr_id of a work request: channel slot (16 bits) | slot generation (16) |
// sequence number (32), so a completion that arrives after the channel is
// gone is recognised and dropped.
//
// Thread contract: post_message and execute from any thread (mu_ guards the
// send queue and ring; bounce_mu_ the bounce buffer, held across one op);
// on_completion under the transport's send-CQ lock, without mu_; pump by
// the poller, under the transport's backlog lock. Lock order: that lock,
// then mu_; post_message lets mu_ go before it notes a backlog.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "common/spinlock.h"
#include "common/status.h"
#include "transport/transport.h"
#include "transport/verbs/rc_qp.h"

struct ibv_wc;
struct ibv_send_wr;
struct ibv_sge;

namespace lt::transport::verbs {

class VerbsTransport;
class VerbsConn;
class OneSidedCq;

// The immediate of a message SEND (network order on the wire).
inline constexpr uint32_t kImmFirst = 0x80000000u;  // | total length: a fragmented message begins
inline constexpr uint32_t kImmMore = 0x40000000u;   // a further fragment
inline constexpr uint32_t kImmWhole = 0;            // a message in one SEND

class Channel {
 public:
  /// `ocq`: the one-sided CQ its QP completes on (onesided_cq.h); null: the
  /// transport's send CQ.
  Channel(VerbsTransport* t, VerbsConn* conn, std::unique_ptr<RcQp> qp, MemRegion ring,
          MemRegion bounce, uint32_t depth, OneSidedCq* ocq = nullptr);
  ~Channel();
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  /// The slot in the transport's channel table and its generation (set once
  /// the channel is in the table).
  void set_slot(uint32_t slot, uint16_t gen) {
    slot_ = slot;
    gen_ = gen;
  }
  uint32_t slot() const { return slot_; }
  RcQp& qp() { return *qp_; }
  VerbsConn* conn() const { return conn_; }

  /// A kSend, or a kWriteImm posted like one (at most one fragment). False:
  /// back-pressure, nothing taken. kWrMustQueue messages are always taken
  /// (into the backlog).
  Result<bool> post_message(const WorkRequest& wr);
  /// A one-sided op, done when this returns (see the header comment).
  Status execute(const WorkRequest& wr);
  /// A kWrGuard read and the read it guards (transport.h), done when this returns.
  Status execute_guarded(const WorkRequest& guard, const WorkRequest& rd);
  /// A write or an atomic and then its kWrGuard word (transport.h), done
  /// when this returns.
  Status execute_guard_after(const WorkRequest& op, const WorkRequest& guard);
  /// Called with the transport's send-CQ lock held.
  void on_completion(const ibv_wc& wc);
  /// The poller: post what the backlog holds while there is room.
  void pump();
  bool has_backlog() const { return backlog_size_.load(std::memory_order_acquire) != 0; }
  /// Work requests posted and not yet completed.
  uint32_t in_flight() const;
  /// The QP went to the error state: waiters give up, nothing more is posted.
  void fail();
  void break_qp_for_test();  // verbs.rc_fault_after
  bool failed() const { return failed_.load(std::memory_order_acquire); }

  // Reassembly of fragmented messages (the poller's).
  std::vector<std::byte> assembling;
  uint32_t assembling_total = 0;

 private:
  struct Wqe {
    uint64_t user_wr_id = 0;
    uint32_t ring_end = 0;          // ring_head_ after this request took its bytes
    bool report = false;            // a kSendDone for user_wr_id
    bool msg = false;               // a message (VerbsTransport::msg_posting)
    std::atomic<uint64_t> done{0};  // seq + 1 once complete (signaled ones)
    std::atomic<int> status{0};     // Code of the completion
  };
  // Where a posted message goes: the shared receive queue (a SEND), or a
  // peer's memory (a WRITE_WITH_IMM of a kWriteImm posted like a message).
  struct Target {
    bool write = false;
    uint32_t rkey = 0;
    uint64_t raddr = 0;
  };
  struct Pending {  // an accepted message not fully posted
    std::vector<std::byte> data;
    size_t sent = 0;
    uint64_t wr_id = 0;
    bool report = false;
    Target to;
    uint32_t imm = 0;  // a WRITE_WITH_IMM's
  };

  uint64_t make_wr_id(uint32_t seq) const {
    return (uint64_t{slot_} << 48) | (uint64_t{gen_} << 32) | seq;
  }
  // Room for one fragment of `len` bytes (0: inline) now; mu_ held.
  bool room_locked(uint32_t len) const;
  // Posts one fragment from `src` (copied into the ring unless inline); mu_ held.
  Status post_fragment_locked(const std::byte* const* parts, const uint32_t* lens, int nparts,
                              uint32_t imm, bool last, uint64_t wr_id, bool report,
                              const Target& to);
  Status post_whole_locked(const WorkRequest& wr, const Target& to);
  void enqueue_locked(const WorkRequest& wr, uint32_t len, const Target& to);
  bool pump_locked();
  Status wait_for(uint32_t seq);
  // The CQ this channel's QP completes on.
  bool cq_room() const;
  void count_posted(uint32_t n);
  void count_done(uint32_t n);
  void poll_cq();
  Status post_and_wait(ibv_send_wr* chain, uint32_t n);
  Status fill_wr(const WorkRequest& wr, uint64_t roff, uint64_t local, uint32_t lkey, uint32_t len,
                 ibv_sge* sge, ibv_send_wr* s);
  Status execute_chunk(const WorkRequest& wr, uint64_t roff, uint64_t local, uint32_t lkey,
                       uint32_t len);

  VerbsTransport* t_;
  VerbsConn* conn_;
  std::unique_ptr<RcQp> qp_;
  MemRegion ring_, bounce_;
  uint32_t depth_;
  OneSidedCq* ocq_;
  uint32_t slot_ = 0;
  uint16_t gen_ = 0;
  std::atomic<bool> failed_{false};

  SpinLock mu_;
  std::unique_ptr<Wqe[]> wqes_;
  // Written under mu_, read by on_completion without it (see there).
  std::atomic<uint32_t> next_seq_{0};  // next to post
  std::atomic<uint32_t> done_seq_{0};  // every seq below this completed
  // Bytes taken (under mu_) and freed (by completions), modulo 2^32.
  uint32_t ring_head_ = 0;
  std::atomic<uint32_t> ring_tail_{0};
  uint32_t since_signal_ = 0;
  std::deque<Pending> backlog_;
  std::atomic<size_t> backlog_size_{0};

  std::mutex bounce_mu_;
};

}  // namespace lt::transport::verbs
