// tcp transport: one connection per peer node, made lazily and cached, shared
// by all threads. Frames are common/wire.h FrameHeader + payload. Edge-
// triggered epoll; the poller drains each socket until EAGAIN. Sends go out
// with one sendmsg per post; whatever the kernel does not take is copied into
// the connection's backlog and flushed on EPOLLOUT, so a post never blocks and
// the caller's buffers are free when it returns.
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
#include "transport/transport.h"

namespace lt::transport::tcp {

/// Body of the kHello frame that opens every peer connection.
struct HelloBody {
  uint32_t node;           // sender's node id (from ltier-manager)
  uint32_t reserved;       // zero
  uint64_t cluster_token;  // token handed out by ltier-manager at join
};
static_assert(sizeof(HelloBody) == 16);

class Conn;

class TcpTransport final : public Transport {
 public:
  explicit TcpTransport(const TcpConfig& config);
  ~TcpTransport() override;
  Status init();

  const char* name() const override { return "tcp"; }
  const Caps& caps() const override { return caps_; }
  std::string local_address() const override { return address_; }
  void set_identity(NodeId self, uint64_t cluster_token) override;
  Result<std::unique_ptr<Endpoint>> connect(const PeerInfo& peer, Deadline d) override;
  Result<MemRegion> register_memory(std::span<std::byte> mem, Access a) override;
  size_t poll(std::span<Completion> out) override;
  void release_rx(std::span<const Completion> done) override;
  int wait_fd() const override { return epfd_.get(); }
  void flush() override;

  uint64_t malformed_frames() const { return malformed_.load(std::memory_order_relaxed); }

 private:
  friend class Conn;
  void accept_all();
  // Reads and frames what `c` has; false when `out` filled or the buffer is pinned.
  bool read_conn(Conn* c, std::span<Completion> out, size_t* n);
  void close_conn(Conn* c, std::span<Completion> out, size_t* n, const char* why);
  bool handle_hello(Conn* c, std::span<const std::byte> body);
  Status add_to_epoll(Conn* c);

  TcpConfig config_;
  Caps caps_;
  std::string address_;
  net::Fd listen_fd_;
  net::Fd epfd_;
  std::atomic<NodeId> self_{kNoNode};
  std::atomic<uint64_t> token_{0};
  std::atomic<uint64_t> malformed_{0};

  std::mutex mu_;  // guards peers_ and conns_ (connect() runs on user threads)
  std::unordered_map<NodeId, std::shared_ptr<Conn>> peers_;
  std::unordered_map<Conn*, std::shared_ptr<Conn>> conns_;

  // Poller-only state.
  std::vector<Conn*> ready_;                   // readable, not yet drained to EAGAIN
  std::vector<Conn*> pinned_;                  // rx buffers lent out until release_rx
  std::vector<std::shared_ptr<Conn>> closed_;  // kept alive until release_rx
  std::deque<Completion> pending_;             // events found while `out` was full
  uint64_t next_sweep_ns_ = 0;
  std::atomic<size_t> nconns_{0};  // conns_.size(), read by the poller without mu_
  uint32_t idle_polls_ = 0;
  static constexpr uint32_t kIdlePolls = 64;  // listener-only: epoll_wait every 64th poll
  void sweep_unidentified();

  // Connections holding corked frames (kWrMore), for flush().
  void add_corked(std::shared_ptr<Conn> c);
  std::mutex cork_mu_;
  std::vector<std::shared_ptr<Conn>> corked_;
  std::vector<std::shared_ptr<Conn>> flushing_;  // flush() only
  std::atomic<bool> has_corked_{false};

  std::mutex done_mu_;  // signaled sends, reported by poll()
  std::deque<Completion> send_done_;
};

}  // namespace lt::transport::tcp
