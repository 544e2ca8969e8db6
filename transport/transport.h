// The transport contract (STYLE.md section 2). A transport moves bytes between
// this engine and peer engines and says what it can do in Caps; proto/ uses
// native one-sided operations where Caps allow them and emulates them with
// messages where they do not. Transport implementations are private to
// transport/<impl>/; proto/ and above see only this header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "common/status.h"
#include "common/time.h"

namespace lt::transport {

using NodeId = uint32_t;
inline constexpr NodeId kNoNode = 0;

struct Caps {  // read once per peer; values the device granted
  bool reliable = false;
  bool one_sided = false;
  bool write_imm = false;
  bool atomics64 = false;
  bool needs_registration = false;
  uint32_t max_inline = 0;
  uint32_t max_msg = 0;  // largest message payload (sum of the sges) a post accepts
  uint32_t max_batch = 0;
};

enum class Op : uint8_t { kSend, kWrite, kWriteImm, kRead, kFetchAdd, kCmpSwap };

struct Sge {
  const std::byte* addr = nullptr;
  uint32_t len = 0;
  uint32_t lkey = 0;
};

struct RemoteRef {  // never leaves the engine
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
inline constexpr int kMaxSge = 2;

struct WorkRequest {  // trivially copyable, preallocated by the caller
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
};

struct PeerInfo {
  NodeId node = kNoNode;
  std::string tcp_address;  // host:port from the address book
  std::string host_id;
};

struct MemRegion {
  std::byte* addr = nullptr;
  size_t len = 0;
  uint32_t lkey = 0;
  uint64_t rkey = 0;
};

enum class Access : uint8_t { kLocal = 0, kRemoteRead = 1, kRemoteWrite = 2, kRemoteAtomic = 4 };

class Endpoint {  // one peer on one transport; thread-safe
 public:
  virtual ~Endpoint() = default;
  /// One doorbell/writev. Accepts a prefix of wrs and returns its length; a
  /// short count is back-pressure: poll, then retry. Never blocks. The
  /// memory an accepted kSend gathers may be reused as soon as post returns.
  /// kPeerDown once the connection is broken; kUnsupported for ops not in Caps.
  virtual Result<size_t> post(std::span<const WorkRequest> wrs) = 0;
  virtual NodeId peer() const = 0;
  virtual bool alive() const = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;
  virtual const Caps& caps() const = 0;
  /// The address peers use to reach this engine, published in the address book.
  virtual std::string local_address() const = 0;
  /// Called once after the node has joined; until then inbound peers are refused.
  virtual void set_identity(NodeId self, uint64_t cluster_token) = 0;
  /// An endpoint to `peer`, reusing an existing connection in either
  /// direction. Thread-safe. kPeerDown, kTimedOut on failure.
  virtual Result<std::unique_ptr<Endpoint>> connect(const PeerInfo& peer, Deadline d) = 0;
  virtual Result<MemRegion> register_memory(std::span<std::byte> mem, Access a) = 0;
  /// Non-blocking. Not thread-safe: one poller at a time (proto serializes).
  /// Returns up to out.size() completions; a full span means call again.
  virtual size_t poll(std::span<Completion> out) = 0;
  /// Hands back the rx buffers of `done`. The engine releases every kRecv
  /// of one poll() before it polls again.
  virtual void release_rx(std::span<const Completion> done) = 0;
  /// Sends what posts with kWrMore left held. Called by the poller after
  /// handling a batch; cheap when nothing is held.
  virtual void flush() {}
  /// Readable when poll() has work; block on it once the spin budget is spent.
  virtual int wait_fd() const = 0;
};

}  // namespace lt::transport
