// Message and RPC credits, per peer, and the epoch that callers out of
// credits wait on.
//
// Message credits bound what a sender leaves unconsumed at a receiver, so
// the receiver's store of unexpected messages stays bounded: a sender takes
// one per message (msg_in_flight) and the receiver gives them back as it
// consumes, piggybacked on its next message to the sender (take_owed) or in
// a MsgCredit once a batch of them is owed.
//
// What a receiver stores is bytes, so small messages get more room: all
// msg_credits may be in flight while the message being sent is small
// (kSmallMsgBytes at most), but a larger one goes only while fewer than a
// quarter of them are (big_limit). The store then holds at most big_limit
// messages of any size plus small ones, and a stream of small messages keeps
// the receiver's backlog deep enough that it takes several per progress
// pass. The batch is a quarter of big_limit, so a stream of large messages
// gets credits back before its sender stalls. Every node derives both from
// its engine.msg_credits, which the nodes of a cluster share.
//
// RPC credits bound the calls outstanding at one server (its ring for us); a
// reply returns one.
//
// A tenant may also cap the credits it holds over all peers together
// (max_msg_credits, max_rpc_credits; set_quotas): a take beyond the cap is
// refused with kQuota. Returned in batches, message credits could then stay
// owed at receivers below a batch while the sender waits for them for ever;
// so once a sender holds more than half its cap, its messages ask for their
// credit at once (credit_now: the receiver returns what it owes as soon as it
// consumes such a message). Without a cap none of this costs anything.
//
// Thread contract: every method is thread-safe except count_consumed() and
// reset(), which callers serialize (the engine calls them under its port
// table lock): `consumed` has that one writer, so counting a consumed
// message is a plain store, not a locked instruction.
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <cassert>
#include <cstdint>
#include <memory>

#include "common/status.h"
#include "common/time.h"
#include "proto/msg.h"
#include "proto/wait.h"
#include "transport/transport.h"

namespace lt::proto {

using transport::NodeId;

class Credits {
 public:
  /// `msg_credits` unconsumed messages per (sender, receiver) pair and
  /// `rpc_slots` outstanding calls per (client, server), for `max_nodes`
  /// node slots (a power of two; node_slot(id)). A slot's counts belong to
  /// the node that holds it (rekey()); calls naming another node change
  /// nothing (take_* refuse).
  Credits(uint32_t msg_credits, uint32_t rpc_slots, NodeId max_nodes)
      : msg_limit_(static_cast<int32_t>(msg_credits)),
        big_limit_(std::max<int32_t>(1, static_cast<int32_t>(msg_credits / 4))),
        rpc_limit_(static_cast<int32_t>(rpc_slots)),
        batch_(std::max<int32_t>(1, big_limit_ / 4)),
        slot_mask_(max_nodes - 1),
        peers_(new Peer[max_nodes]) {
    assert(std::has_single_bit(max_nodes));  // a mask, not a division, per lookup
  }

  /// The tenant's caps on credits held over all peers (0: none). Set at
  /// join, before any traffic.
  void set_quotas(uint32_t msg, uint32_t rpc) {
    msg_quota_ = static_cast<int32_t>(std::min<uint32_t>(msg, INT32_MAX));
    rpc_quota_ = static_cast<int32_t>(std::min<uint32_t>(rpc, INT32_MAX));
  }

  // ---- sender side

  /// Payload bytes up to which a message is small (may use every credit).
  static constexpr uint64_t kSmallMsgBytes = 1024;

