// A connection of the rc transport to one peer: K message channels and R
// one-sided channels (RC QPs, see channel.h), and the tcp control socket
// that exchanged their addresses and then stays open as the liveness signal
// (EOF: the peer closed or died).
//
// One-sided ops have QPs of their own (R = verbs.rdma_qps_per_peer) because
// an RC QP executes its requests in order: a READ posted behind a SEND that
// the peer answers with receiver-not-ready (its shared receive queue empty)
// waits as long as that SEND does. A progress thread that waits so, inside
// a handler, reposts no receive buffers of its own, and two nodes doing it
// to each other wait for ever. On QPs that carry no SENDs a one-sided op
// waits for nobody's receive buffers. R = 0: one-sided ops share the K.
//
// The exchange (verbs_connect.cc), one round trip on a fresh socket:
//   dialer   -> ConnectRequest: a hello (transport/hello.h) and its K + R QP
//               addresses (messages first); its QPs were made ahead of need
//   acceptor -> ConnectReply: its K + R QP addresses, its QPs already at RTS
//   dialer   -> one byte kReady once its QPs are at RTS; only then does the
//               acceptor use the connection, so nothing it sends meets a QP
//               that cannot receive yet.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/net.h"
#include "transport/hello.h"
#include "transport/transport.h"
#include "transport/verbs/channel.h"

namespace lt::transport::verbs {

inline constexpr uint32_t kMaxQpsPerPeer = 8;          // of each kind, messages and one-sided
inline constexpr uint32_t kConnectMagic = 0x6c745232;  // "ltR2"
inline constexpr uint8_t kReady = 'R';

struct QpWire {
  uint32_t qpn;
  uint32_t psn;
  uint8_t gid[16];
  uint16_t lid;
  uint16_t pad;
  uint32_t mtu;
};
static_assert(sizeof(QpWire) == 32);

struct ConnectRequest {
  HelloBody hello;
  uint32_t magic;
  uint32_t count;       // message QPs, 1 to kMaxQpsPerPeer
  uint32_t rdma_count;  // one-sided QPs after them, 0 to kMaxQpsPerPeer
  uint32_t pad;
  QpWire qp[2 * kMaxQpsPerPeer];
};

struct ConnectReply {
  uint32_t magic;
  uint32_t status;  // 0, or a Code: the acceptor could not make its QPs
  uint32_t count;
  uint32_t rdma_count;
  QpWire qp[2 * kMaxQpsPerPeer];
};

QpWire to_wire(const QpAddress& a);
QpAddress from_wire(const QpWire& w);

class VerbsTransport;

class VerbsConn {
 public:
  VerbsConn(VerbsTransport* t, net::Fd fd, NodeId peer);
  ~VerbsConn();
  VerbsConn(const VerbsConn&) = delete;
  VerbsConn& operator=(const VerbsConn&) = delete;

  Result<size_t> post(std::span<const WorkRequest> wrs);
  NodeId peer() const { return peer_.load(std::memory_order_relaxed); }
  int fd() const { return fd_.get(); }

  // For ConnTable (conn_table.h).
  std::atomic<NodeId> peer_;
  std::atomic<bool> dead_{false};
  uint64_t created_ns_ = 0;

  // The acceptor's side of the exchange (the poller's).
  enum class State : uint8_t { kAwaitRequest, kAwaitReady, kReady };
  State state_ = State::kReady;
  std::atomic<bool> closed_{false};  // the poller closed it
  uint64_t closed_ns_ = 0;
  std::atomic<bool> broken_{false};  // a work request failed: the poller closes it

  // The message channels, then the one-sided ones (none: they share).
  std::vector<std::unique_ptr<Channel>> channels_;
  uint32_t msg_channels_ = 0;

 private:
  Channel* pick_msg();
  Channel* pick_rdma();
  VerbsTransport* t_;
  net::Fd fd_;
};

}  // namespace lt::transport::verbs
