// LITE's RPC rings (ARCHITECTURE §10): where the transport to a server posts
// a write-with-immediate as cheaply as a message (Caps::async_write_imm_max,
// rc), a client's calls are written into a ring the server keeps for it, one
// RDMA WRITE_WITH_IMM each, and the server's replies come back the same way
// into the client's reply ring.
//
// One ring per (client, server) pair and direction: kRingSlots slots of
// kRingSlotBytes. A slot holds [u32 length][u32 zero][the message as it
// would travel otherwise: RpcReq + request bytes, or MsgHeader (kRpcReply)
// + reply bytes]. The immediate says which slot, and for a request which
// function: kImmRing | slot << 16 | function id; a reply sets kImmReply and
// no function. A call takes a free slot of its server's ring (a bit of
// `free`); the same slot of the client's reply ring gets its reply, and the
// slot is free again once the reply (by ring or, when it does not fit or a
// worker thread or server loop answers, by message) has been handled. A
// reply that never comes (its connection broke before the request landed)
// keeps its slot: calls then use messages, never wait for a slot.
//
// Set-up is one exchange of messages, after the first call to a server
// (which goes as a message first): the client makes its reply ring and
// sends kRpcRingReq (its key); the server makes the client's request ring
// and answers kRpcRingOffer (its key). Calls meanwhile go as messages.
// Rings live as long as the engine and are reused by the next node in the
// same node slot; they are forgotten (made unusable) when their node is
// declared down or a newer node takes its slot.
//
// Thread contract: set-up and forget take the side's mutex; the hot path
// reads `state` (acquire) and then the fields it publishes, and takes slots
// with one atomic operation on `free`.
#pragma once

#include <atomic>
#include <bit>
#include <cassert>
#include <cstdint>
#include <memory>
#include <mutex>

#include "proto/request.h"
#include "transport/transport.h"

namespace lt::proto {

inline constexpr uint32_t kRingSlots = 32;
inline constexpr uint32_t kRingSlotBytes = 4096;
inline constexpr uint32_t kRingPrefix = 8;  // u32 length, u32 zero
inline constexpr uint32_t kImmRing = 1u << 31, kImmReply = 1u << 30;
inline constexpr uint32_t kImmSlotShift = 16, kImmSlotMask = 0x3f;

inline constexpr uint32_t ring_imm(bool reply, uint32_t slot, uint32_t func) {
  return kImmRing | (reply ? kImmReply : 0) | (slot << kImmSlotShift) | (reply ? 0 : func);
}

/// One side of a pair's rings, kept per peer node slot.
struct RingSide {
  enum State : uint8_t { kNone, kAsked, kReady };
  std::mutex mu;  // set-up and forget
  std::atomic<uint8_t> state{kNone};
  std::atomic<transport::NodeId> node{0};  // the peer it is for
  transport::Transport* via = nullptr;     // made `mine`; calls use the ring only over it
  transport::MemRegion mine{};             // client: the reply ring; server: the request ring
  std::atomic<uint64_t> theirs{0};         // the peer's ring key (0: not known)
  // Client side only: free slots (a bit each) and the call in each slot.
  std::atomic<uint64_t> free{(uint64_t{1} << kRingSlots) - 1};
  std::atomic<ReqId> slot_req[kRingSlots] = {};

  /// A free slot, or -1.
  int take() {
    uint64_t f = free.load(std::memory_order_acquire);
    while (f != 0) {
      const int s = __builtin_ctzll(f);
      if (free.compare_exchange_weak(f, f & ~(uint64_t{1} << s), std::memory_order_acq_rel)) {
        return s;
      }
    }
    return -1;
  }
  void give(int s) { free.fetch_or(uint64_t{1} << s, std::memory_order_acq_rel); }
  std::byte* slot(uint32_t s) const { return mine.addr + uint64_t{s} * kRingSlotBytes; }
};

/// The rings of every peer, as client (out) and as server (in).
class RpcRings {
 public:
  /// `slots`: a power of two (a mask, not a division, per lookup).
  explicit RpcRings(transport::NodeId slots)
      : mask_(slots - 1), out_(new Ptr[slots]), in_(new Ptr[slots]) {
    assert(std::has_single_bit(slots));
  }

  /// The side for `node`, made on first use; never null.
  RingSide& out(transport::NodeId node) { return get(out_, node); }
  RingSide& in(transport::NodeId node) { return get(in_, node); }
  /// The side for `node` if it was ever made, else null.
  RingSide* find_out(transport::NodeId node) const { return find(out_, node); }
  RingSide* find_in(transport::NodeId node) const { return find(in_, node); }
  /// `node` is gone (down, or its slot taken by a newer node): its rings
  /// stop being used; their memory stays for the slot's next node.
  void forget(transport::NodeId node);
  /// Makes a side unusable with every slot free (its mutex held).
  static void reset(RingSide& s);

 private:
  using Ptr = std::atomic<RingSide*>;
  RingSide& get(std::unique_ptr<Ptr[]>& t, transport::NodeId node);
  RingSide* find(const std::unique_ptr<Ptr[]>& t, transport::NodeId node) const {
    return t[node & mask_].load(std::memory_order_acquire);
  }
  const transport::NodeId mask_;
  std::unique_ptr<Ptr[]> out_, in_;
  std::mutex make_mu_;
  std::vector<std::unique_ptr<RingSide>> owned_;
};

}  // namespace lt::proto
