// A connection of the rc transport to one peer: K channels (RC QPs, see
// channel.h) and the tcp control socket that exchanged their addresses and
// then stays open as the liveness signal (EOF: the peer closed or died).
//
// The exchange (verbs_connect.cc), one round trip on a fresh socket:
//   dialer   -> ConnectRequest: a hello (transport/hello.h) and its K QP
//               addresses; its QPs were made ahead of need
//   acceptor -> ConnectReply: its K QP addresses, its QPs already at RTS
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

inline constexpr uint32_t kMaxQpsPerPeer = 8;
inline constexpr uint32_t kConnectMagic = 0x6c745243;  // "ltRC"
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
  uint32_t count;  // QPs, 1 to kMaxQpsPerPeer
  QpWire qp[kMaxQpsPerPeer];
};

struct ConnectReply {
  uint32_t magic;
  uint32_t status;  // 0, or a Code: the acceptor could not make its QPs
  uint32_t count;
  uint32_t pad;
  QpWire qp[kMaxQpsPerPeer];
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

  std::vector<std::unique_ptr<Channel>> channels_;

 private:
  Channel* pick();
  VerbsTransport* t_;
  net::Fd fd_;
};

}  // namespace lt::transport::verbs