  /// One message credit towards `node` for a message of `len` bytes: kOk,
  /// kNoResource (nothing taken) when the peer's are all in use (for a large
  /// message: a quarter of them), kQuota when the tenant's cap is reached.
  /// *credit_now: the message should ask for its credit at once (more than
  /// half the cap is held). `node` is a valid id (checked by the caller).
  Code take_msg(NodeId node, uint64_t len, bool* credit_now) {
    *credit_now = false;
    Peer* p = at(node);
    if (p == nullptr) return Code::kNoResource;
    if (msg_quota_ != 0) {
      const int32_t held = msg_total_.fetch_add(1, std::memory_order_seq_cst) + 1;
      if (held > msg_quota_) {
        msg_total_.fetch_sub(1, std::memory_order_acq_rel);
        return Code::kQuota;
      }
      *credit_now = held * 2 > msg_quota_;
    }
    std::atomic<int32_t>& f = p->msg_in_flight;
    const int32_t limit = len <= kSmallMsgBytes ? msg_limit_ : big_limit_;
    if (f.fetch_add(1, std::memory_order_seq_cst) < limit) return Code::kOk;
    f.fetch_sub(1, std::memory_order_acq_rel);
    if (msg_quota_ != 0) msg_total_.fetch_sub(1, std::memory_order_acq_rel);
    return Code::kNoResource;
  }
  /// Gives back a credit take_msg() took for a message that did not go.
  void untake_msg(NodeId node) {
    if (Peer* p = at(node)) {
      p->msg_in_flight.fetch_sub(1, std::memory_order_acq_rel);
      if (msg_quota_ != 0) msg_total_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }
  /// Whether this sender holds more than half its message cap (a message
  /// sent now, rendezvous data included, asks for its credit at once).
  bool msg_credit_now() const {
    return msg_quota_ != 0 && msg_total_.load(std::memory_order_relaxed) * 2 > msg_quota_;
  }
  /// Messages to `node` whose credit has not come back yet (a snapshot).
  int32_t msg_in_use(NodeId node) {
    Peer* p = at(node);
    return p == nullptr ? 0 : p->msg_in_flight.load(std::memory_order_relaxed);
  }
  /// Unconsumed messages to one receiver at which a sender starts holding
  /// small ones back (Engine::send_eager): half of what large ones may use.
  int32_t msg_hold_depth() const { return std::max<int32_t>(1, big_limit_ / 2); }
  /// Credits held over all peers, counted only under a cap (else 0).
  int32_t msg_held() const { return msg_total_.load(std::memory_order_acquire); }
  int32_t rpc_held() const { return rpc_total_.load(std::memory_order_acquire); }
  /// Credits a receiver sent back. Never below zero: credits that arrive
  /// after a connection was lost and re-made must not mint extra ones.
  void apply_msg(NodeId from, uint32_t count) {
    Peer* p = at(from);
    if (count == 0 || p == nullptr) return;
    std::atomic<int32_t>& f = p->msg_in_flight;
    int32_t v = f.load(std::memory_order_acquire);
    while (v > 0) {
      int32_t next = v > static_cast<int32_t>(count) ? v - static_cast<int32_t>(count) : 0;
      // seq_cst with the watcher count read after it, against a caller's
      // Watch and then its credit take: one sees the other.
      if (f.compare_exchange_weak(v, next, std::memory_order_seq_cst)) {
        if (msg_quota_ != 0) msg_total_.fetch_sub(v - next, std::memory_order_acq_rel);
        came_back();
        return;
      }
    }
  }

  /// One call slot at server `node`: the number of calls that were already
  /// outstanding there, or -1 (nothing taken) when all are in use, or
  /// kRpcQuota when the tenant's cap on calls outstanding is reached.
  static constexpr int32_t kRpcQuota = -2;
  int32_t take_rpc(NodeId node) {
    Peer* p = at(node);
    if (p == nullptr) return -1;
    if (rpc_quota_ != 0) {
      if (rpc_total_.fetch_add(1, std::memory_order_seq_cst) >= rpc_quota_) {
        rpc_total_.fetch_sub(1, std::memory_order_acq_rel);
        return kRpcQuota;
      }
    }
    std::atomic<int32_t>& c = p->rpc_in_flight;
    int32_t used = c.fetch_add(1, std::memory_order_seq_cst);
    if (used < rpc_limit_) return used;
    c.fetch_sub(1, std::memory_order_acq_rel);
    if (rpc_quota_ != 0) rpc_total_.fetch_sub(1, std::memory_order_acq_rel);
    return -1;
  }
  void untake_rpc(NodeId node) {
    if (Peer* p = at(node)) {
      p->rpc_in_flight.fetch_sub(1, std::memory_order_acq_rel);
      if (rpc_quota_ != 0) rpc_total_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }
  /// A reply freed a slot at `n` (or a call failed that will get none).
  /// Never below zero: a reply that arrives (on a new connection) for a
  /// call already failed by a peer loss must not mint an extra credit.
  void return_rpc(NodeId n) {
    Peer* p = at(n);
    if (p == nullptr) return;
    std::atomic<int32_t>& c = p->rpc_in_flight;
    int32_t v = c.load(std::memory_order_acquire);
    while (v > 0) {
      if (c.compare_exchange_weak(v, v - 1, std::memory_order_seq_cst)) {  // see apply_msg
        if (rpc_quota_ != 0) rpc_total_.fetch_sub(1, std::memory_order_acq_rel);
        came_back();
        return;
      }
    }
  }

  // ---- receiver side

  /// A message from `from` was consumed here. True when a MsgCredit is due:
  /// a quarter of the credits are owed (a blocked sender has more than three
  /// quarters of its messages still unconsumed here, so batching never
  /// withholds the credit it waits for), or it came from this node
  /// (`to_self`: back at once; also for a message whose sender asked for
  /// its credit at once, at its tenant's cap). Callers serialize.
  bool count_consumed(NodeId from, bool to_self) {
    Peer* pp = at(from);
    if (pp == nullptr) return false;
    Peer& p = *pp;
    uint32_t c = p.consumed.load(std::memory_order_relaxed) + 1;
    p.consumed.store(c, std::memory_order_release);
    if (to_self) return true;
    return static_cast<int32_t>(c - p.credited.load(std::memory_order_relaxed)) >= batch_;
  }
  /// The credits owed to `peer`, taken to ride on a message to it (reads
  /// first: most messages owe none, and the compare-exchange is a locked
  /// instruction).
  uint32_t take_owed(NodeId peer) {
    Peer* pp = at(peer);
    if (pp == nullptr) return 0;
    Peer& p = *pp;
    uint32_t c = p.consumed.load(std::memory_order_acquire);
    uint32_t r = p.credited.load(std::memory_order_relaxed);
    while (static_cast<int32_t>(c - r) > 0) {
      if (p.credited.compare_exchange_weak(r, c, std::memory_order_acq_rel)) return c - r;
    }
    return 0;  // none, or another sender took them
  }
  /// Owed credits taken for a message that did not go: owed again.
  void give_back_owed(NodeId peer, uint32_t n) {
    Peer* p = at(peer);
    if (n != 0 && p != nullptr) p->credited.fetch_sub(n, std::memory_order_acq_rel);
  }

  /// A lost connection loses the messages, calls and credits it carried;
  /// those credits would be gone for good (a sender blocked for ever at the
  /// limit). Both ends start afresh: in-flight counts to zero, owed credits
  /// forgotten (the other end does the same). Messages of the old connection
  /// still waiting in a store here return their credits later: a sender may
  /// then have up to twice its credits unconsumed here, once. Callers
  /// serialize as for count_consumed().
  void reset(NodeId peer) {
    Peer* pp = at(peer);
    if (pp == nullptr) return;
    Peer& p = *pp;
    forget_held(p);
    p.credited.store(p.consumed.load(std::memory_order_relaxed), std::memory_order_seq_cst);
  }

  /// `node` takes its slot over from an older node: everything starts from
  /// zero. Callers serialize as for count_consumed().
  void rekey(NodeId node) {
    if ((node & slot_mask_) == 0) return;
    Peer& p = peers_[node & slot_mask_];
    p.id.store(0, std::memory_order_seq_cst);  // nobody's while it is cleared
    forget_held(p);
    p.consumed.store(0, std::memory_order_relaxed);
    p.credited.store(0, std::memory_order_seq_cst);
    p.id.store(node, std::memory_order_seq_cst);
  }

  // ---- waiting for credits

  /// Moves when credits come back while a Watch exists (and on every
  /// returned()): a caller out of credits makes a Watch, reads the epoch,
  /// tries again, and on failure waits for the epoch to move.
  uint32_t epoch() const { return seq_.load(std::memory_order_acquire); }
  class Watch {
   public:
    explicit Watch(Credits& c) : c_(c) { c_.watchers_.fetch_add(1, std::memory_order_seq_cst); }
    ~Watch() { c_.watchers_.fetch_sub(1, std::memory_order_seq_cst); }
    Watch(const Watch&) = delete;
    Watch& operator=(const Watch&) = delete;

   private:
    Credits& c_;
  };
  /// Moves the epoch and wakes sleepers (a peer went down or lost its
  /// connection: waiters retry and see it).
  void returned() {
    seq_.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) != 0) futex_wake_all(&seq_);
  }
  /// Other room a blocked caller may wait for came back (a request slot):
  /// watchers see the epoch move, as for credits.
  void room_freed() { came_back(); }
  /// Sleeps until the epoch is no longer `seen`, or `d` (kTimedOut). The
  /// spin before it is the caller's (it polls the transports).
  Status sleep_while(uint32_t seen, Deadline d) {
    while (seq_.load(std::memory_order_acquire) == seen) {
      uint64_t left = d.remaining_ns();
      if (left == 0) return Code::kTimedOut;
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      if (seq_.load(std::memory_order_seq_cst) == seen) {
        futex_wait(&seq_, seen, std::min<uint64_t>(left, kMaxSleepNs));
      }
      sleepers_.fetch_sub(1, std::memory_order_seq_cst);
    }
    return Status::ok();
  }

