// The tcp transport's connection: one socket to one peer, its send path
// (tcp_conn.cc) and the state its receive path keeps (tcp_read.cc). Private
// to transport/tcp/.
#pragma once

#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "common/net.h"
#include "common/time.h"
#include "common/wire.h"
#include "transport/tcp/spare_buffers.h"
#include "transport/tcp/tcp_transport.h"

namespace lt::transport::tcp {

inline constexpr size_t kInitialRx = 64 * 1024;
inline constexpr size_t kMaxPostBatch = 16;
inline constexpr int kMaxIov = 64;
inline constexpr size_t kHdr = sizeof(wire::FrameHeader);
inline constexpr size_t kDesc = sizeof(wire::WriteDesc);
inline constexpr uint64_t kHelloTimeoutNs = 5000000000ull;
inline constexpr size_t kCorkFrameMax = 16 * 1024;   // larger posts go out at once
inline constexpr size_t kCorkHoldMax = 16 * 1024;    // a held batch that would pass this goes
inline constexpr size_t kMaxRecv = 256 * 1024;       // bytes one recv() asks for
inline constexpr size_t kMaxReadPerPoll = 4u << 20;  // bytes read per connection per poll
inline constexpr size_t kByRefMin = 4096;            // smaller kWrByRef sges are copied
inline constexpr size_t kMidFrameMin = 64 * 1024;    // Conn::mid_frame()

// One entry of the send queue: bytes it owns, or bytes of a kWrByRef post
// in the poster's memory, which it only points at. `owes`: the post's
// kSendDone (done_id) is reported once this entry, its last, is sent.
struct Queued {
  std::string own;
  const std::byte* ref = nullptr;
  size_t ref_len = 0;
  bool owes = false;
  uint64_t done_id = 0;
  Queued() = default;
  Queued(std::string s) : own(std::move(s)) {}  // NOLINT: a copy queued as it is
  const char* data() const {
    return ref != nullptr ? reinterpret_cast<const char*>(ref) : own.data();
  }
  size_t size() const { return ref != nullptr ? ref_len : own.size(); }
};

// The frames of one post, gathered for one writev: each request's header
// (and a kWrite's descriptor) before its sges.
struct Gather {
  wire::FrameHeader hdrs[kMaxPostBatch];
  wire::WriteDesc descs[kMaxPostBatch];
  iovec iov[kMaxPostBatch * (2 + kMaxSge)];
  int niov = 0;
  size_t count = 0, total = 0;
  bool more = true;  // every request gathered has kWrMore
  // kWrByRef (with kWrSignaled): iovs that may be sent from where they are
  // (ref_iov), and the post's one signaled request (done_id).
  bool by_ref = false;
  bool signaled = false;
  uint64_t done_id = 0;
  bool ref_iov[kMaxPostBatch * (2 + kMaxSge)] = {};
  Result<size_t> add(std::span<const WorkRequest> wrs, uint32_t max_msg);
  /// The gathered bytes after the first `skip`, copied (for the queue) into
  /// `buf` (a kept buffer, or an empty string).
  std::string copy_from(size_t skip, std::string buf = {}) const;
  void append_to(std::string* out, size_t skip = 0) const;
};

// One socket to one peer. The send side is used by any thread; the receive
// side only by the poller. Whoever holds `sending_` is the only writer of the
// socket; everyone else appends copies to `outq_` (or, for kWrByRef posts,
// references), so a lock is never held across a system call and frames never
// interleave.
class Conn : public std::enable_shared_from_this<Conn> {
 public:
  Conn(TcpTransport* t, net::Fd fd, NodeId peer, bool hello_done)
      : t_(t), fd_(std::move(fd)), peer_(peer), hello_done_(hello_done) {}

  Result<size_t> post(std::span<const WorkRequest> wrs);
  /// A broken connection's kWrByRef posts still queued: reported failed.
  void fail_owed();
  void on_writable();
  void flush_cork();
  uint64_t created_ns_ = now_ns();
  void mark_dead() {
    if (!dead_.exchange(true)) ::shutdown(fd_.get(), SHUT_RDWR);
  }

