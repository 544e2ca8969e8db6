// The rc transport's QPs and channels: QPs made ahead of need (spares, on
// the send CQ for message channels and on the one-sided CQ for one-sided
// ones), the registered memory each channel role needs, and the send CQ's
// growth with the QPs it serves.
#include <infiniband/verbs.h>

#include <algorithm>
#include <string>

#include "common/log.h"
#include "transport/verbs/verbs_transport.h"

namespace lt::transport::verbs {

Result<std::unique_ptr<Channel>> VerbsTransport::make_channel(VerbsConn* conn, ChannelRole role) {
  // One-sided channels complete on the one-sided CQ (onesided_cq.h).
  const bool onesided = role == ChannelRole::kOneSided;
  want_refill();  // spares and room are taken now
  std::unique_ptr<RcQp> qp;
  {
    std::lock_guard<std::mutex> g(spare_mu_);
    auto& spares = onesided ? rdma_spare_ : spare_;
    if (!spares.empty()) {
      qp = std::move(spares.back());
      spares.pop_back();
    }
  }
  if (!qp) {
    std::string why;
    auto q = RcQp::create(*dev_, qp_options(onesided), &why);
    if (!q) {
      LT_WARN("rc: %s", why.c_str());
      return q.status();
    }
    qp = std::move(*q);
    count_qp(!onesided);
  }
  // A message channel needs the send ring, a one-sided one the bounce buffer.
  MemRegion ring, bounce;
  if (role != ChannelRole::kOneSided) {
    auto r = local_pools_->alloc(config_.send_ring_bytes);
    if (!r) {
      qps_.fetch_sub(1);
      return r.status();
    }
    ring = *r;
  }
  if (role != ChannelRole::kMessages) {
    auto b = local_pools_->alloc(config_.bounce_bytes);
    if (!b) {
      qps_.fetch_sub(1);
      local_pools_->free(ring);
      return b.status();
    }
    bounce = *b;
  }
  return std::make_unique<Channel>(this, conn, std::move(qp), ring, bounce, config_.send_depth,
                                   onesided ? ocq_.get() : nullptr);
}

// The channels of a connection with k message QPs and r one-sided ones.
Status VerbsTransport::make_channels(VerbsConn* conn, uint32_t k, uint32_t r) {
  conn->msg_channels_ = k;
  for (uint32_t i = 0; i < k + r; ++i) {
    const ChannelRole role =
        i >= k ? ChannelRole::kOneSided : (r == 0 ? ChannelRole::kBoth : ChannelRole::kMessages);
    auto ch = make_channel(conn, role);
    if (!ch) return ch.status();
    conn->channels_.push_back(std::move(*ch));
  }
  return Status::ok();
}

// One more QP. The send CQ grows (doubling) until every QP's send queue fits
// in it at once, as far as the device allows; cq_room() keeps the posts in
// flight within what it holds either way. Cold (QP creation), so holding
// the send CQ's lock across the resize is fine: pollers try it and go on.
void VerbsTransport::count_qp(bool message_cq) {
  const uint64_t qps = qps_.fetch_add(1, std::memory_order_relaxed) + 1;
  if (!message_cq) return;
  const uint64_t margin = 2ull * config_.send_depth;
  const uint64_t want = qps * config_.send_depth + margin;
  if (want <= cq_limit_.load(std::memory_order_relaxed) + margin) return;
  std::lock_guard<SpinLock> held(send_cq_mu_);
  uint64_t entries = dev_->cq_entries();
  if (cq_fixed_ || want <= entries) return;
  while (entries < want) entries *= 2;
  if (dev_->max_cqe() != 0) entries = std::min<uint64_t>(entries, dev_->max_cqe());
  std::string why;
  if (entries <= dev_->cq_entries() ||
      !dev_->grow_cq(static_cast<uint32_t>(entries), &why).is_ok()) {
    cq_fixed_ = true;
    const std::string because = why.empty() ? "" : " (" + why + ")";
    LT_INFO(
        "rc: the send CQ stays at %u entries%s: at most %llu work requests in flight over "
        "all QPs",
        dev_->cq_entries(), because.c_str(),
        static_cast<unsigned long long>(dev_->cq_entries() - margin));
  }
  if (!cq_fixed_)
    LT_DEBUG("rc: send CQ grown to %u entries for %llu QPs", dev_->cq_entries(),
             static_cast<unsigned long long>(qps));
  cq_limit_.store(dev_->cq_entries() - margin, std::memory_order_relaxed);
}

// Keeps a connection's QPs (K + R, on their CQs) and the registered memory of
// its channels made ahead, so a new peer's first operation pays the exchange
// and the state changes, not QP creation or a registration (a registration
// pins and zeroes its pages: milliseconds for a few MiB). The control
// thread's, at its start and after something took them (want_refill): the
// poller would stop taking completions meanwhile, and a peer's sends would
// wait for receive buffers it does not repost.
void VerbsTransport::refill_spares() {
  refill_qps();
  // A message channel takes a send ring, a one-sided one a bounce buffer,
  // and with no one-sided channels (R = 0) each of the K takes both: room
  // for that many slices of the larger size (make_channel).
  const uint32_t k = config_.qps_per_peer, r = config_.rdma_qps_per_peer;
  const size_t slice = std::max(config_.send_ring_bytes, config_.bounce_bytes);
  (void)local_pools_->reserve(slice, r == 0 ? 2 * k : k + r);
  // And the first LMR pool, so that a node's first LMR, or the RPC ring a
  // new peer's first call asks for, registers nothing either.
  (void)pools_->reserve(kLmrHeadroomBytes, 1);
}

void VerbsTransport::want_refill() {
  if (!refill_due_.exchange(true)) net::ring_eventfd(ctl_refill_.get());
}

void VerbsTransport::refill_qps() {
  for (bool onesided : {false, true}) {
    const uint32_t want = onesided ? config_.rdma_qps_per_peer : config_.qps_per_peer;
    for (;;) {
      {
        std::lock_guard<std::mutex> g(spare_mu_);
        if ((onesided ? rdma_spare_ : spare_).size() >= want) break;
      }
      std::string why;
      auto q = RcQp::create(*dev_, qp_options(onesided), &why);
      if (!q) return;
      count_qp(!onesided);
      std::lock_guard<std::mutex> g(spare_mu_);
      (onesided ? rdma_spare_ : spare_).push_back(std::move(*q));
    }
  }
}

RcOptions VerbsTransport::qp_options(bool onesided) const {
  RcOptions o;
  o.send_depth = config_.send_depth;
  o.inline_bytes = caps_.max_inline;
  if (onesided) o.send_cq = ocq_->raw();
  return o;
}

}  // namespace lt::transport::verbs