 private:
  struct Peer {
    std::atomic<NodeId> id{0};              // the node whose counts these are
    std::atomic<int32_t> rpc_in_flight{0};  // RPC credits used at this server
    std::atomic<int32_t> msg_in_flight{0};  // message credits used at this receiver
    // Its messages consumed here (one writer: see the thread contract) and
    // how many of those went back as credits; the difference is owed
    // (wrapping counts).
    std::atomic<uint32_t> consumed{0};
    std::atomic<uint32_t> credited{0};
  };
  Peer* at(NodeId node) {
    Peer& p = peers_[node & slot_mask_];
    return (node & slot_mask_) != 0 && p.id.load(std::memory_order_relaxed) == node ? &p : nullptr;
  }
  /// One count went down (its compare-exchange was seq_cst): watchers see
  /// the epoch move; without watchers nothing is bumped (a locked
  /// instruction per message otherwise).
  void came_back() {
    if (watchers_.load(std::memory_order_seq_cst) != 0) returned();
  }

  // The peer's in-flight counts go to zero, and out of the tenant's totals.
  void forget_held(Peer& p) {
    const int32_t m = p.msg_in_flight.exchange(0, std::memory_order_seq_cst);
    const int32_t r = p.rpc_in_flight.exchange(0, std::memory_order_seq_cst);
    if (msg_quota_ != 0 && m > 0) msg_total_.fetch_sub(m, std::memory_order_acq_rel);
    if (rpc_quota_ != 0 && r > 0) rpc_total_.fetch_sub(r, std::memory_order_acq_rel);
  }

