// The ud transport's send side of a connection (ud_conn.h): numbering,
// the window, acknowledgements, retransmission.
#include <infiniband/verbs.h>
#include <sodium.h>

#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "common/time.h"
#include "transport/verbs/ud_conn.h"
#include "transport/verbs/ud_transport.h"

namespace lt::transport::verbs {

namespace {

// Retransmission timeouts: from the measured RTT (RFC 6298's estimator),
// never below kMinRtoNs (a poller that was descheduled for a moment must
// not look like loss), doubling on each expiry up to kMaxRtoNs.
constexpr uint64_t kMinRtoNs = 2'000'000, kFirstRtoNs = 10'000'000, kMaxRtoNs = 200'000'000;

// now - then, or 0 when `then` is later: another thread may have stamped it
// after this one read the clock.
uint64_t since(uint64_t now, uint64_t then) { return now > then ? now - then : 0; }

uint32_t random_stream() {
  uint32_t s = 0;
  while (s == 0) randombytes_buf(&s, sizeof(s));
  return s;
}

// [off, off + n) of the bytes a work request gathers, as at most two spans.
void slice(const WorkRequest& wr, uint32_t off, uint32_t n, std::span<const std::byte> out[2]) {
  out[0] = out[1] = {};
  int k = 0;
  for (int i = 0; i < wr.num_sge && n > 0; ++i) {
    const Sge& g = wr.sge[i];
    if (off >= g.len) {
      off -= g.len;
      continue;
    }
    const uint32_t take = std::min(n, g.len - off);
    out[k++] = std::span<const std::byte>(g.addr + off, take);
    n -= take;
    off = 0;
  }
}

}  // namespace

UdConn::UdConn(UdTransport* t, NodeId peer, ibv_ah* ah, uint32_t qpn, uint32_t mtu)
    : peer_(peer),
      created_ns_(now_ns()),
      t_(t),
      ah_(ah),
      qpn_(qpn),
      payload_max_(mtu - sizeof(UdHeader)),
      window_(t->config().ud_window),
      tx_stream_(random_stream()),
      // Bytes a connection keeps copied while its window is full, before
      // posts meet back-pressure (kWrMustQueue posts and a message when
      // none waits always go): half the send slots' bytes.
      waiting_cap_(size_t{t->config().ud_send_slots} * mtu / 2),
      cwnd_(window_, 0, static_cast<UdCwnd::Mode>(t->config().ud_congestion)),
      rto_ns_(kFirstRtoNs) {
  segs_.resize(window_);
  want_.resize(2 * window_);  // a slot freed while wanted leaves a stale entry
  rx.held.assign(window_, -1);
}

UdConn::~UdConn() { drop_ah(); }

void UdConn::drop_ah() {
  if (ah_ != nullptr) ibv_destroy_ah(ah_);
  ah_ = nullptr;
}

void UdConn::want(uint32_t seq) {
  Seg& s = segs_[seq & (window_ - 1)];
  if (s.queued) return;
  s.queued = true;
  want_[(want_head_ + want_n_) % (2 * window_)] = seq;
  ++want_n_;
}

void UdConn::add_segment(uint32_t slot, UdType type, uint8_t flags, uint32_t imm, uint32_t msg_len,
                         std::span<const std::byte> a, std::span<const std::byte> b) {
  std::byte* p = t_->slot_ptr(slot);
  UdHeader h{};
  h.type = type;
  h.flags = flags;
  h.len = static_cast<uint16_t>(a.size() + b.size());
  h.src = t_->self();
  h.dst = peer();
  h.stream = tx_stream_;
  h.seq = nxt_;
  h.imm = imm;
  h.msg_len = msg_len;
  std::memcpy(p, &h, sizeof(h));
  if (!a.empty()) std::memcpy(p + sizeof(h), a.data(), a.size());
  if (!b.empty()) std::memcpy(p + sizeof(h) + a.size(), b.data(), b.size());
  Seg& s = segs_[nxt_ & (window_ - 1)];
  s = Seg{};
  s.slot = slot;
  s.bytes = static_cast<uint32_t>(sizeof(h) + h.len);
  want(nxt_);
  ++nxt_;
}

// Straight into datagrams when nothing waits and the whole message fits the
// window and the free slots; else copied to wait. False: back-pressure.
bool UdConn::add_message(const WorkRequest& wr, uint32_t len) {
  const uint32_t imm = wr.op == Op::kWriteImm ? wr.imm : 0;  // a kSend carries none
  const uint32_t frags = len == 0 ? 1 : (len + payload_max_ - 1) / payload_max_;
  if (waiting_.empty() && frags <= room()) {
    uint32_t slots[kMaxUdWindow];
    if (t_->take_slots(frags, slots)) {
      for (uint32_t k = 0, off = 0; k < frags; ++k) {
        const uint32_t n = std::min(payload_max_, len - off);
        std::span<const std::byte> part[2];
        slice(wr, off, n, part);
        const uint8_t flags = (k == 0 ? kUdFirst : 0) | (k + 1 == frags ? kUdLast : 0);
        add_segment(slots[k], UdType::kData, flags, imm, len, part[0], part[1]);
        off += n;
      }
      return true;
    }
  }
  if (!waiting_.empty() && waiting_bytes_ + len > waiting_cap_ && !(wr.flags & kWrMustQueue)) {
    return false;
  }
  Waiting w;
  w.bytes.resize(len);
  std::span<const std::byte> part[2];
  slice(wr, 0, len, part);
  if (!part[0].empty()) std::memcpy(w.bytes.data(), part[0].data(), part[0].size());
  if (!part[1].empty())
    std::memcpy(w.bytes.data() + part[0].size(), part[1].data(), part[1].size());
  w.imm = imm;
  waiting_bytes_ += len;
  waiting_.push_back(std::move(w));
  fill_locked();
  return true;
}

// Waiting messages into datagrams while the window and the slots allow.
void UdConn::fill_locked() {
  while (!waiting_.empty() && room() > 0) {
    uint32_t slot;
    if (!t_->take_slots(1, &slot)) {
      need_backlog_ = true;  // slots come back with other peers' acks
      return;
    }
    Waiting& w = waiting_.front();
    const uint32_t len = static_cast<uint32_t>(w.bytes.size());
    const uint32_t n = std::min(payload_max_, len - w.off);
    const uint8_t flags = (w.off == 0 ? kUdFirst : 0) | (w.off + n == len ? kUdLast : 0);
    add_segment(slot, UdType::kData, flags, w.imm, len,
                std::span<const std::byte>(w.bytes).subspan(w.off, n), {});
    w.off += n;
    if (w.off == len) {
      waiting_bytes_ -= len;
      waiting_.pop_front();
    }
  }
}

// Up to `max` datagrams to post now, each counted in the device. One whose
// slot the device still reads (an earlier send of it) is left to the timer.
size_t UdConn::collect_locked(UdSend* out, size_t max, uint64_t now) {
  const uint64_t word = ack_word.load(std::memory_order_acquire);
  size_t k = 0;
  while (k < max && want_n_ > 0) {
    const uint32_t seq = want_[want_head_];
    want_head_ = (want_head_ + 1) % (2 * window_);
    --want_n_;
    if (seq_before(seq, una_) || !seq_before(seq, nxt_)) continue;
    Seg& s = segs_[seq & (window_ - 1)];
    s.queued = false;
    if (t_->slot_in_device(s.slot)) continue;
    auto* h = reinterpret_cast<UdHeader*>(t_->slot_ptr(s.slot));
    h->ack_stream = static_cast<uint32_t>(word >> 32);
    h->ack = static_cast<uint32_t>(word);
    h->sack = 0;
    if (s.sent_ns != 0) {
      s.resent = true;
      t_->note_retransmit();
    }
    s.sent_ns = now;
    t_->slot_posted(s.slot);
    out[k++] = UdSend{s.slot, s.bytes, seq};
  }
  if (k > 0 && (word >> 32) != 0) acked_upto.store(static_cast<uint32_t>(word));
  return k;
}

// Posts what is wanted, in batches, with tx_mu_ let go around each post.
void UdConn::post_all(std::unique_lock<std::mutex>& lock) {
  UdSend batch[kUdBatch];
  for (;;) {
    const size_t k = collect_locked(batch, kUdBatch, now_ns());
    const bool backlog = need_backlog_;
    need_backlog_ = false;
    lock.unlock();
    if (backlog) t_->note_backlog(this);
    const size_t m = k == 0 ? 0 : t_->send(*this, batch, k);
    if (m < k) {
      requeue(batch + m, k - m);
      t_->note_backlog(this);
    }
    lock.lock();
    if (k == 0 || m < k) return;
  }
}

void UdConn::requeue(const UdSend* s, size_t n) {
  std::lock_guard<std::mutex> g(tx_mu_);
  for (size_t i = 0; i < n; ++i) {
    if (!seq_before(s[i].seq, una_) && seq_before(s[i].seq, nxt_)) want(s[i].seq);
  }
}

Result<size_t> UdConn::post(std::span<const WorkRequest> wrs) {
  if (dead_.load(std::memory_order_acquire)) return Status(Code::kPeerDown);
  std::unique_lock<std::mutex> lock(tx_mu_);
  if (tx_closed_) return Status(Code::kPeerDown);  // closed while this thread waited
  const bool busy_before = una_ != nxt_ || !waiting_.empty();
  Status err;
  size_t i = 0;
  for (; i < wrs.size(); ++i) {
    const WorkRequest& wr = wrs[i];
    uint64_t len = 0;
    for (int k = 0; k < wr.num_sge && k < kMaxSge; ++k) len += wr.sge[k].len;
    if (wr.op != Op::kSend && wr.op != Op::kWriteImm) {
      err = Code::kUnsupported;
    } else if (wr.num_sge > kMaxSge || len > t_->caps().max_msg) {
      err = Code::kInvalidArg;
    }
    if (!err.is_ok() || !add_message(wr, static_cast<uint32_t>(len))) break;
  }
  const uint64_t now = now_ns();
  const bool became_busy = !busy_before && (una_ != nxt_ || !waiting_.empty());
  if (became_busy) progress_ns_ = now;
  const uint64_t rto = rto_ns_;
  post_all(lock);
  lock.unlock();
  for (size_t k = 0; k < i; ++k) {
    if (wrs[k].flags & kWrSignaled) t_->report_send_done(wrs[k].wr_id);
  }
  if (became_busy) t_->need_timer(now + rto);
  if (i == 0 && !err.is_ok()) return err;
  return i;
}

bool UdConn::start(const UdSyn& syn) {
  std::unique_lock<std::mutex> lock(tx_mu_);
  uint32_t slot;
  if (!t_->take_slots(1, &slot)) return false;
  add_segment(slot, UdType::kSyn, kUdFirst | kUdLast, 0, sizeof(syn),
              std::span<const std::byte>(reinterpret_cast<const std::byte*>(&syn), sizeof(syn)),
              {});
  const uint64_t now = now_ns();
  progress_ns_ = now;
  const uint64_t rto = rto_ns_;
  post_all(lock);
  lock.unlock();
  t_->need_timer(now + rto);
  return true;
}

void UdConn::rtt_sample(uint64_t rtt) {
  if (srtt_ns_ == 0) {
    srtt_ns_ = rtt;
    rttvar_ns_ = rtt / 2;
  } else {
    const uint64_t diff = srtt_ns_ > rtt ? srtt_ns_ - rtt : rtt - srtt_ns_;
    rttvar_ns_ = (3 * rttvar_ns_ + diff) / 4;
    srtt_ns_ = (7 * srtt_ns_ + rtt) / 8;
  }
  rto_ns_ = std::clamp(srtt_ns_ + 4 * rttvar_ns_, kMinRtoNs, kMaxRtoNs);
}

void UdConn::on_ack(uint32_t cum, uint64_t sack, uint64_t now, bool marked) {
  std::unique_lock<std::mutex> lock(tx_mu_);
  if (seq_before(nxt_, cum) || seq_before(cum, una_)) return;  // stale, or never sent
  progress_ns_ = now;
  if (marked && cwnd_.on_mark(cum, nxt_)) t_->note_window_cut(true);
  // An RTT sample from the newest datagram acknowledged, if no datagram in
  // the range was resent (Karn): a jump over a recovered hole measures the
  // recovery, not the path.
  uint64_t sample = 0;
  bool clean = true;
  const bool moved = una_ != cum;
  const uint32_t newly = cum - una_;
  while (una_ != cum) {
    Seg& s = segs_[una_ & (window_ - 1)];
    clean = clean && !s.resent && !s.sacked;
    if (s.sent_ns != 0 && clean) sample = std::max<uint64_t>(since(now, s.sent_ns), 1);
    t_->release_slot(s.slot);
    s = Seg{};
    ++una_;
  }
  cwnd_.on_acked(newly, cum);
  if (moved) {
    // Progress ends any backoff: the timeout is the estimator's again.
    if (sample != 0 && clean) {
      rtt_sample(sample);
    } else if (srtt_ns_ != 0) {
      rto_ns_ = std::clamp(srtt_ns_ + 4 * rttvar_ns_, kMinRtoNs, kMaxRtoNs);
    } else {
      rto_ns_ = kFirstRtoNs;
    }
  }
  if (sack != 0) {
    // A hole below a datagram that arrived was lost (UD does not reorder
    // one sender's datagrams on a path): resent at once, once; if that is
    // lost too, the timer resends it.
    uint32_t hi = cum;
    for (int i = 0; i < 64; ++i) {
      const uint32_t s = cum + 1 + static_cast<uint32_t>(i);
      if ((sack >> i & 1) == 0 || !seq_before(s, nxt_)) continue;
      segs_[s & (window_ - 1)].sacked = true;
      hi = s;
    }
    for (uint32_t s = cum; seq_before(s, hi); ++s) {
      Seg& g = segs_[s & (window_ - 1)];
      if (g.sacked || g.sent_ns == 0 || g.fast) continue;
      g.fast = true;
      want(s);
      if (cwnd_.on_loss(s, nxt_)) t_->note_window_cut();
    }
  }
  fill_locked();
  post_all(lock);
}

uint64_t UdConn::on_timer(uint64_t now, uint64_t peer_timeout_ns, bool* lost) {
  std::unique_lock<std::mutex> lock(tx_mu_);
  *lost = false;
  if (una_ == nxt_) {
    progress_ns_ = now;  // nothing in flight: waiting for slots is no silence
    if (waiting_.empty()) return 0;
  }
  if (since(now, progress_ns_) > peer_timeout_ns) {
    *lost = true;
    return 0;
  }
  uint64_t next = progress_ns_ + peer_timeout_ns;
  bool resent = false;
  for (uint32_t s = una_; s != nxt_; ++s) {
    Seg& g = segs_[s & (window_ - 1)];
    if (g.sacked || g.sent_ns == 0) continue;
    if (since(now, g.sent_ns) >= rto_ns_) {
      g.fast = false;
      want(s);
      resent = true;
    } else {
      next = std::min(next, g.sent_ns + rto_ns_);
    }
  }
  if (resent) {
    LT_DEBUG(
        "ud: node %u: timeout %llu us, resending from %u to %u (srtt %llu us); its stream: "
        "next %u, acked %u, held %u; receive buffers posted %u",
        peer(), static_cast<unsigned long long>(rto_ns_ / 1000), una_, nxt_,
        static_cast<unsigned long long>(srtt_ns_ / 1000), rx.next, acked_upto.load(), rx.held_count,
        t_->rx_posted());
    rto_ns_ = std::min(rto_ns_ * 2, kMaxRtoNs);
    if (cwnd_.on_timeout(nxt_)) t_->note_window_cut();
    next = std::min(next, now + rto_ns_);
  }
  fill_locked();
  post_all(lock);
  if (!waiting_.empty() || want_n_ > 0) next = std::min(next, now + kMinRtoNs);
  return next;
}

uint64_t UdConn::tx_deadline(uint64_t now, uint64_t peer_timeout_ns) {
  std::lock_guard<std::mutex> g(tx_mu_);
  if (una_ == nxt_ && waiting_.empty()) return 0;
  uint64_t next = progress_ns_ + peer_timeout_ns;
  for (uint32_t s = una_; s != nxt_; ++s) {
    const Seg& seg = segs_[s & (window_ - 1)];
    if (!seg.sacked && seg.sent_ns != 0) next = std::min(next, seg.sent_ns + rto_ns_);
  }
  if (!waiting_.empty() || want_n_ > 0) next = std::min(next, now + kMinRtoNs);
  return next;
}

void UdConn::pump() {
  std::unique_lock<std::mutex> lock(tx_mu_);
  fill_locked();
  post_all(lock);
}

void UdConn::resend_in_flight() {
  std::unique_lock<std::mutex> lock(tx_mu_);
  for (uint32_t s = una_; s != nxt_; ++s) {
    Seg& g = segs_[s & (window_ - 1)];
    if (g.sacked || g.sent_ns == 0) continue;
    g.fast = false;
    want(s);
  }
  fill_locked();
  post_all(lock);
}

void UdConn::close_tx() {
  std::lock_guard<std::mutex> g(tx_mu_);
  tx_closed_ = true;
  for (; una_ != nxt_; ++una_) {
    Seg& s = segs_[una_ & (window_ - 1)];
    t_->release_slot(s.slot);
    s = Seg{};
  }
  want_n_ = 0;
  waiting_.clear();
  waiting_bytes_ = 0;
}

}  // namespace lt::transport::verbs
