// Device atomics on this node's own memory (Transport::local_atomic): one
// RC QP connected to a second QP of the same device, made on first use. A
// device whose atomics are atomic only among its own (IBV_ATOMIC_HCA) then
// serves the owner's atomics and its peers' alike, so they are atomic with
// respect to each other; CPU instructions on the word would not be (a
// Soft-RoCE responder adds under a kernel lock, not with a locked add).
#include "common/log.h"
#include "transport/verbs/channel.h"
#include "transport/verbs/mem_pool.h"
#include "transport/verbs/rc_qp.h"
#include "transport/verbs/verbs_conn.h"
#include "transport/verbs/verbs_transport.h"

namespace lt::transport::verbs {

// Makes the loopback pair: a channel (its QP posts) and a responder QP that
// only executes what arrives. Called with loopback_mu_ held.
Status VerbsTransport::open_loopback() {
  auto conn = std::make_shared<VerbsConn>(this, net::Fd(), self_.load(std::memory_order_acquire));
  auto ch = make_channel(conn.get(), ChannelRole::kOneSided);
  if (!ch) return ch.status();
  RcOptions o;
  o.send_depth = 4;
  o.inline_bytes = 0;
  std::string why;
  auto responder = RcQp::create(*dev_, o, &why);
  if (!responder) {
    LT_WARN("rc: the loopback QP for atomics on this node's memory: %s", why.c_str());
    return responder.status();
  }
  count_qp();
  const QpAddress mine = (*ch)->qp().local();
  const QpAddress theirs = (*responder)->local();
  Status s = (*ch)->qp().connect(theirs, &why);
  if (s.is_ok()) s = (*responder)->connect(mine, &why);
  if (!s.is_ok()) {
    LT_WARN("rc: connecting the loopback QP for atomics on this node's memory: %s", why.c_str());
    return s;
  }
  conn->channels_.push_back(std::move(*ch));
  add_channels(conn.get());
  Loopback lb{std::move(conn), std::move(*responder)};
  loopback_.store(lb.conn->channels_.front().get(), std::memory_order_release);
  loopbacks_.push_back(std::move(lb));
  return Status::ok();
}

// A failed loopback (its QP went to the error state: only a bug gets there)
// is kept until the transport closes and replaced by a new one.
Status VerbsTransport::local_atomic(const WorkRequest& wr) {
  if (wr.op != Op::kFetchAdd && wr.op != Op::kCmpSwap) return Code::kInvalidArg;
  Channel* ch = loopback_.load(std::memory_order_acquire);
  if (ch == nullptr || ch->failed()) {
    std::lock_guard<std::mutex> g(loopback_mu_);
    ch = loopback_.load(std::memory_order_acquire);
    if (ch == nullptr || ch->failed()) {
      if (ch != nullptr) ch->conn()->dead_.store(true, std::memory_order_release);
      LT_RETURN_IF_ERROR(open_loopback());
      ch = loopback_.load(std::memory_order_acquire);
    }
  }
  Status s = ch->execute(wr);
  // A completion error left the QP in the error state: the next call makes
  // a new pair.
  if (s.code() == Code::kPeerDown || s.code() == Code::kPerm) ch->fail();
  return s;
}

}  // namespace lt::transport::verbs
