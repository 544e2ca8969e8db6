// The transport contract (docs/ARCHITECTURE.md §6, docs/STYLE.md §2). A transport moves bytes
// between this engine and peer engines and says what it can do in Caps; proto/ uses native
// one-sided operations where Caps allow them and emulates them with messages where they do not.
// Transport implementations are private to transport/<impl>/; proto/ and above see only this
// header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/cpu_hint.h"
#include "common/mac.h"
#include "common/status.h"
#include "common/time.h"

namespace lt::transport {

using NodeId = uint32_t;
inline constexpr NodeId kNoNode = 0;
/// A node id is a slot and a generation: id = generation x kNodeSlots + slot,
/// slot 1 to kNodeSlots - 1. At most one live node holds a slot, and a later
/// node in a slot has a higher id, so per-node state is kept per slot, with
/// the id that holds it (the membership layer hands the ids out).
inline constexpr uint32_t kNodeSlots = 1024;
inline constexpr uint32_t node_slot(NodeId id) { return id % kNodeSlots; }
inline constexpr uint32_t node_gen(NodeId id) { return id / kNodeSlots; }

struct Caps {  // read once per peer; values the device granted
  bool reliable = false;
  bool one_sided = false;
  bool write_imm = false;
  bool atomics64 = false;
  /// Native kFetchAdd/kCmpSwap are the device's, not CPU instructions (rc).
  /// Then `device_atomics_global` says whether they are atomic with respect
  /// to the owner CPU's atomics on the same word too (atomic_cap GLOB).
  /// Without that (HCA, as most RNICs and Soft-RoCE report), an owner that
  /// lets peers use native atomics on its memory does its own by
  /// local_atomic(), through the device (proto/rma/atomics.cc).
  bool device_atomics = false;
  bool device_atomics_global = false;
  bool needs_registration = false;
  /// kWrMore helps: held small messages go out together in one system call
  /// (tcp). Senders hold messages back only where it does. Also the
  /// transports that honour kWrDeferred (frames held until flush()).
  bool gathers = false;
  /// kWrite may target memory the peer registered with register_memory():
  /// RemoteRef::addr is then the owner's virtual address and RemoteRef::rkey
  /// the rkey register_memory returned. The written bytes are in place before
  /// any message posted later on the same endpoint is delivered to the owner.
  /// Used for single-copy rendezvous. How:
  ///  - shm: process_vm_writev at post; a refusal fails the post (kPerm, or
  ///    kOutOfBounds where nothing is mapped), the connection stays.
  ///  - tcp: a kWrite frame the owner receives straight into the memory. The
  ///    owner checks rkey, kRemoteWrite and bounds when it arrives; a write it
  ///    refuses writes nothing and breaks the connection (kPeerLost at both
  ///    ends), like an RDMA remote access error.
  ///  - verbs (later): RDMA WRITE to an MR.
  bool placement = false;
  /// With placement: rendezvous messages below this size go through the
  /// sender's stage instead where the transport also reads natively (shm:
  /// shm.cma_min_bytes); 0 places them all.
  uint64_t place_min_bytes = 0;
  /// With placement and native reads of peer memory registered for
  /// kRemoteRead (shm: process_vm_readv): a placed rendezvous of at least
  /// this size is split, the receiver reading the second half from the
  /// sender's buffer while the sender writes the first (two CPUs copy at
  /// once; shm.split_min_bytes). 0: never split.
  uint64_t split_min_bytes = 0;
  /// Posts honour kWrByRef (tcp): a large write the socket cannot take now
  /// is sent later from the caller's memory, not copied, and reported by a
  /// kSendDone when sent. Worth it above a few tens of KiB.
  bool send_by_ref = false;
  /// A one-sided op with an rkey this transport never issued (or of freed
  /// memory), or without the rights the region was made with, is refused at
  /// post (kBadHandle, kPerm) and the connection stays (shm: the rkey names
  /// a region the sender looks up). Without it (rc), such an op fails with
  /// kPerm and breaks the connection (kPeerLost at both ends), as an RDMA
  /// remote access error does; proto checks handles, rights and bounds
  /// before it posts, so only a bug gets there. Bounds are checked at post
  /// either way.
  bool rkey_checked = false;
  /// A post of [kRead flagged kWrGuard, kRead] reads both in one round trip
  /// and honours the guard (see kWrGuard). Without it the guard flag is
  /// ignored: the caller reads the guard word first and checks it itself.
  bool guarded_reads = false;
  /// A post of [kWrite, kFetchAdd or kCmpSwap; then an 8-byte kRead flagged
  /// kWrGuard] does the op and then reads the guard word, in one round trip
  /// and in that order at the target (see kWrGuard). Without it the caller
  /// reads the guard word first and starts the op only when it matched.
  bool guard_after = false;
  /// A post of [an 8-byte kRead flagged kWrGuard, then one op of any kind]
  /// reads the word first and does the op only when it matched, before post
  /// returns (see kWrGuard): one post where the caller would make two. For a
  /// transport whose poster does each op itself, in order (shm). Implies
  /// guarded_reads.
  bool guard_before = false;
  /// Endpoint::view maps a peer's region for the caller's own loads, stores
  /// and atomics (shm): one-sided ops with no post at all.
  bool views = false;
  /// Nonzero: kWriteImm of up to this many bytes is posted like a message
  /// (rc: one WRITE_WITH_IMM): copied or inline, refused for back-pressure
  /// or queued (kWrMustQueue) as a kSend is, and as cheap as one. proto
  /// sends RPC calls and replies into rings with it.
  uint32_t async_write_imm_max = 0;
  /// connect() does not wait for the peer (ud: the stream opens with its
  /// first datagram, no round trip). A peer that is not there is reported
  /// by a kPeerLost within the transport's peer timeout, not by connect.
  bool lazy_connect = false;
  uint32_t max_inline = 0;
  uint32_t max_msg = 0;  // largest message payload (sum of the sges) a post accepts
  /// Messages up to this size go eager over this transport (copied at both
  /// ends); larger ones by rendezvous. From the transport's config.
  uint32_t eager_max = 0;
  uint32_t max_batch = 0;
};

enum class Op : uint8_t { kSend, kWrite, kWriteImm, kRead, kFetchAdd, kCmpSwap };

struct Sge {
  const std::byte* addr = nullptr;
  uint32_t len = 0;
  uint32_t lkey = 0;
};

/// The target of a one-sided op (kWrite, kWriteImm, kRead, kFetchAdd,
/// kCmpSwap); never leaves the engine. What `addr` means depends on the
/// transport, as on verbs it is what the owner's registration says:
///  - shm: `rkey` is MemRegion::rkey of memory the owner made with
///    alloc_memory(), and `addr` is a byte OFFSET into that region (0 is its
///    first byte), not a pointer. [addr, addr + len) must lie inside it.
///  - rc: `addr` is a byte OFFSET into the region as on shm; `rkey` names
///    the owner's pool registration and the region's place and size in it
///    (transport/verbs/mem_pool.h), so bounds are checked at post.
///  - placement (Caps::placement; kWrite, on shm also kRead): `rkey` from the
///    owner's register_memory() of ordinary memory and `addr` the owner's
///    VIRTUAL ADDRESS inside that registration; [addr, addr + len) must lie
///    inside it. tcp: the owner checks that when the write arrives (a refusal
///    breaks the connection); shm: the kernel refuses only unmapped memory.
struct RemoteRef {
  uint64_t addr = 0;
  uint64_t rkey = 0;
};

inline constexpr uint8_t kWrSignaled = 1;  // WorkRequest::flags: report a kSendDone
// WorkRequest::flags: never refuse for back-pressure (replies, which must not
// be dropped and are bounded by the requests that caused them).
inline constexpr uint8_t kWrMustQueue = 2;
// WorkRequest::flags: more posts to this peer follow at once (the poller's
// replies to a batch of requests). A stream transport may hold a small
// message and send it with the next post without the flag, or at flush():
// one system call for the batch. Ignored where it does not help.
inline constexpr uint8_t kWrMore = 4;
// WorkRequest::flags on an 8-byte kRead: the word read must equal `compare`.
//  - Posted first in one post with one more kRead (Caps::guarded_reads),
//    or with one more op of any kind (Caps::guard_before): the word is read
//    with or before the op; when it differs the post fails with kBadHandle,
//    the op is not done and a read's destinations are left untouched (what
//    was read there may belong to memory reused since: it never reaches
//    them).
//  - Posted second, after one kWrite, kFetchAdd or kCmpSwap
//    (Caps::guard_after): the op is done first and the word read after it;
//    when the word differs the post fails with kBadHandle, but the op has
//    happened. The caller may post this only where the op cannot reach
//    memory reused since (proto: the word matched moments ago and the owner
//    keeps freed memory out of use for longer).
inline constexpr uint8_t kWrGuard = 8;
/// How recently a guard word must have matched for proto to post an op with
/// its guard after it (Caps::guard_after). A transport with guard_after
/// keeps freed memory out of use for at least a second, and an op it posted
/// reaches the target or fails within its retry time (rc: 7 retries of a
/// 67 ms ACK timeout, about half a second), so such an op never lands in
/// memory reused since the guard matched.
inline constexpr uint64_t kGuardFreshNs = 100'000'000;
// WorkRequest::flags, on every request of a post: the poster may stay
// preempted for long (a thread under SCHED_IDLE, qos/cpu_policy.h), so it
// must not become the one thread that writes a shared stream, which every
// other poster to that peer would then wait behind. A stream transport
// queues the frames, as it holds kWrMore frames (back-pressure as for any
// post), and sends them at its next flush(): the poster must see that the
// poller makes a pass soon. Honoured where Caps::gathers, ignored elsewhere.
inline constexpr uint8_t kWrDeferred = 16;
// WorkRequest::flags, with kWrSignaled, where Caps::send_by_ref: the sges
// stay unchanged and mapped until this request's kSendDone, so bytes the
// socket cannot take now are queued by reference instead of copied. The
// kSendDone then comes once its last byte left (a failure: when the
// connection broke, a kPeerLost at once). Post at most one such signaled
// request per post; others in the post are reported with it. Ignored where
// the transport has no send_by_ref (the request is reported as usual).
inline constexpr uint8_t kWrByRef = 32;
inline constexpr int kMaxSge = 2;

/// Trivially copyable, preallocated by the caller. By op:
///  - kSend: sge[0..num_sge) gathered into one message; imm is not carried.
///  - kWriteImm: on transports without one_sided (tcp), a message like kSend
///    that carries imm. With one_sided (shm), a one-sided kWrite of the sges
///    to `remote` followed by a zero-length kRecv carrying imm at the peer,
///    seen after the written bytes (verbs WRITE_WITH_IMM). With
///    Caps::async_write_imm_max, posted like a kSend (see there).
///  - kWrite: the sges are written to `remote`; kRead: `remote` is read into
///    the sges (they are destinations; sum of their lengths is the size).
///    With Caps::placement but not one_sided (tcp), kWrite is the only
///    one-sided op: it is complete once posted (the sges may be reused, a
///    signaled one reports kSendDone; with kWrByRef, not until then),
///    produces no completion at the owner, and its bytes are in place
///    before later messages on the endpoint.
///  - kFetchAdd (operand) and kCmpSwap (compare, operand): on the 8-byte
///    aligned word at `remote`; the old value is written to sge[0] (len >= 8).
struct WorkRequest {
  Op op = Op::kSend;
  uint8_t flags = 0;
  uint8_t num_sge = 0;
  uint32_t imm = 0;
  uint64_t wr_id = 0;
  Sge sge[kMaxSge];  // gathered in order into one message
  RemoteRef remote;
  uint64_t compare = 0, operand = 0;  // atomics only
};

enum class CqKind : uint8_t {
  kSendDone,  // a signaled work request finished (wr_id)
  kRecv,      // a message arrived from `peer`: rx[0, len), imm
  kPeerLost,  // the connection to `peer` broke; every op in flight to it failed
};

struct Completion {  // rx valid until release_rx()
  uint64_t wr_id = 0;
  Status status;
  CqKind kind = CqKind::kRecv;
  NodeId peer = kNoNode;
  uint32_t len = 0, imm = 0;
  const std::byte* rx = nullptr;
  // Where the sender ran when it sent this (common/cpu_hint.h); transports
  // that cannot tell (all but shm) leave it unknown.
  CpuHint src_cpu = kCpuUnknown;
};

/// One transport's address for a peer: the transport's name() and what its
/// local_address() returned on that peer.
struct PeerAddress {
  std::string transport;
  std::string address;
};

/// A peer as the address book knows it. Membership passes the addresses
/// through without reading them: each transport picks its own by name.
struct PeerInfo {
  NodeId node = kNoNode;
  std::string host_id;  // net::host_id() of the peer: same boot and network namespace
  std::vector<PeerAddress> addresses;
  /// The address the peer published for `transport`; empty when it has none.
  std::string_view address(std::string_view transport) const {
    for (const PeerAddress& a : addresses) {
      if (a.transport == transport) return a.address;
    }
    return {};
  }
};

/// The address list as it travels in the membership record: one
/// "transport=address" per transport, separated by spaces. Neither part may
/// hold a space, and the name no '='.
std::string format_addresses(const std::vector<PeerAddress>& list);
/// The inverse; tokens without '=' or with an empty name are skipped.
std::vector<PeerAddress> parse_addresses(std::string_view text);

struct MemRegion {
  std::byte* addr = nullptr;
  size_t len = 0;
  uint32_t lkey = 0;
  uint64_t rkey = 0;
};

/// Rights on registered or allocated memory; a bit set (combine with |).
enum class Access : uint8_t { kLocal = 0, kRemoteRead = 1, kRemoteWrite = 2, kRemoteAtomic = 4 };
constexpr Access operator|(Access a, Access b) {
  return static_cast<Access>(static_cast<uint8_t>(a) | static_cast<uint8_t>(b));
}
/// True when `set` includes every right in `want`.
constexpr bool has_access(Access set, Access want) {
  return (static_cast<uint8_t>(set) & static_cast<uint8_t>(want)) == static_cast<uint8_t>(want);
}
inline constexpr Access kRemoteAll =
    Access::kRemoteRead | Access::kRemoteWrite | Access::kRemoteAtomic;

class MappedRegion;  // mapped_region.h

class Endpoint {  // one peer on one transport; thread-safe
 public:
  virtual ~Endpoint() = default;
  /// One doorbell/writev. Accepts a prefix of wrs and returns its length; a
  /// short count is back-pressure: poll, then retry. Never blocks. The
  /// memory an accepted kSend gathers may be reused as soon as post returns.
  /// kPeerDown once the connection is broken; kUnsupported for ops not in Caps.
  virtual Result<size_t> post(std::span<const WorkRequest> wrs) = 0;
  /// A small unsignaled kSend of `hdr` then `data`, taken whole now or not
  /// at all, with no WorkRequest built: the short-message entry UCT has
  /// beside its general one (am_short). False: not taken (no room now, a
  /// dead connection, too big for one record, or no such path on this
  /// transport); post() it instead, with the flags it would have had
  /// (kWrMustQueue), which says why or takes it. A transport that gathers
  /// is offered no message its poster would hold (kWrMore).
  virtual bool post_short(const void* hdr, size_t hlen, const void* data, size_t dlen) {
    (void)hdr, (void)hlen, (void)data, (void)dlen;
    return false;
  }
  /// post_short for a message that keeps no order with this endpoint's
  /// other messages (an RPC call or reply): a transport with a separate lane
  /// for such messages (shm) may post it there, so that it never waits for a
  /// lock a bulk sender holds, and may deliver it ahead of messages posted
  /// before it. Elsewhere the same as post_short.
  virtual bool post_express(const void* hdr, size_t hlen, const void* data, size_t dlen) {
    return post_short(hdr, hlen, data, dlen);
  }
  virtual NodeId peer() const = 0;
  virtual bool alive() const = 0;
  /// Sends what posts with kWrMore left held on this endpoint now (a sender
  /// that cannot count on the poller's flush()). Cheap when nothing is held.
  virtual void flush() {}
  /// With Caps::views: the peer's region `rkey` names, mapped here, for ops
  /// done by the caller's own loads, stores and atomics (MappedRegion::apply,
  /// which checks rights and bounds as post does) while it is live(). Null:
  /// none (no such region, the connection is down, no Caps::views); post the
  /// op instead, which says why. Not for the hot path: callers keep a view.
  virtual std::shared_ptr<const MappedRegion> view(uint64_t rkey) {
    (void)rkey;
    return nullptr;
  }
};

/// What a transport holds now (LT_stats).
struct TransportStats {
  uint64_t connections = 0;        // live connections to peers
  uint64_t queue_pairs = 0;        // rc: QPs in use (K per connection, and any still closing)
  uint64_t spare_queue_pairs = 0;  // rc: QPs made ahead of need, not connected yet
  uint64_t registrations = 0;      // rc: memory registrations with the device
  uint64_t retransmits = 0;        // ud: datagrams sent again (timeouts, reported holes)
  uint64_t window_cuts = 0;        // ud: congestion window cuts (marks, losses, timeouts)
  uint64_t mark_cuts = 0;          // ud: those cuts that answered a receiver's mark
  uint64_t marks_sent = 0;         // ud: acknowledgements this node marked (short of buffers)
  uint64_t qp_resets = 0;          // ud: times its QP was found in error and put back in service
  uint64_t send_slots = 0;         // ud: registered send slots, shared by all peers
  uint64_t send_slots_free = 0;    // ud: of those, neither held by a sender nor in the device
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;
  virtual const Caps& caps() const = 0;
  /// The address peers use to reach this engine, published in the address book.
  virtual std::string local_address() const = 0;
  /// Called once after the node has joined; until then inbound peers are
  /// refused. `hello_key` (derived from the cluster secret) authenticates the
  /// hellos of a transport that crosses a network.
  virtual void set_identity(NodeId self, uint64_t cluster_token, const Mac& hello_key) = 0;
  /// An endpoint to `peer`, reusing an existing connection in either
  /// direction. Thread-safe. kPeerDown, kTimedOut on failure.
  virtual Result<std::unique_ptr<Endpoint>> connect(const PeerInfo& peer, Deadline d) = 0;
  /// Makes `mem` known to the transport with rights `a`. With
  /// Caps::placement, peers may kWrite into it (if `a` has kRemoteWrite)
  /// through the returned rkey until deregister_memory (tcp: a fresh nonzero
  /// rkey per registration, never reused; shm: an rkey naming only the
  /// rights). The caller keeps `mem` alive until then. Thread-safe.
  virtual Result<MemRegion> register_memory(std::span<std::byte> mem, Access a) = 0;
  /// Releases a registration from register_memory (the MemRegion it
  /// returned, unchanged); a placement write that arrives for it afterwards
  /// is refused. tcp: once it returns, no byte of the region is written (the
  /// rest of a write being placed is refused too). The default does nothing:
  /// shm keeps no registration state, so its owner must not reuse memory a
  /// peer may still write (proto's kStPlacing receives). Thread-safe; not to
  /// be called from inside poll().
  virtual void deregister_memory(const MemRegion& r) { (void)r; }
  /// `len` bytes (rounded up to pages), zero-filled, that peers can reach
  /// with one-sided ops when the transport has Caps::one_sided: on shm this
  /// is the only memory with a usable rkey (register_memory gives rkey 0).
  /// The default, for transports without native one-sided ops, is an
  /// anonymous mapping with lkey = rkey = 0. Thread-safe. kInvalidArg for
  /// len 0, kNoMemory/kSys when the system refuses. Free with free_memory.
  virtual Result<MemRegion> alloc_memory(size_t len, Access a);
  /// Releases a region from alloc_memory of this transport (the MemRegion it
  /// returned, unchanged). Thread-safe. Peers that still access it after this
  /// touch an orphaned copy, never memory of this process that is reused.
  virtual void free_memory(const MemRegion& r);
  /// Makes `mem`, a region another transport's alloc_memory made, reachable
  /// by this transport's one-sided ops as its own alloc_memory regions are
  /// (the rkey returned, addresses offsets into `mem`, bounds checked at
  /// post): a node keeps its LMRs in one transport's memory (shm) and also
  /// serves peers on other hosts natively by another (rc). Until
  /// unexport_memory; the caller keeps `mem` alive. Thread-safe.
  /// kUnsupported (the default) where the transport has no native memory.
  virtual Result<MemRegion> export_memory(std::span<std::byte> mem, Access a);
  /// Ends an export_memory (the MemRegion it returned, unchanged).
  virtual void unexport_memory(const MemRegion& r) { (void)r; }
  /// A kFetchAdd or kCmpSwap on this node's own memory, done by the device
  /// (Caps::device_atomics): `wr.remote` names a region this transport made
  /// or exported, as a peer's op would. Done when this returns; the old
  /// value lands in wr.sge[0]. Thread-safe. kUnsupported by default.
  virtual Status local_atomic(const WorkRequest& wr) {
    (void)wr;
    return Code::kUnsupported;
  }
  /// Non-blocking. Not thread-safe: one poller at a time (proto serializes).
  /// Returns up to out.size() completions; a full span means call again.
  virtual size_t poll(std::span<Completion> out) = 0;
  /// Hands back the rx buffers of `done`. The engine releases every kRecv
  /// of one poll() before it polls again.
  virtual void release_rx(std::span<const Completion> done) = 0;
  /// Sends what posts with kWrMore left held. Called by the poller after
  /// handling a batch; cheap when nothing is held.
  virtual void flush() {}
  /// Readable when poll() has work, or while the transport is not armed
  /// (nothing would wake a sleeper). Block on it after prepare_sleep().
  virtual int wait_fd() const = 0;
  /// The poller is about to block on wait_fd(): arm what wakes it (a
  /// completion channel, a peer's bell). A transport whose arming costs its
  /// peers or its device work per completion arms only here, so a caller
  /// that spins and polls never pays for wake-ups nobody sleeps on; one
  /// that arms itself after a spin of empty polls need do nothing. Work
  /// found while arming leaves wait_fd() readable. The poller's, like poll().
  virtual void prepare_sleep() {}
  /// A sleep on wait_fd() just ended because it became readable: the next
  /// poll() must look at everything it may skip on a spinning caller's pass.
  /// Any thread.
  virtual void woken() {}
  /// What it holds now; any thread. The default counts nothing.
  virtual TransportStats stats() const { return {}; }
};

}  // namespace lt::transport