  TcpTransport* t_;
  net::Fd fd_;
  std::atomic<NodeId> peer_;
  std::atomic<bool> dead_{false};

  // Poller-only.
  bool hello_done_;
  bool in_ready_ = false;
  bool pinned_ = false;
  bool closed_ = false;
  // The kWrite being placed straight from the socket: place_left_ bytes to
  // go at place_at_, inside place_reg_ (held so that its revoked flag stays
  // readable; the memory itself is guarded by Registration::enter).
  std::shared_ptr<Registration> place_reg_;
  std::byte* place_at_ = nullptr;
  size_t place_left_ = 0;
  // Receive buffer: not zero-filled, so untouched capacity costs no page
  // faults; grows to the largest frame seen.
  std::unique_ptr<std::byte[]> rx_;
  size_t rx_cap_ = 0;
  void rx_reserve(size_t n) {
    if (n <= rx_cap_) return;
    std::unique_ptr<std::byte[]> b(new std::byte[n]);
    if (rx_end_ > rx_begin_) std::memcpy(b.get(), rx_.get() + rx_begin_, rx_end_ - rx_begin_);
    rx_end_ -= rx_begin_;
    rx_begin_ = 0;
    rx_ = std::move(b);
    rx_cap_ = n;
  }
  size_t rx_begin_ = 0, rx_end_ = 0;
  size_t rx_need_ = 0;  // what the current frame wants in rx_ from rx_begin_ (last parse)
  // At least kMidFrameMin bytes of the current frame are still to come (a
  // kWrite being placed, or a large frame partly in rx_): a stream of large
  // frames, whose rest is on its way in more segments.
  bool mid_frame() const {
    return place_left_ >= kMidFrameMin || rx_need_ >= rx_end_ - rx_begin_ + kMidFrameMin;
  }

 private:
  // *owed: the post's kSendDone is reported when its bytes are sent, not now.
  Result<size_t> post_frames(std::span<const WorkRequest> wrs, bool* owed);
  // g's bytes after `skip` queued by reference (the kWrByRef sges) and as
  // small copies (the rest), in front of the queue or behind it (mu_ held).
  void queue_by_ref(const Gather& g, size_t skip, bool front);
  enum class Claim : uint8_t { kQueued, kRefused, kSend, kDrain };
  Claim queue_or_claim(const Gather& g, bool cork, bool defer, bool must_queue, std::string* copy);
  bool over_queue_limit(bool must_queue, bool* busy);
  /// g's bytes after `skip`, copied for the queue (a large copy into a kept buffer).
  std::string copy_out(const Gather& g, size_t skip) {
    const size_t n = g.total - std::min(skip, g.total);
    return g.copy_from(skip, spares_.take(n));
  }
  void drain();  // caller holds the sending role
  void hold(const Gather& g, std::string* copy = nullptr);
  ssize_t send_iov(const iovec* iov, int n) {
    msghdr m{};
    m.msg_iov = const_cast<iovec*>(iov);
    m.msg_iovlen = static_cast<size_t>(n);
    return ::sendmsg(fd_.get(), &m, MSG_NOSIGNAL | MSG_DONTWAIT);
  }

  std::mutex mu_;  // guards the fields below; never held across a syscall
  bool sending_ = false;
  bool retry_ = false;  // EPOLLOUT seen while another thread was sending
  std::deque<Queued> outq_;
  std::string spare_;  // a sent held batch's buffer, for the next one
  size_t out_off_ = 0;
  size_t queued_ = 0;
  // Frames posted with kWrMore while the socket was idle sit in outq_ with
  // corked_ set and nobody sending: the next post without kWrMore (or
  // flush_cork) takes the sending role and drains them first.
  std::atomic<bool> corked_{false};  // written under mu_; read by the sending role
  bool cork_listed_ = false;         // in the transport's corked_ list
  SpareBuffers spares_;              // its own lock; taken under mu_, never the other way round
};

using TcpEndpoint = ConnEndpoint<Conn>;

}  // namespace lt::transport::tcp
