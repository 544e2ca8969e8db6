// proto wire messages carried in transport kData frames. Fixed-layout,
// little-endian structs copied with memcpy; decode() checks the version, the
// opcode and the exact length before any field is used.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>

#include "common/cpu_hint.h"
#include "common/status.h"

namespace lt::proto {

inline constexpr uint8_t kProtoVersion = 2;

enum class MsgOp : uint8_t {
  kReadReq = 1,
  kWriteReq = 2,
  kMemsetReq = 3,
  kMemcpyReq = 4,  // both LMRs on the receiving node
  kAllocReq = 5,
  kFreeReq = 6,
  kMapReq = 7,
  kAtomicReq = 8,
  kRpcReq = 9,         // RpcReq + the request bytes
  kMsgEager = 10,      // MsgEager + the message bytes
  kMsgRts = 11,        // MsgRts: a rendezvous message is waiting at the sender
  kMsgPull = 12,       // MsgPull: the receiver has a buffer; send the data
  kMsgCredit = 13,     // MsgCredit: the receiver consumed messages
  kMsgStaged = 14,     // MsgStaged: a staged rendezvous message was read
  kRpcRingReq = 15,    // RpcRingMsg: a client's reply ring (rpc/rpc_ring.h)
  kRpcRingOffer = 16,  // RpcRingMsg: the server's request ring for that client
  kRevokeReq = 17,     // RevokeReq: the master freed an LMR the receiver mapped
  kMsgPulled = 18,     // MsgHeader: the receiver read its part of a split rendezvous
  kReply = 64,         // generic reply: MsgHeader (+ read data)
  kAllocReply = 65,
  kMapReply = 66,
  kAtomicReply = 67,
  kRpcReply = 68,
  kMsgData = 69,    // MsgHeader (req_id: the receiver's recv) + the rendezvous data
  kMsgPlaced = 70,  // MsgPlaced: the rendezvous data was written into the receiver's buffer
};

/// LMR rights, as in lt.h.
inline constexpr uint32_t kRightRead = 1, kRightWrite = 2, kRightAtomic = 4, kRightAdmin = 8;
inline constexpr uint32_t kAllRights = 15;

struct MsgHeader {
  uint8_t version;  // kProtoVersion
  uint8_t op;       // MsgOp
  uint16_t flags;   // kFlagCreditNow on a message (eager, RTS, data, placed), else zero
  int32_t status;   // replies: lt::Code; requests: zero
  uint64_t req_id;  // requester's request id, echoed by the reply
};
static_assert(sizeof(MsgHeader) == 16);

/// How a request names an LMR at its owner. Never leaves the engines.
struct LmrRef {
  uint64_t key;     // owner's LMR table key (slot, generation, tag)
  uint64_t cap;     // siphash(LMR secret, key, rights)
  uint32_t rights;  // rights the capability grants
  uint32_t pad;     // zero
};
static_assert(sizeof(LmrRef) == 24);

struct RangeReq {  // kReadReq, kWriteReq (+ len bytes of data), kMemsetReq
  MsgHeader h;
  LmrRef lmr;
  uint64_t offset;
  uint64_t len;
  uint32_t value;  // kMemsetReq: the byte value; else zero
  uint32_t pad;
};
static_assert(sizeof(RangeReq) == 64);

struct MemcpyReq {
  MsgHeader h;
  LmrRef dst;
  LmrRef src;
  uint64_t dst_offset;
  uint64_t src_offset;
  uint64_t len;
};
static_assert(sizeof(MemcpyReq) == 88);

struct AllocReq {
  MsgHeader h;
  uint64_t size;
};
static_assert(sizeof(AllocReq) == 24);

struct AllocReply {
  MsgHeader h;
  uint64_t key;
  uint64_t secret0;  // the LMR's capability key, kept by its master only
  uint64_t secret1;
  uint64_t size;
  uint64_t rkey;           // the owner's memory transport's region key (Mapping::rkeys[0])
  uint64_t rkey_exported;  // its exporter's key for it (Mapping::rkeys[1]); 0: none
};
static_assert(sizeof(AllocReply) == 64);

struct FreeReq {
  MsgHeader h;
  LmrRef lmr;
};
static_assert(sizeof(FreeReq) == 40);

struct RevokeReq {  // from the LMR's master; answered by kReply
  MsgHeader h;
  uint32_t owner;  // the LMR's owner and its key there
  uint32_t pad;    // zero
  uint64_t key;
};
static_assert(sizeof(RevokeReq) == 32);

inline constexpr size_t kMaxName = 128;

struct MapReq {  // + name_len bytes of name
  MsgHeader h;
  uint32_t rights;
  uint32_t name_len;  // 1..kMaxName
};
static_assert(sizeof(MapReq) == 24);

struct MapReply {
  MsgHeader h;
  uint32_t owner;
  uint32_t rights;
  uint64_t size;
  LmrRef lmr;
  uint64_t rkey;  // as AllocReply's
  uint64_t rkey_exported;
};
static_assert(sizeof(MapReply) == 72);

enum class AtomicKind : uint32_t { kFetchAdd = 1, kCompareSwap = 2 };

struct AtomicReq {
  MsgHeader h;
  LmrRef lmr;
  uint64_t offset;   // 8-byte aligned
  uint64_t operand;  // fetch-add: the addend; compare-swap: the new value
  uint64_t compare;  // compare-swap: the expected value; else zero
  uint32_t kind;     // AtomicKind
  uint32_t pad;      // zero
};
static_assert(sizeof(AtomicReq) == 72);

struct AtomicReply {
  MsgHeader h;
  uint64_t old;  // the word's value before the operation
};
static_assert(sizeof(AtomicReply) == 24);

/// An RPC request. The 32-bit immediate of LITE's write-with-immediate
/// (function id, ring slot) travels here on stream transports.
struct RpcReq {
  MsgHeader h;
  uint32_t func;  // function id (0..65535)
  uint32_t slot;  // the caller's ring slot at the server (credit index)
};
static_assert(sizeof(RpcReq) == 24);

/// Ring set-up (rpc/rpc_ring.h): the sender's ring key and geometry.
struct RpcRingMsg {
  MsgHeader h;  // req_id unused (zero)
  uint64_t rkey;
  uint32_t slots;
  uint32_t slot_bytes;
};
static_assert(sizeof(RpcRingMsg) == 32);

struct MsgEager {
  MsgHeader h;       // req_id unused (zero)
  uint32_t port;     // destination port
  uint32_t credits;  // message credits returned to the receiver (piggybacked MsgCredit)
};
static_assert(sizeof(MsgEager) == 24);

struct MsgRts {
  MsgHeader h;          // req_id: the sender's request, named again by MsgPull
  uint32_t port;        // destination port
  uint32_t credits;     // message credits returned to the receiver (piggybacked MsgCredit)
  uint64_t len;         // message length
  uint64_t stage_rkey;  // non-zero: the message is staged in the sender's shm memory at
  uint64_t stage_off;   // stage_off (read it natively, then MsgStaged); 0: MsgPull it
  // src_rkey != 0: the message itself, readable natively at src_addr, so the
  // receiver may read part of it while the sender places the rest (a split
  // rendezvous: rndv_split.cc); the receiver then says MsgPulled.
  uint64_t src_addr;
  uint64_t src_rkey;
};
static_assert(sizeof(MsgRts) == 64);

/// Where a rendezvous message can be read natively (MsgRts::src_*); rkey 0:
/// nowhere (no split).
struct RndvSrc {
  uint64_t addr = 0;
  uint64_t rkey = 0;
};

struct MsgStaged {
  MsgHeader h;         // req_id unused (zero)
  uint64_t stage_off;  // the staged message the receiver has read: the sender frees it
};
static_assert(sizeof(MsgStaged) == 24);

struct MsgPull {
  MsgHeader h;        // req_id: the sender's request (from MsgRts)
  uint64_t recv_id;   // the receiver's recv request; MsgData/MsgPlaced carry it back
  uint64_t dst_addr;  // dst_rkey != 0: the receiver's buffer, registered for placement
  uint64_t dst_rkey;  // 0: send the data in MsgData
  // Non-zero (only when the MsgRts offered src_rkey): place just the first
  // head_len bytes; the receiver reads the rest itself, then says MsgPulled.
  uint64_t head_len;
};
static_assert(sizeof(MsgPull) == 48);

struct MsgPlaced {
  MsgHeader h;   // req_id: the receiver's recv request
  uint64_t len;  // bytes written at the MsgPull's dst_addr
};
static_assert(sizeof(MsgPlaced) == 24);

struct MsgCredit {
  MsgHeader h;     // req_id unused (zero)
  uint32_t count;  // messages consumed since the last credit message (>= 1)
  uint32_t pad;    // zero
};
static_assert(sizeof(MsgCredit) == 24);

/// Checks version and opcode of the message in `b` and that it is at least
/// as long as its fixed part (exactly, for ops without a tail). kMalformed
/// otherwise.
Status decode_header(std::span<const std::byte> b, MsgHeader* out);

template <typename T>
inline T load(std::span<const std::byte> b) {
  T v;
  std::memcpy(&v, b.data(), sizeof(T));
  return v;
}

/// The sender is past half its tenant's message-credit cap: the receiver
/// returns the message's credit (and all it owes) as soon as it consumes it,
/// not in a batch. Allowed on kMsgEager, kMsgRts, kMsgData and kMsgPlaced.
inline constexpr uint16_t kFlagCreditNow = 1;
/// Bits 4-15 of every header's flags: the CPU the sender wrote it on, as a
/// hint (common/cpu_hint.h; 0: unknown, and so is a CPU from 4095 on). A
/// waiter for a reply from a peer on this machine then knows whether a
/// yield of its core can help that peer (proto/yield_pacer.h).
inline constexpr unsigned kFlagCpuShift = 4;
inline constexpr uint16_t kFlagCpuMask = 0xfff0;

inline uint16_t cpu_flag(CpuHint cpu) {
  return cpu < (1u << (16 - kFlagCpuShift)) ? static_cast<uint16_t>(cpu << kFlagCpuShift) : 0;
}
inline CpuHint cpu_of(const MsgHeader& h) { return h.flags >> kFlagCpuShift; }

inline MsgHeader make_header(MsgOp op, uint64_t req_id, Code status = Code::kOk) {
  return MsgHeader{kProtoVersion, static_cast<uint8_t>(op), cpu_flag(this_cpu_hint()),
                   static_cast<int32_t>(status), req_id};
}

}  // namespace lt::proto
