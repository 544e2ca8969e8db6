// The ud transport's receive path (the poller's): datagrams from the shared
// receive queue into streams, in order, reassembled, acknowledged.
#include <infiniband/verbs.h>

#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "common/time.h"
#include "transport/verbs/ud_transport.h"

namespace lt::transport::verbs {

namespace {
// An acknowledgement waits this long for a datagram going back to carry it
// (the reply to a request, typically), unless a quarter window is unacked.
constexpr uint64_t kAckDelayNs = 200'000;
constexpr int kRecvBatches = 4;  // of 16 completions per poll
}  // namespace

uint64_t UdConn::sack_bits() const {
  if (rx.held_count == 0) return 0;
  const uint32_t mask = window_ - 1;
  uint64_t bits = 0;
  for (uint32_t i = 0; i < 64 && i + 1 < window_; ++i) {
    if (rx.held[(rx.next + 1 + i) & mask] >= 0) bits |= uint64_t{1} << i;
  }
  return bits;
}

void UdTransport::post_recv(uint32_t idx) {
  ibv_sge sge{reinterpret_cast<uint64_t>(rx_buf(idx)), kGrhBytes + mtu_, rx_region_->lkey()};
  ibv_recv_wr wr{};
  wr.wr_id = idx;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  ++rx_posted_;
  if (int rc = ibv_post_srq_recv(dev_->srq(), &wr, &bad); rc != 0) {
    --rx_posted_;
    LT_WARN("ud: a receive buffer could not be posted again: %s", std::strerror(rc));
  }
}

UdConn* UdTransport::conn_of(NodeId node) {
  auto it = by_node_.find(node);
  return it != by_node_.end() ? it->second : nullptr;
}

bool UdTransport::drop_on_purpose() {
  loss_rng_ ^= loss_rng_ << 13;
  loss_rng_ ^= loss_rng_ >> 7;
  loss_rng_ ^= loss_rng_ << 17;
  return loss_rng_ % 100 < loss_percent_;
}

size_t UdTransport::poll_recv(std::span<Completion> out, size_t n) {
  const uint32_t posted_before = rx_posted_;
  uint32_t reaped = 0;
  if (stash_n_ > 0) {
    stash_n_ = 0;
    reaped = 1;
    on_datagram(stash_[0], out, &n);
  }
  ibv_wc wc[16];
  bool drained = false;
  for (int b = 0; b < kRecvBatches && n < out.size(); ++b) {
    const int k = ibv_poll_cq(dev_->recv_cq(), 16, wc);
    for (int i = 0; i < k; ++i) on_datagram(wc[i], out, &n);
    reaped += static_cast<uint32_t>(std::max(k, 0));
    if (k < 16) {
      drained = true;
      break;
    }
  }
  if (rx_mark_ != 0 && reaped != 0) mark_if_low(posted_before, reaped, drained);
  return n;
}

// The receiver's signal (ud_cwnd.h): the acknowledgements of streams whose
// datagrams came while this node's posted receive buffers ran low are
// marked (kUdMark), so their senders cut their windows before the device
// starts dropping. Low: the buffers posted when this poll began less the
// datagrams it reaped (all of which the device had taken by then) fell
// below rx_mark_; or, where a poll cannot tell (it stopped at its most),
// the device's SRQ limit event came. A low spell goes on through the polls
// that do not drain the queue (the backlog the device built is still being
// reaped) and ends at one that does and saw enough posted; then the
// device's limit is set again (one system call per low spell, none while
// the receiver keeps up).
void UdTransport::mark_if_low(uint32_t posted_before, uint32_t reaped, bool drained) {
  bool low = posted_before < rx_mark_ + reaped;
  if (!drained && srq_limit_set_) dev_->events().read();
  if (srq_fired_.load(std::memory_order_relaxed) && srq_fired_.exchange(false)) {
    srq_limit_set_ = false;  // the device turned it off when it fired
    low = true;
  }
  if (low || (rx_low_ && !drained)) {
    for (UdConn* c : acks_) {
      c->rx.mark = true;
      c->rx.ack_now = true;
    }
  }
  rx_low_ = !drained && (low || rx_low_);
  if (drained && !srq_limit_set_ && rx_posted_ >= rx_mark_) set_srq_limit();
}

// Arms the SRQ's limit event at rx_mark_ posted buffers. A device that
// refuses it leaves the signal to the poller's own count.
void UdTransport::set_srq_limit() {
  ibv_srq_attr a{};
  a.srq_limit = rx_mark_;
  if (int rc = ibv_modify_srq(dev_->srq(), &a, IBV_SRQ_LIMIT); rc != 0) {
    LT_DEBUG("ud: the receive queue's limit event cannot be set on %s: %s",
             dev_->choice().device.c_str(), std::strerror(rc));
    return;
  }
  srq_limit_set_ = true;
}

void UdTransport::on_datagram(const ibv_wc& wc, std::span<Completion> out, size_t* n) {
  const auto idx = static_cast<uint32_t>(wc.wr_id);
  --rx_posted_;
  if (wc.status != IBV_WC_SUCCESS) {
    // The buffer is the SRQ's again whatever went wrong; the QP may be in
    // error (recover_qp looks).
    LT_DEBUG("ud: a receive failed: %s", ibv_wc_status_str(wc.status));
    note_qp_error();
    return post_recv(idx);
  }
  const std::byte* buf = rx_buf(idx) + kGrhBytes;
  UdHeader h;
  if (wc.byte_len < kGrhBytes + sizeof(h) || (loss_percent_ != 0 && drop_on_purpose())) {
    return post_recv(idx);
  }
  std::memcpy(&h, buf, sizeof(h));
  if (h.dst != self() || sizeof(h) + h.len != wc.byte_len - kGrhBytes) return post_recv(idx);
  UdConn* c = conn_of(h.src);
  if (h.type == UdType::kSyn) c = accept_syn(h, buf + sizeof(h), wc.src_qp, out, n);
  if (c == nullptr || c->rx.closed || c->qpn() != wc.src_qp) return post_recv(idx);
  if (h.type == UdType::kBye) {
    if (h.stream == c->rx.stream && h.ack_stream == c->tx_stream()) {
      close_conn(c, out, n, "the peer closed its side");
    }
    return post_recv(idx);
  }
  if (h.ack_stream != 0 && h.ack_stream == c->tx_stream()) {
    c->on_ack(h.ack, h.sack, now_ns(), h.type == UdType::kAck && (h.flags & kUdMark) != 0);
  }
  if ((h.type != UdType::kData && h.type != UdType::kSyn) || c->rx.stream == 0 ||
      h.stream != c->rx.stream) {
    return post_recv(idx);
  }
  take(*c, h, idx, out, n);
}

// A kSyn: a peer opens its stream to this node. Returns the connection it
// belongs to (made now if this is the first word from the peer), or null
// when it is refused.
UdConn* UdTransport::accept_syn(const UdHeader& h, const std::byte* payload, uint32_t src_qp,
                                std::span<Completion> out, size_t* n) {
  UdSyn syn;
  if (h.len < sizeof(syn) || h.seq != 0) return nullptr;
  std::memcpy(&syn, payload, sizeof(syn));
  if (syn.qpn != src_qp || syn.hello.node != h.src || syn.mtu < 256) return nullptr;
  UdConn* c = conn_of(h.src);
  if (c != nullptr && c->rx.stream == h.stream) return c;  // sent again: a duplicate
  if (!hellos_.accept(syn.hello, self(), token_.load(), hello_key_)) {
    LT_DEBUG("ud: a hello from node %u was refused", h.src);
    return nullptr;
  }
  if (c != nullptr && c->rx.stream != 0) {
    // A new stream from a peer that had one: it closed its side (it took
    // this node for lost), so this side closes too and starts afresh.
    close_conn(c, out, n, "the peer opened a new stream");
    c = nullptr;
  }
  if (c == nullptr) {
    UdAddress a;
    std::memcpy(a.gid, syn.gid, 16);
    a.qpn = syn.qpn;
    a.lid = syn.lid;
    a.mtu = syn.mtu;
    std::string why;
    auto ah = make_ah(a, &why);
    if (!ah) {
      LT_WARN("ud: node %u: %s", h.src, why.c_str());
      return nullptr;
    }
    auto conn = std::make_shared<UdConn>(this, h.src, *ah, a.qpn, std::min(mtu_, a.mtu));
    auto served = conns_.add_dialed(h.src, conn, [] { return Status::ok(); });
    if (!served) return nullptr;
    if (served->get() == conn.get() && !conn->start(make_syn(h.src))) {
      conn->broken_.store(true);
      has_broken_.store(true);
    }
    refresh_conns();
    c = served->get();
  }
  if (c->qpn() != src_qp) return nullptr;
  c->rx.stream = h.stream;
  c->rx.next = 0;
  return c;
}

void UdTransport::note_ack(UdConn& c) {
  if (c.rx.in_acks) return;
  c.rx.in_acks = true;
  acks_.push_back(&c);
}

// Datagram `idx` (header h) of c's stream: in order it is taken with every
// early one it lets through; early, it waits; a duplicate is dropped. Each
// is acknowledged (at once when out of order).
void UdTransport::take(UdConn& c, const UdHeader& h, uint32_t idx, std::span<Completion> out,
                       size_t* n) {
  UdConn::Rx& r = c.rx;
  const auto window = static_cast<uint32_t>(r.held.size());
  note_ack(c);
  if (seq_before(h.seq, r.next)) {
    r.ack_now = true;  // its acknowledgement was lost: say it again
    return post_recv(idx);
  }
  if (h.seq - r.next >= window) return post_recv(idx);  // beyond the window: sent again later
  if (h.seq != r.next) {
    int32_t& held = r.held[h.seq & (window - 1)];
    if (held >= 0 || rx_posted_ < rx_reserve_) {
      // A duplicate; or holding it would leave too few buffers posted for the
      // datagrams that fill the holes (every peer's early datagrams could
      // take them all, and the stream would stop): it is sent again.
      post_recv(idx);
    } else {
      held = static_cast<int32_t>(idx);
      ++r.held_count;
    }
    r.ack_now = true;
    return;
  }
  take_one(c, idx, out, n);
  ++r.next;
  ++r.unacked;
  while (r.held_count > 0) {
    int32_t& held = r.held[r.next & (window - 1)];
    if (held < 0) break;
    const auto next = static_cast<uint32_t>(held);
    held = -1;
    --r.held_count;
    take_one(c, next, out, n);
    ++r.next;
    ++r.unacked;
  }
  c.ack_word.store(uint64_t{r.stream} << 32 | r.next, std::memory_order_release);
}

// The next datagram of c's stream, in receive buffer `idx`.
void UdTransport::take_one(UdConn& c, uint32_t idx, std::span<Completion> out, size_t* n) {
  const std::byte* buf = rx_buf(idx) + kGrhBytes;
  UdHeader h;
  std::memcpy(&h, buf, sizeof(h));
  const std::byte* p = buf + sizeof(h);
  UdConn::Rx& r = c.rx;
  if (h.type == UdType::kSyn) return post_recv(idx);  // seq 0 opens the stream
  bool ok = true;
  if (h.flags & kUdFirst) {
    ok = !r.in_msg && h.msg_len <= caps_.max_msg && h.len <= h.msg_len;
    if (ok && (h.flags & kUdLast)) {
      if (h.len == h.msg_len) {
        // One datagram: handed over in its receive buffer (release_rx).
        return deliver(recv_completion(c.peer(), p, h.len, h.imm), out, n);
      }
      ok = false;
    }
    if (ok) {
      r.msg.reset(new std::byte[h.msg_len]);
      r.msg_len = h.msg_len;
      r.msg_off = 0;
      r.msg_imm = h.imm;
      r.in_msg = true;
    }
  }
  ok = ok && r.in_msg && h.len <= r.msg_len - r.msg_off;
  if (ok) {
    std::memcpy(r.msg.get() + r.msg_off, p, h.len);
    r.msg_off += h.len;
  }
  post_recv(idx);
  if (ok && (h.flags & kUdLast)) {
    ok = r.msg_off == r.msg_len;
    if (ok) {
      const std::byte* data = r.msg.get();
      lent_msgs_.push_back(std::move(r.msg));
      r.in_msg = false;
      deliver(recv_completion(c.peer(), data, r.msg_len, r.msg_imm), out, n);
    }
  }
  if (!ok && !c.broken_.exchange(true)) {
    LT_WARN("ud: node %u sent a malformed stream (datagram %u); closing it", c.peer(), h.seq);
    has_broken_.store(true, std::memory_order_seq_cst);
  }
}

void UdTransport::deliver(const Completion& c, std::span<Completion> out, size_t* n) {
  if (*n < out.size()) {
    out[(*n)++] = c;
  } else {
    ready_.push_back(c);
  }
}

void UdTransport::send_ack(UdConn& c, uint64_t now) {
  UdConn::Rx& r = c.rx;
  const bool needed = r.ack_now || r.mark || r.held_count != 0 ||
                      c.acked_upto.load(std::memory_order_acquire) != r.next;
  r.ack_now = false;
  r.unacked = 0;
  r.ack_due = 0;
  if (r.stream == 0 || r.closed || !needed) return;  // a datagram going back carried it
  uint32_t slot;
  if (!take_slots(1, &slot)) {
    r.ack_due = now + kAckDelayNs;  // no slot now: the timer tries again
    lower_to_timer(r.ack_due);
    return;
  }
  UdHeader h{};
  h.type = UdType::kAck;
  h.flags = r.mark ? kUdMark : 0;
  h.src = self();
  h.dst = c.peer();
  h.ack_stream = r.stream;
  h.ack = r.next;
  h.sack = c.sack_bits();
  std::memcpy(slot_ptr(slot), &h, sizeof(h));
  slot_state_[slot].store(kReleased, std::memory_order_relaxed);  // the device's alone
  slot_posted(slot);
  const UdSend s{slot, static_cast<uint32_t>(sizeof(h)), kNoSeq};
  if (send(c, &s, 1) == 0) {
    r.ack_due = now + kAckDelayNs;
    lower_to_timer(r.ack_due);
    return;
  }
  c.acked_upto.store(r.next, std::memory_order_release);
  if (r.mark) marks_sent_.fetch_add(1, std::memory_order_relaxed);
  r.mark = false;
}

void UdTransport::flush_acks(uint64_t now) {
  for (UdConn* c : acks_) {
    UdConn::Rx& r = c->rx;
    r.in_acks = false;
    if (r.closed) continue;
    if (r.ack_now || r.unacked >= r.held.size() / 4) {
      send_ack(*c, now);
    } else if (r.unacked > 0 && r.ack_due == 0) {
      r.ack_due = now + kAckDelayNs;
      lower_to_timer(r.ack_due);
    }
  }
  acks_.clear();
}

void UdTransport::release_rx(std::span<const Completion> done) {
  for (const Completion& c : done) {
    if (c.kind != CqKind::kRecv || c.rx == nullptr) continue;
    if (c.rx >= rx_mem_ && c.rx < rx_mem_ + rx_len_) {
      post_recv(static_cast<uint32_t>((c.rx - rx_mem_) / rx_stride_));
      continue;
    }
    auto it = std::find_if(lent_msgs_.begin(), lent_msgs_.end(),
                           [&](const auto& m) { return m.get() == c.rx; });
    if (it != lent_msgs_.end()) {
      std::swap(*it, lent_msgs_.back());
      lent_msgs_.pop_back();
    }
  }
  conns_.release_closed();
}

}  // namespace lt::transport::verbs
