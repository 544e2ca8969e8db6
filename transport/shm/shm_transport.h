// shm transport: peers on the same host (one kernel, one network namespace).
//
// Connection setup: every transport listens on an abstract-namespace unix
// SOCK_SEQPACKET socket ("shm:<pid>:<name>"). connect() dials it, checks the
// listener's uid, creates one sealed memfd segment with two SPSC byte rings
// (shm_ring.h) and two eventfd bells, and sends them with SCM_RIGHTS in a
// hello carrying the node id and cluster token. It does not wait for an
// answer: the kernel queues the hello, and the connector may post into its
// ring at once. The acceptor checks uid, token and segment, maps it and acks;
// on any failure it closes the socket, which the connector sees as kPeerLost.
// Nothing is ever named in /dev/shm; a crash leaks nothing.
//
// Liveness: the unix socket stays open for the life of the connection; EOF or
// HUP on it means the peer closed or died (the kernel closes it on SIGKILL).
//
// Messages: post() copies small messages into the ring; rx pointers point
// into the ring (zero-copy) until release_rx. Messages above a quarter ring
// travel in fragments and are reassembled in a per-connection staging buffer.
// What the ring cannot take now of an accepted message waits in a bounded
// per-connection backlog that post() and poll() flush; post never blocks.
// Each direction also has a small lane (shm_lane.h) with a lock of its own
// for messages that keep no order with the rest (Endpoint::post_express);
// the poller reads it before the ring.
//
// Wake-ups: wait_fd() is an epoll set of the listening socket, every
// connection's socket and its inbound bell, and an "awake" eventfd that is
// kept readable while the transport is not armed. A poller about to sleep
// arms (prepare_sleep): it sets want_data in every inbound ring (and
// want_space where it has a backlog), re-checks the rings and drains the
// awake fd. Producers ring a bell only when the flag is set, so a busy or
// spinning receiver costs no system call per message, and a caller that
// spins costs its peers none either.
//
// One-sided ops are native: alloc_memory() memory lives in a memfd that peers
// open through /proc/<pid>/fd/<n> (same uid) and map; post() then copies or
// applies the atomic directly. See transport.h RemoteRef for addr/rkey.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/config.h"
#include "common/net.h"
#include "common/spinlock.h"
#include "transport/conn_table.h"
#include "transport/transport.h"

namespace lt::transport::shm {

using lt::SpinLock;

class ShmConn;

/// Thread contract: connect, post (through endpoints), register_memory,
/// alloc_memory and free_memory are thread-safe; poll and release_rx belong to
/// one poller at a time.
class ShmTransport final : public Transport {
 public:
  explicit ShmTransport(const ShmConfig& config);
  ~ShmTransport() override;
  /// Validates the config and binds the listening socket. kInvalidArg for a
  /// bad ring size, kSys when a socket, epoll or eventfd cannot be made.
  Status init();

  const char* name() const override { return "shm"; }
  const Caps& caps() const override { return caps_; }
  std::string local_address() const override { return address_; }
  void set_identity(NodeId self, uint64_t cluster_token, const Mac& hello_key) override;
  /// kNotJoined before set_identity; kPeerDown when the address is not an shm
  /// address, nothing listens there, or the listener has another uid; kSys
  /// when memfd/eventfd/mmap fail.
  Result<std::unique_ptr<Endpoint>> connect(const PeerInfo& peer, Deadline d) override;
  /// No registration is needed locally. Spans inside an alloc_memory region
  /// get that region's rkey (remote offsets stay relative to the region's
  /// start). Other memory with remote read or write rights gets a placement
  /// rkey when the kernel allows cross-memory attach (Caps::placement): peers
  /// kWrite/kRead it by virtual address with process_vm_writev/readv. Same
  /// uid peers could do that anyway; the rkey does not bound the range (the
  /// kernel refuses unmapped addresses). Otherwise rkey = 0, unusable.
  Result<MemRegion> register_memory(std::span<std::byte> mem, Access a) override;
  Result<MemRegion> alloc_memory(size_t len, Access a) override;
  void free_memory(const MemRegion& r) override;
  size_t poll(std::span<Completion> out) override;
  void release_rx(std::span<const Completion> done) override;
  int wait_fd() const override { return epfd_.get(); }
  void prepare_sleep() override { try_arm(); }
  void woken() override { woke_.store(true, std::memory_order_relaxed); }
  TransportStats stats() const override {
    TransportStats s;
    s.connections = conns_.size();
    return s;
  }