  const int32_t msg_limit_, big_limit_, rpc_limit_, batch_;
  int32_t msg_quota_ = 0, rpc_quota_ = 0;             // set_quotas(); 0: no cap
  std::atomic<int32_t> msg_total_{0}, rpc_total_{0};  // held over all peers, under a cap
  const NodeId slot_mask_;                            // node slots - 1 (a power of two)
  std::unique_ptr<Peer[]> peers_;
  std::atomic<uint32_t> seq_{0}, sleepers_{0}, watchers_{0};
};

/// One send's message credit (taken by the sender) and the owed credits
/// that ride on its message: both go back when the guard dies, unless the
/// message went (sent()). Every way a send can fail unwinds through here.
class MsgCreditGuard {
 public:
  /// Takes nothing: the caller took the credit (Credits::take_msg, which
  /// said whether the message asks for it at once).
  MsgCreditGuard(Credits& c, NodeId node, bool credit_now = false)
      : c_(c), node_(node), credit_now_(credit_now) {}
  ~MsgCreditGuard() {
    if (sent_) return;
    c_.untake_msg(node_);
    c_.give_back_owed(node_, owed_);
  }
  MsgCreditGuard(const MsgCreditGuard&) = delete;
  MsgCreditGuard& operator=(const MsgCreditGuard&) = delete;

  /// The credits owed to the destination, to put in the message.
  uint32_t take_owed() { return owed_ = c_.take_owed(node_); }
  /// The message's header, asking for its credit at once when it should.
  MsgHeader header(MsgOp op, uint64_t req_id) const {
    MsgHeader h = make_header(op, req_id);
    if (credit_now_) h.flags |= kFlagCreditNow;
    return h;
  }
  /// The message is out: the credits stay with it.
  void sent() { sent_ = true; }

 private:
  Credits& c_;
  const NodeId node_;
  const bool credit_now_;
  uint32_t owed_ = 0;
  bool sent_ = false;
};

}  // namespace lt::proto
