// tcp transport: one connection per peer node, made lazily and cached, shared
// by all threads. Frames are common/wire.h FrameHeader + payload. Edge-
// triggered epoll; the poller drains each socket until EAGAIN. Sends go out
// with one sendmsg per post; whatever the kernel does not take is copied into
// the connection's backlog and flushed on EPOLLOUT, so a post never blocks and
// the caller's buffers are free when it returns.
//
// kWrite (Caps::placement): a kWrite frame carries a wire::WriteDesc naming
// memory the receiver registered with register_memory(); the receiver checks
// it and recv()s the bytes straight into that memory, never through the rx
// buffer beyond what one recv() had already read there.
#pragma once

#include <sys/uio.h>

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/config.h"
#include "common/net.h"
#include "common/time.h"
#include "common/wire.h"
#include "transport/conn_table.h"
#include "transport/hello.h"
#include "transport/transport.h"

namespace lt::transport::tcp {

/// Body of the kHello frame that opens every peer connection (transport/hello.h).
inline constexpr std::string_view kHelloLabel = "ltier tcp hello v1";
using transport::HelloBody;
inline HelloBody make_hello(NodeId node, NodeId to, uint64_t token, uint64_t counter,
                            const Mac& key) {
  return transport::make_hello(kHelloLabel, node, to, token, counter, key);
}
inline bool hello_mac_ok(const HelloBody& h, const Mac& key) {
  return transport::hello_mac_ok(kHelloLabel, h, key);
}

class Conn;

/// A region from register_memory(), looked up by rkey when a kWrite frame
/// arrives. addr, len and access never change. The poller brackets every
/// store into the region with enter()/leave(); deregister_memory() revokes
/// the region, then waits until no store is in progress, so once it returns
/// no byte of the region is written again (the rest of a write is refused).
struct Registration {
  std::byte* addr = nullptr;
  size_t len = 0;
  Access access = Access::kLocal;
  std::atomic<uint32_t> busy{0};     // stores in progress (the poller's)
  std::atomic<bool> revoked{false};  // deregistered

  // seq_cst on both sides: either the poller sees `revoked`, or
  // deregister_memory sees `busy` and waits for leave().
  bool enter() {
    busy.fetch_add(1, std::memory_order_seq_cst);
    if (!revoked.load(std::memory_order_seq_cst)) return true;
    leave();
    return false;
  }
  void leave() { busy.fetch_sub(1, std::memory_order_release); }
};

class TcpTransport final : public Transport {
 public:
  explicit TcpTransport(const TcpConfig& config);
  ~TcpTransport() override;
  Status init();

  const char* name() const override { return "tcp"; }
  const Caps& caps() const override { return caps_; }
  std::string local_address() const override { return address_; }
  void set_identity(NodeId self, uint64_t cluster_token, const Mac& hello_key) override;
  Result<std::unique_ptr<Endpoint>> connect(const PeerInfo& peer, Deadline d) override;
  Result<MemRegion> register_memory(std::span<std::byte> mem, Access a) override;
  void deregister_memory(const MemRegion& r) override;
  size_t poll(std::span<Completion> out) override;
  void release_rx(std::span<const Completion> done) override;
  int wait_fd() const override { return epfd_.get(); }
  void woken() override { epoll_now_.store(true, std::memory_order_relaxed); }
  // A connection left on the ready list (its read stopped on this poll's
  // budget, or its buffer is lent) has bytes whose readiness edge epoll may
  // have handed out already: the bell keeps wait_fd() readable for them.
  void prepare_sleep() override {
    if (!ready_.empty() && !bell_rung_.exchange(true, std::memory_order_acq_rel)) {
      net::ring_eventfd(bell_.get());
    }
  }
  TransportStats stats() const override {
    TransportStats s;
    s.connections = conns_.size();
    return s;
  }
  void flush() override;

  uint64_t malformed_frames() const { return malformed_.load(std::memory_order_relaxed); }
  /// kWrite frames refused (bad rkey, rights, bounds or length); each closed its connection.
  uint64_t refused_writes() const { return refused_writes_.load(std::memory_order_relaxed); }