  uint64_t malformed() const { return malformed_.load(std::memory_order_relaxed); }

 private:
  friend class ShmConn;

  // Poller-only helpers.
  bool handle_events(std::span<Completion> out, size_t* n);
  void accept_all();
  Result<net::Fd> dial(const PeerInfo& peer, Deadline d, pid_t* pid);
  struct NewSegment {
    net::Fd memfd;
    std::byte* mem = nullptr;
    size_t len = 0;
    uint64_t salt = 0;
  };
  Result<NewSegment> new_segment(NodeId peer);
  void on_socket(ShmConn* c, uint32_t events, std::span<Completion> out, size_t* n);
  bool handle_hello(ShmConn* c, const void* body, size_t len, std::vector<net::Fd>* fds);
  bool read_ring(ShmConn* c, std::span<Completion> out, size_t* n);
  bool read_lane(ShmConn* c, std::span<Completion> out, size_t* n);
  void close_conn(ShmConn* c, std::span<Completion> out, size_t* n, const char* why);
  void try_arm();
  void disarm();
  void kick();  // makes wait_fd readable (another thread made work for the poller)
  void sweep_unidentified(uint64_t now);
  void trim_windows();
  Status add_to_epoll(int fd, uint64_t tag);

  ShmConfig config_;
  Caps caps_;
  std::string address_;
  std::string abstract_name_;
  net::Fd listen_fd_;
  net::Fd epfd_;
  net::Fd awake_fd_;  // readable while not armed
  dev_t memfd_dev_ = 0;
  uint64_t max_single_ = 0;  // largest payload sent as one record
  // A connection's ring window while `conns` connections share
  // shm.ring_budget_bytes: the budget's share, a power of two in
  // [kMinWindow, the ring]; the whole ring without a budget.
  uint64_t window_for(size_t conns) const {
    const uint64_t r = config_.ring_bytes, b = config_.ring_budget_bytes;
    if (b == 0) return r;
    const uint64_t share = std::bit_floor(std::max<uint64_t>(b / std::max<size_t>(conns, 1), 1));
    return std::min(r, std::max(share, kMinWindow));
  }
  std::atomic<NodeId> self_{kNoNode};
  std::atomic<uint64_t> token_{0};
  std::atomic<uint64_t> malformed_{0};
  std::atomic<bool> armed_{false};
  std::atomic<bool> in_poll_{false};  // debug builds assert one poller at a time
  std::atomic<bool> woke_{false};     // woken(): the next poll looks at the events

  ConnTable<ShmConn> conns_;

  // Poller-only state.
  size_t rr_ = 0;               // round-robin start in conns_.snapshot()
  std::vector<ShmConn*> lent_;  // rx lent out until release_rx
  uint64_t clock_ns_ = 0;       // the clock at the last poll that read it
  uint32_t polls_ = 0;
  uint64_t next_events_ns_ = 0;
  uint64_t next_sweep_ns_ = 0;

  SpinLock done_lock_;  // signaled sends, reported by poll()
  std::deque<Completion> send_done_;
  std::atomic<size_t> done_count_{0};

  // alloc_memory regions by rkey.
  struct Segment {
    int fd;
    std::byte* addr;
    size_t len;
  };
  std::mutex seg_mu_;
  std::unordered_map<uint64_t, Segment> segs_;
};

}  // namespace lt::transport::shm
