// Layout of an shm connection segment and the records in its rings. Private to
// transport/shm/.
//
// One memfd segment per connection, created by the connector and mapped by
// both processes:
//
//   [0, 64)                 SegHeader
//   [64, 64 + 4 * 128)      RingCtrl[4]: ring 0 carries connector -> acceptor,
//                           ring 1 acceptor -> connector, lanes 0 and 1 the same
//   [kCtrlBytes, +R)        ring 0 bytes
//   [kCtrlBytes + R, +R)    ring 1 bytes
//   [kCtrlBytes + 2R, +L)   lane 0 bytes (L = kLaneBytes)
//   [kCtrlBytes + 2R + L, +L) lane 1 bytes
//
// A lane is a small ring of its own beside each main ring, with its own
// producer lock (ShmLane): small messages that keep no order with the rest
// (RPC calls and replies of threads that do not run idle) go there, so that
// they never wait for the main ring's lock while a bulk sender holds it. A
// lane carries only kMsg and kPad records.
//
// Each ring is single-producer / single-consumer. Positions are byte counts
// since the connection began (64-bit, never wrap); the byte at position p is
// at ring offset p & (R - 1). Records start at kRecAlign-aligned positions and
// never straddle the end of the ring: a kPad record fills the rest of the ring
// when the next record does not fit there.
//
// There is no shared head: a record is published by its own stamp. The
// producer writes the payload and the header fields, then stores the header's
// `stamp` = position ^ salt (release); the consumer polls the stamp where the
// next record will start and takes the record once it reads the stamp that
// position expects. So a small message costs the consumer one cache-line
// transfer (the record itself), not two (a head line, then the record). The
// salt (random, high bit set, in SegHeader) makes the stamp of position p
// differ from anything an earlier lap left at that offset: an older stamp
// carries an older position, and payload bytes would have to hold exactly
// p ^ salt. The consumer publishes `tail` once the bytes are no longer lent
// out. Control words and stamps are accessed only through std::atomic_ref
// (both processes map them; lock-free 64/32-bit atomics are address-free).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/cpu_hint.h"

