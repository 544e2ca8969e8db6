// The rc transport's receive path (the poller's): one shared receive queue
// of recv_buffers buffers for every peer; a completion's QP number names the
// channel, hence the peer. Messages in one SEND are lent in place; fragments
// are reassembled per channel (a channel's SENDs arrive in order) and the
// whole message lent; a WRITE_WITH_IMM's immediate arrives as an empty
// message. Buffers go back to the queue at release_rx (or at once when
// nothing was lent from them).
#include <arpa/inet.h>
#include <infiniband/verbs.h>

#include <cstring>

#include "common/log.h"
#include "common/trace_points.h"
#include "transport/verbs/verbs_transport.h"

namespace lt::transport::verbs {

void VerbsTransport::post_recv(const uint32_t* idx, size_t count) {
  constexpr size_t kChain = 32;
  ibv_recv_wr wr[kChain];
  ibv_sge sge[kChain];
  const uint32_t size = config_.recv_buffer_bytes;
  for (size_t done = 0; done < count;) {
    const size_t k = std::min(kChain, count - done);
    for (size_t i = 0; i < k; ++i) {
      const uint32_t b = idx[done + i];
      sge[i] = {reinterpret_cast<uint64_t>(rx_mem_ + size_t{b} * size), size, rx_region_->lkey()};
      wr[i] = ibv_recv_wr{};
      wr[i].wr_id = b;
      wr[i].sg_list = &sge[i];
      wr[i].num_sge = 1;
      wr[i].next = i + 1 < k ? &wr[i + 1] : nullptr;
    }
    ibv_recv_wr* bad = nullptr;
    if (int rc = ibv_post_srq_recv(dev_->srq(), wr, &bad); rc != 0) {
      LT_ERROR("rc: ibv_post_srq_recv: %s", std::strerror(rc));
    }
    done += k;
  }
}

// One receive completion; true when it made a kRecv in *out.
bool VerbsTransport::deliver(const ibv_wc& wc, Completion* out) {
  const uint32_t buf = static_cast<uint32_t>(wc.wr_id);
  Channel* ch = nullptr;
  {
    // Dialers and the control thread add channels while the poller reads.
    std::lock_guard<SpinLock> g(qpn_mu_);
    auto it = by_qpn_.find(wc.qp_num);
    if (it != by_qpn_.end()) ch = it->second;
  }
  if (wc.status != IBV_WC_SUCCESS || ch == nullptr || ch->conn()->closed_) {
    post_recv(&buf, 1);
    return false;
  }
  const NodeId peer = ch->conn()->peer();
  const std::byte* data = rx_mem_ + size_t{buf} * config_.recv_buffer_bytes;
  if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
    // Nothing is lent from the buffer, but it goes back with the lent ones
    // at release_rx: one post for the batch, after the completion is served
    // rather than before.
    lent_bufs_.push_back(buf);
    *out = recv_completion(peer, nullptr, 0, ntohl(wc.imm_data));
    return true;
  }
  const uint32_t imm = (wc.wc_flags & IBV_WC_WITH_IMM) ? ntohl(wc.imm_data) : kImmWhole;
  if (imm == kImmWhole && ch->assembling_total == 0) {
    lent_bufs_.push_back(buf);
    *out = recv_completion(peer, data, wc.byte_len, 0);
    return true;
  }
  // A fragment: a first one sizes the message, later ones append.
  const bool first = (imm & kImmFirst) != 0;
  if (first == (ch->assembling_total != 0) || (!first && imm != kImmMore) ||
      (first && (imm & ~kImmFirst) > max_msg_)) {
    LT_ERROR("rc: node %u sent a malformed fragment (imm %#x); closing", peer, imm);
    post_recv(&buf, 1);
    break_conn(ch->conn());
    return false;
  }
  if (first) {
    ch->assembling_total = imm & ~kImmFirst;
    ch->assembling.clear();
    ch->assembling.reserve(ch->assembling_total);
  }
  if (ch->assembling.size() + wc.byte_len > ch->assembling_total) {
    LT_ERROR("rc: node %u sent more fragment bytes than announced; closing", peer);
    post_recv(&buf, 1);
    break_conn(ch->conn());
    return false;
  }
  ch->assembling.insert(ch->assembling.end(), data, data + wc.byte_len);
  post_recv(&buf, 1);
  if (ch->assembling.size() < ch->assembling_total) return false;
  ch->assembling_total = 0;
  lent_msgs_.push_back(std::move(ch->assembling));
  ch->assembling = {};
  const auto& m = lent_msgs_.back();
  *out = recv_completion(peer, m.data(), static_cast<uint32_t>(m.size()), 0);
  return true;
}

size_t VerbsTransport::poll_recv(std::span<Completion> out, size_t n) {
  ibv_wc wc[16];
  while (n < out.size()) {
    const int want = static_cast<int>(std::min<size_t>(16, out.size() - n));
    int k;
    const ibv_wc* from = wc;
    if (stash_n_ > 0) {
      k = stash_n_;
      from = stash_.get();
      stash_n_ = 0;
    } else {
      k = ibv_poll_cq(dev_->recv_cq(), want, wc);
    }
    if (k <= 0) {
      LT_TRACE_POINT('e');
      break;
    }
    LT_TRACE_POINT('r');
    for (int i = 0; i < k; ++i) {
      if (deliver(from[i], &out[n])) ++n;
    }
    // The device gave fewer than asked: its queue was empty. Another look
    // now would put a poll of the device (about a microsecond on Soft-RoCE)
    // in front of what was just found; the next poll sees what came since.
    if (from == wc && k < want) break;
  }
  return n;
}

void VerbsTransport::release_rx(std::span<const Completion> done) {
  (void)done;  // every buffer lent by the last poll comes back together
  if (!lent_bufs_.empty()) {
    post_recv(lent_bufs_.data(), lent_bufs_.size());
    lent_bufs_.clear();
  }
  lent_msgs_.clear();
}

}  // namespace lt::transport::verbs
