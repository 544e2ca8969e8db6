// A request: one operation in flight, from its call to the wait that
// collects its status. Every operation is one; blocking calls wait on it.
//
// A request's life is its state word, [generation:32][state:8], moved by
// compare-exchange so that exactly one thread completes it: the waiter, a
// reply, a peer-loss sweep and a cancel race for it and the CAS decides.
//   FREE -> PENDING (claimed from the table) -> CLAIMED (a completer won)
//        -> DONE (status set; the waiter collects it) -> FREE (generation+1)
//   PENDING -> CANCELLED (timed out; a late reply finds the state changed)
//   PENDING -> PLACING (a receive whose buffer the sender may be writing)
//   SENDING -> PENDING (a write whose bytes the transport sent by reference)
// The id handed out is [generation:32][index:32]: a stale id finds another
// generation and is refused.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "common/net.h"
#include "common/status.h"
#include "proto/asym_fence.h"
#include "proto/lmr/lmr.h"
#include "proto/msg.h"
#include "proto/wait.h"
#include "proto/yield_pacer.h"
#include "qos/scheduler.h"
#include "transport/transport.h"

namespace lt::proto {

using ReqId = uint64_t;
/// An operation complete at its call (an eager send): it took no request
/// slot, and waiting on or testing it returns OK at once, any number of
/// times. Real ids are never 0: their generation is at least 1.
inline constexpr ReqId kDoneReqId = 0;

inline constexpr uint32_t kStFree = 0, kStPending = 1, kStClaimed = 2, kStDone = 3,
                          kStCancelled = 4;
// A receive whose buffer the sender may be writing into (placement): it
// cannot be cancelled, only completed by the sender's MsgPlaced/MsgData or
// failed when the sender is lost.
inline constexpr uint32_t kStPlacing = 5;
// A write whose payload the transport sends from the caller's buffer
// (kWrByRef): it cannot be cancelled until its kSendDone moves it to PENDING
// (or fails it); the owner's reply may also complete it first.
inline constexpr uint32_t kStSending = 6;
// Payloads at least this large go by reference where the transport can
// (Caps::send_by_ref): below it the copy costs less than the completion that
// sending by reference adds.
inline constexpr uint64_t kByRefMinBytes = 64 * 1024;

/// The state word for `gen` and `st`.
constexpr uint64_t req_word(uint32_t gen, uint32_t st) {
  return (static_cast<uint64_t>(gen) << 8) | st;
}
constexpr uint32_t word_state(uint64_t w) { return static_cast<uint32_t>(w & 0xff); }
constexpr uint32_t word_gen(uint64_t w) { return static_cast<uint32_t>(w >> 8); }
// A state a completer (reply, sweep) may still claim.
constexpr bool live_state(uint32_t st) {
  return st == kStPending || st == kStPlacing || st == kStSending;
}

// The one place request ids are made and taken apart.
constexpr ReqId make_req_id(uint32_t gen, uint32_t idx) {
  return (static_cast<uint64_t>(gen) << 32) | idx;
}
constexpr uint32_t req_index(ReqId id) { return static_cast<uint32_t>(id); }
constexpr uint32_t req_gen(ReqId id) { return static_cast<uint32_t>(id >> 32); }

// A split rendezvous's word (Request::split): [generation:32][role:8][parts:8].
inline constexpr uint8_t kSplitSend = 1, kSplitRecv = 2;
constexpr uint64_t split_word(uint32_t gen, uint8_t role, uint8_t parts) {
  return (static_cast<uint64_t>(gen) << 16) | (static_cast<uint64_t>(role) << 8) | parts;
}

enum class ReqKind : uint8_t {
  kPlain,
  kRead,
  kAlloc,
  kMap,
  kCopyRead,
  kAtomic,
  kRpc,
  kSendRndv,  // a rendezvous send waiting for the receiver's pull
  kRecv,      // a receive (posted, or matched to a rendezvous and waiting for data)
  kRpcRecv,   // a server-loop receive of an RPC request (recv_rpc_async)
};

struct Request {
  uint32_t idx = 0;
  std::atomic<uint32_t> free_next{0};  // free stack link: index+1, 0 ends
  std::atomic<uint64_t> word{0};       // [generation:32][state:8]
  std::atomic<uint32_t> wake{0};       // futex word, bumped on completion
  std::atomic<uint32_t> sleepers{0};
  // A waiter asleep on the transports (Engine::poll_asleep) rather than on
  // `wake`: its eventfd, rung with the futex wake. -1 otherwise.
  std::atomic<int> notify_fd{-1};
  std::atomic<NodeId> peer{0};
  ReqKind kind = ReqKind::kPlain;
  Code status = Code::kOk;
  bool admitted = false;  // holds a scheduler admission, returned at release
  qos::Ticket ticket;     // its QoS class and start, with QoS on
  std::byte* out = nullptr;
  uint64_t out_len = 0;
  AllocReply alloc{};
  MapReply mapr{};
  // Cross-node memcpy: phase 1 reads into `bounce`, phase 2 writes it to dst.
  std::unique_ptr<std::byte[]> bounce;
  std::shared_ptr<Mapping> copy_dst;
  uint64_t copy_dst_off = 0;
  size_t* rpc_len = nullptr;            // kRpc, kRecv: where the reply/message length goes
  NodeId* msg_src = nullptr;            // kRecv: where the sender's id goes
  const std::byte* send_buf = nullptr;  // kSendRndv: the message
  uint32_t msg_port = 0;                // kRecv: the port; kRpcRecv: the function id
  uint64_t* rpc_token = nullptr;        // kRpcRecv: where the reply token goes
  // A rendezvous of this many bytes is in flight for it: its waiter spins
  // longer (the copy takes about that long; sleeping costs a wake-up).
  std::atomic<uint32_t> spin_extra_us{0};
  // kRecv placed by the sender: the registration of `out`, dropped at finish.
  // kSendRndv offering a split: the registration of `send_buf` instead.
  transport::Transport* place_t = nullptr;
  transport::MemRegion place_mr{};
  // A split rendezvous (msg/rndv_split.cc): [generation:32][role:8][parts:8],
  // the parts still running. The one that ends the last part completes the
  // request; the outcomes below are written before a part ends.
  std::atomic<uint64_t> split{0};
  Code split_local = Code::kOk;   // this side's copy (sender: its write; receiver: its read)
  Code split_remote = Code::kOk;  // receiver: the sender's answer (MsgPlaced, MsgData)
  bool split_withdrawn = false;   // receiver: the sender withdrew the message