namespace lt::transport::shm {

inline constexpr uint32_t kSegMagic = 0x6d73746c;  // "ltsm"
inline constexpr uint16_t kSegVersion = 3;
inline constexpr size_t kCtrlBytes = 4096;
inline constexpr size_t kRecAlign = 64;
inline constexpr uint32_t kMinRingBytes = 4096;
inline constexpr uint32_t kMaxRingBytes = 1u << 30;
inline constexpr uint64_t kMinWindow = 16u << 10;  // smallest share of shm.ring_budget_bytes
// Where a connection's records go while its consumer keeps up: the start of
// its share, cycled through (1024 small records), so a ping-pong reuses warm,
// resident lines instead of faulting in a fresh page every 64 records on its
// first lap of a 4 MiB ring. A consumer that lags widens it (ShmConn).
inline constexpr uint64_t kHotWindow = 64u << 10;
// Bytes of each lane: 512 records of one line (a small RPC), at most a
// quarter of it in one record.
inline constexpr uint32_t kLaneBytes = 32u << 10;

/// Bytes of a segment whose main rings have `ring_bytes` each.
constexpr size_t segment_bytes(uint32_t ring_bytes) {
  return kCtrlBytes + 2 * size_t{ring_bytes} + 2 * size_t{kLaneBytes};
}

/// Start of the segment; written once by the connector before it is shared.
struct SegHeader {
  uint32_t magic;       // kSegMagic
  uint16_t version;     // kSegVersion
  uint16_t reserved;    // zero
  uint32_t ring_bytes;  // R: bytes of each ring, a power of two
  uint32_t reserved2;   // zero
  uint64_t salt;        // stamps are position ^ salt; random, bit 63 set
  uint8_t pad[40];
};
static_assert(sizeof(SegHeader) == 64);

/// Control words of one ring, each written by one side on its own cache line.
struct RingCtrl {
  alignas(64) uint64_t tail;  // consumer: end of the released records
  // Wake-up requests, set by the side that is going to sleep and cleared by
  // the side that rings its eventfd (the bells travel with the segment):
  alignas(64) uint32_t want_data;  // consumer asleep: ring it after publishing a record
  uint32_t want_space;             // producer asleep with a backlog: ring it after releasing
};
static_assert(sizeof(RingCtrl) == 128);
static_assert(64 + 4 * sizeof(RingCtrl) <= kCtrlBytes);
static_assert(std::atomic_ref<uint64_t>::is_always_lock_free);
static_assert(std::atomic_ref<uint32_t>::is_always_lock_free);

enum class RecKind : uint8_t {
  kMsg = 1,        // a whole message: payload follows the header
  kPad = 2,        // filler to the end of the ring; the next record is at ring offset 0
  kFragFirst = 3,  // first piece of a message larger than one record; `total` is set
  kFrag = 4,       // next piece; the message is complete when the pieces sum to total
};

/// Header of every record; the payload follows it directly.
struct RecHeader {
  uint64_t stamp;  // position ^ salt, stored last: the record is published
  uint32_t len;    // payload bytes in this record (kPad: bytes after the header)
  uint32_t imm;    // kMsg, kFragFirst: the immediate (0 for kSend)
  uint32_t total;  // kFragFirst: bytes of the whole message; else 0
  uint8_t kind;    // RecKind
  uint8_t reserved;
  uint16_t cpu;  // the producer's CPU when it wrote the record, as a CpuHint (0: unknown)
};
static_assert(sizeof(RecHeader) == 24);
static_assert(offsetof(RecHeader, stamp) == 0);
inline constexpr size_t kRecHdr = sizeof(RecHeader);

/// Bytes a record with `payload` bytes occupies in the ring.
constexpr uint64_t record_bytes(uint64_t payload) {
  return (kRecHdr + payload + kRecAlign - 1) & ~uint64_t{kRecAlign - 1};
}

/// The handshake packet on the unix socket. The connector's hello carries
/// three descriptors (SCM_RIGHTS): the segment memfd, the connector's bell
/// and the acceptor's bell (eventfds). The acceptor answers with an ack and
/// no descriptors.
enum class HelloKind : uint16_t { kHello = 1, kAck = 2 };
struct Hello {
  uint32_t magic;          // kSegMagic
  uint16_t version;        // kSegVersion
  uint16_t kind;           // HelloKind
  uint32_t node;           // the sender's node id
  uint32_t ring_bytes;     // hello: R of the segment; ack: 0
  uint64_t cluster_token;  // the token from ltier-manager
};
static_assert(sizeof(Hello) == 24);

template <typename T>
inline std::atomic_ref<T> aref(T& v) {
  return std::atomic_ref<T>(v);
}

/// Producer: writes the header of the record at `at` but its stamp; the
/// payload goes in next, then the stamp publishes the record. Field by
/// field, straight from registers: a header built on the stack and copied
/// in stalled the copy's 16-byte load until the fields' narrower stores
/// reached the cache (store forwarding fails), on every record.
inline void write_record_header(std::byte* at, RecKind k, uint64_t len, uint32_t imm,
                                uint64_t total) {
  auto put = [](std::byte* p, auto v) { std::memcpy(p, &v, sizeof(v)); };
  put(at + offsetof(RecHeader, len), static_cast<uint32_t>(len));
  put(at + offsetof(RecHeader, imm), imm);
  put(at + offsetof(RecHeader, total), static_cast<uint32_t>(total));
  put(at + offsetof(RecHeader, kind), static_cast<uint8_t>(k));
  put(at + offsetof(RecHeader, reserved), uint8_t{0});
  put(at + offsetof(RecHeader, cpu), this_cpu_hint());
}

/// Producer: the full barrier between the stamp stores of a post and its
/// seq_cst load of want_data, which pairs with the consumer's seq_cst store
/// of want_data and load of the next stamp (one side sees the other).
/// `last_stamp` is the stamp written last. On x86 a locked add to this
/// thread's stack, as Linux's smp_mb() is: a locked instruction on the stamp
/// itself waited for the line the consumer polls to come back (two thirds of
/// a streaming post on Zen 5), and mfence costs more. Elsewhere, and under
/// TSan (whose model has no such fence, and gcc refuses
/// atomic_thread_fence there), a seq_cst read-modify-write of that stamp,
/// its value unchanged.
inline void stamp_barrier([[maybe_unused]] uint64_t& last_stamp) {
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
  asm volatile("lock orl $0, (%%rsp)" ::: "memory", "cc");
#else
  aref(last_stamp).fetch_or(0, std::memory_order_seq_cst);
#endif
}

/// Producer, after stamp_barrier: true when the consumer asked for a bell
/// (want_data set); the flag is cleared, so one bell answers one request.
inline bool take_bell_request(RingCtrl* ctrl) {
  uint32_t& w = ctrl->want_data;
  return aref(w).load(std::memory_order_seq_cst) != 0 &&
         aref(w).exchange(0, std::memory_order_seq_cst) != 0;
}

}  // namespace lt::transport::shm