 private:
  friend class Conn;
  void accept_all();
  // Reads and frames what `c` has; false when `out` filled or the buffer is pinned.
  bool read_conn(Conn* c, std::span<Completion> out, size_t* n);
  // The steps of read_conn. kMore: go on; kDone: this connection has nothing
  // more now (drained or closed: read_conn returns true); kFull: `out` is
  // full, rx_ is lent out or the poll's budget is spent (returns false).
  enum class ReadStep : uint8_t { kMore, kDone, kFull };
  ReadStep place_rest(Conn* c, std::span<Completion> out, size_t* n, size_t* read_now);
  ReadStep parse_frames(Conn* c, std::span<Completion> out, size_t* n, size_t* need);
  ReadStep start_write(Conn* c, std::span<Completion> out, size_t* n,
                       std::span<const std::byte> bytes, uint32_t length, size_t* need);
  ReadStep recv_more(Conn* c, std::span<Completion> out, size_t* n, size_t need, size_t* read_now,
                     bool* drained);
  ReadStep recv_failed(Conn* c, std::span<Completion> out, size_t* n, ssize_t r, int err);
  ReadStep drop_malformed(Conn* c, std::span<Completion> out, size_t* n, const char* why);
  void close_conn(Conn* c, std::span<Completion> out, size_t* n, const char* why);
  bool handle_hello(Conn* c, std::span<const std::byte> body);
  // The registration a write of `len` bytes at d.addr may go into, or null
  // (and *why) if it must be refused.
  std::shared_ptr<Registration> writable(const wire::WriteDesc& d, size_t len, const char** why);
  [[gnu::cold]] void refuse_write(Conn* c, std::span<Completion> out, size_t* n,
                                  const wire::WriteDesc& d, size_t len, const char* why);
  Status add_to_epoll(Conn* c);

  TcpConfig config_;
  Caps caps_;
  std::string address_;
  net::Fd listen_fd_;
  net::Fd epfd_;
  std::atomic<NodeId> self_{kNoNode};
  std::atomic<uint64_t> token_{0};
  Mac hello_key_{};                         // written before token_, read after it
  std::atomic<uint64_t> hello_counter_{0};  // the last counter sent
  HelloCheck hellos_{kHelloLabel};          // poller only
  std::atomic<uint64_t> malformed_{0};

  ConnTable<Conn> conns_;

  // Poller-only state.
  std::vector<Conn*> ready_;   // readable, not yet drained to EAGAIN
  std::vector<Conn*> pinned_;  // rx buffers lent out until release_rx
  uint64_t next_sweep_ns_ = 0;
  uint32_t direct_polls_ = 0;
  static constexpr size_t kDirectPollConns = 4;
  static constexpr uint32_t kEpollEvery = 16;
  size_t read_ready(std::span<Completion> out, size_t n);
  size_t settle(size_t n);  // frees closed connections when nothing is lent
  static bool any_mid_frame(const std::vector<std::shared_ptr<Conn>>& list);
  uint32_t idle_polls_ = 0;
  static constexpr uint32_t kIdlePolls = 1024;  // listener-only: epoll_wait every 1024th poll
  // Set by woken(): the next poll() asks epoll at once, whatever the counters
  // say, so a sleeping engine accepts a new connection in one pass.
  std::atomic<bool> epoll_now_{false};
  void sweep_unidentified();

  // Connections holding corked frames (kWrMore), for flush().
  void add_corked(std::shared_ptr<Conn> c);
  std::mutex cork_mu_;
  std::vector<std::shared_ptr<Conn>> corked_;
  std::vector<std::shared_ptr<Conn>> flushing_;  // flush() only
  std::atomic<bool> has_corked_{false};

  // Registrations, by rkey. Short sections: lookups copy the shared_ptr out.
  std::mutex reg_mu_;
  std::unordered_map<uint64_t, std::shared_ptr<Registration>> regs_;
  uint64_t next_rkey_;  // random high half, then counts: an rkey is never reused
  std::atomic<uint64_t> refused_writes_{0};
  bool warned_refused_ = false;  // poller-only: the first refusal is a warning

  std::mutex done_mu_;  // signaled sends, reported by poll()
  std::deque<Completion> send_done_;
  std::atomic<size_t> done_count_{0};  // entries in send_done_, read without the lock
  /// A kSendDone for poll(); `wake`: from a thread that may not be the
  /// poller (a post by reference sent by whoever drains), so a poller asleep
  /// on wait_fd() is woken through bell_.
  void report_done(uint64_t wr_id, NodeId peer, Code status, bool wake);
  net::Fd bell_;  // eventfd in epfd_: kSendDone waiting
  std::atomic<bool> bell_rung_{false};
};

}  // namespace lt::transport::tcp