  /// True while generation `gen`'s split of `role` has parts running.
  bool split_running(uint32_t gen, uint8_t role) const {
    uint64_t w = split.load(std::memory_order_acquire);
    return (w & ~uint64_t{0xff}) == split_word(gen, role, 0) && (w & 0xff) != 0;
  }
  /// Ends one part of generation `gen`'s split of `role`; true for the
  /// caller that ended the last one (it completes the request). Outcomes
  /// written before this are seen by that caller.
  bool end_split_part(uint32_t gen, uint8_t role) {
    uint64_t w = split.load(std::memory_order_acquire);
    while ((w & ~uint64_t{0xff}) == split_word(gen, role, 0) && (w & 0xff) != 0) {
      if (split.compare_exchange_weak(w, w - 1, std::memory_order_acq_rel)) return (w & 0xff) == 1;
    }
    return false;
  }

  uint32_t state() const { return word_state(word.load(std::memory_order_acquire)); }
  bool done() const { return state() == kStDone; }
  /// Moves generation `gen` from state `from` to `to`; false when another
  /// thread moved it first or the generation changed.
  bool move(uint32_t gen, uint32_t from, uint32_t to) {
    uint64_t expect = req_word(gen, from);
    return word.compare_exchange_strong(expect, req_word(gen, to));
  }
  /// Takes a request the caller made and nobody else can see yet, or one
  /// it won: PENDING to CLAIMED without a compare-exchange.
  void set_claimed() {
    uint64_t w = word.load(std::memory_order_relaxed);
    word.store((w & ~uint64_t{0xff}) | kStClaimed, std::memory_order_release);  // no locked op
  }
  /// PENDING, PLACING or SENDING to CLAIMED; false when someone else
  /// completed, cancelled or claimed it.
  bool claim_if_live() {
    uint64_t w = word.load();
    return live_state(word_state(w)) &&
           word.compare_exchange_strong(w, (w & ~uint64_t{0xff}) | kStClaimed);
  }
  /// The claimed request's last step: its status, DONE, and a wake-up for a
  /// waiter that went to sleep.
  void complete(Status s) {
    status = s.code();
    const uint64_t done = (word.load(std::memory_order_relaxed) & ~uint64_t{0xff}) | kStDone;
    // A waiter counts itself in `sleepers`, then fences, before its last
    // look at the word: either it sees DONE or we see it and bump `wake`
    // (which its futex compares). The waiter's fence is the heavy side of
    // AsymFence, so this one is a plain store: no locked instruction per
    // completion, and none at all while no waiter sleeps.
    if (AsymFence::ready()) {
      word.store(done, std::memory_order_release);
      std::atomic_signal_fence(std::memory_order_seq_cst);
    } else {
      word.store(done, std::memory_order_seq_cst);
    }
    if (sleepers.load(std::memory_order_seq_cst) != 0) {
      wake.fetch_add(1, std::memory_order_seq_cst);
      futex_wake_all(&wake);
      const int fd = notify_fd.load(std::memory_order_relaxed);
      if (fd >= 0) net::ring_eventfd(fd);
    }
  }
};

}  // namespace lt::proto
