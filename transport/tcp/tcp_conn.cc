// Conn's send path: frames gathered for one writev, the sending role, the
// queue of copies behind it, corks, and EPOLLOUT.
#include "transport/tcp/tcp_conn.h"

#include <algorithm>
#include <cerrno>

#include "common/log.h"

namespace lt::transport::tcp {

// Gathers the frames of wrs (a prefix of at most kMaxPostBatch that the
// socket takes as they are): an error only when the first is refused.
Result<size_t> Gather::add(std::span<const WorkRequest> wrs, uint32_t max_msg) {
  for (const WorkRequest& wr : wrs) {
    if (count == kMaxPostBatch) break;
    Code refused = Code::kOk;
    size_t len = 0;
    if (wr.op != Op::kSend && wr.op != Op::kWriteImm && wr.op != Op::kWrite) {
      refused = Code::kUnsupported;
    } else if (wr.num_sge > kMaxSge) {
      refused = Code::kInvalidArg;
    } else {
      for (int i = 0; i < wr.num_sge; ++i) len += wr.sge[i].len;
      // A kWrite is no message: the owner buffers none of it, so only the
      // frame's length field and the owner's registration bound it.
      if (wr.op == Op::kWrite ? len > UINT32_MAX - kDesc : len > max_msg) {
        refused = Code::kInvalidArg;
      }
    }
    if (refused != Code::kOk) {
      if (count == 0) return refused;
      break;
    }
    // A post sent by reference reports one signaled request, when it is
    // all sent: a second one starts the next post.
    const bool wr_signaled = wr.flags & kWrSignaled;
    const bool wr_by_ref = wr_signaled && (wr.flags & kWrByRef);
    if (count != 0 && (by_ref || wr_by_ref) && signaled && wr_signaled) break;
    by_ref = by_ref || wr_by_ref;
    if (wr_signaled) {
      signaled = true;
      done_id = wr.wr_id;
    }
    if (wr.op == Op::kWrite) {
      // Header, descriptor, then the bytes; the receiver places them.
      hdrs[count] = wire::make_frame(wire::FrameKind::kWrite, static_cast<uint32_t>(kDesc + len));
      descs[count] = wire::WriteDesc{wr.remote.addr, wr.remote.rkey};
      iov[niov++] = {&hdrs[count], kHdr};
      iov[niov++] = {&descs[count], kDesc};
      total += kDesc;
    } else {
      hdrs[count] =
          wire::make_frame(wr.op == Op::kSend ? wire::FrameKind::kData : wire::FrameKind::kDataImm,
                           static_cast<uint32_t>(len), wr.op == Op::kSend ? 0 : wr.imm);
      iov[niov++] = {&hdrs[count], kHdr};
    }
    for (int i = 0; i < wr.num_sge; ++i) {
      if (wr.sge[i].len == 0) continue;
      ref_iov[niov] = wr_by_ref && wr.sge[i].len >= kByRefMin;
      iov[niov++] = {const_cast<std::byte*>(wr.sge[i].addr), wr.sge[i].len};
    }
    total += kHdr + len;
    more = more && (wr.flags & kWrMore);
    ++count;
  }
  return count;
}

std::string Gather::copy_from(size_t skip, std::string buf) const {
  buf.reserve(total - std::min(skip, total));
  append_to(&buf, skip);
  return buf;
}

void Gather::append_to(std::string* out, size_t skip) const {
  for (int i = 0; i < niov; ++i) {
    size_t l = iov[i].iov_len;
    if (skip >= l) {
      skip -= l;
      continue;
    }
    out->append(static_cast<const char*>(iov[i].iov_base) + skip, l - skip);
    skip = 0;
  }
}

Result<size_t> Conn::post_frames(std::span<const WorkRequest> wrs, bool* owed) {
  if (dead_.load(std::memory_order_acquire)) return Code::kPeerDown;
  if (wrs.empty()) return size_t{0};
  Gather g;
  auto got = g.add(wrs, t_->caps_.max_msg);
  if (!got) return got;
  const bool defer = wrs[0].flags & kWrDeferred;
  const bool must_queue = wrs[0].flags & kWrMustQueue;
  const bool cork = defer || (g.more && g.total <= kCorkFrameMax);
  // A large post that will be queued is copied before the lock, so that no
  // other poster waits on a copy (or on the allocation's system call) and a
  // deferred poster, preempted mid-copy (it runs idle), holds no lock. A
  // deferred post is always queued; another when someone sends already (a
  // guess: if the socket frees up meanwhile, the copy goes unused).
  // Back-pressure is asked first, so a refused post copies nothing. A post
  // by reference (kWrByRef) is never copied whole.
  std::string copy;
  if (g.total > kCorkFrameMax) {
    bool busy = false;
    if (over_queue_limit(must_queue, &busy)) return size_t{0};
    if ((defer || busy) && !g.by_ref) copy = copy_out(g, 0);
  }
  for (;;) {
    switch (queue_or_claim(g, cork, defer, must_queue, copy.empty() ? nullptr : &copy)) {
      case Claim::kQueued:
        *owed = g.by_ref;
        return g.count;
      case Claim::kRefused:
        spares_.give(&copy);
        return size_t{0};  // back-pressure
      case Claim::kDrain:
        *owed = g.by_ref;
        drain();  // the held batch, these frames last
        return g.count;
      case Claim::kSend:
        break;
    }
    if (!corked_.load(std::memory_order_relaxed)) {
      spares_.give(&copy);  // not needed after all
      break;
    }
    // Corked frames are waiting (we hold the sending role): they go first.
    corked_.store(false, std::memory_order_relaxed);
    drain();  // gives the sending role back; then try again for our frames
  }
  ssize_t n = send_iov(g.iov, g.niov);
  if (n < 0) {
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      LT_DEBUG("tcp: send to node %u failed: %s", peer_.load(), strerror(errno));
      mark_dead();
      std::lock_guard<std::mutex> lock(mu_);
      sending_ = false;
      return Code::kPeerDown;
    }
    n = 0;
  }
  if (static_cast<size_t>(n) < g.total) {
    const auto sent = static_cast<size_t>(n);
    if (g.by_ref) {
      *owed = true;
      std::lock_guard<std::mutex> lock(mu_);
      queue_by_ref(g, sent, true);
      queued_ += g.total - sent;
      out_off_ = 0;
    } else {
      std::string rest = copy_out(g, sent);
      std::lock_guard<std::mutex> lock(mu_);
      queued_ += rest.size();
      outq_.push_front(std::move(rest));
      out_off_ = 0;
    }
  }
  drain();
  return g.count;
}

// Either the frames are queued (someone sends, EPOLLOUT will, or they join
// or start a cork), refused for back-pressure, or this caller takes the
// sending role and writes them itself (kSend), or writes the held batch
// they end (kDrain: they would take it past kCorkHoldMax). Deferred frames
// (kWrDeferred) are held like corked ones, of any size, and never make the
// caller the sender: flush() sends them.
Conn::Claim Conn::queue_or_claim(const Gather& g, bool cork, bool defer, bool must_queue,
                                 std::string* copy) {
  bool list_cork = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Only small corked frames pass the back-pressure limit (a reply batch's).
    if ((!cork || defer) && queued_ > t_->config_.max_queued_bytes && !must_queue) {
      return Claim::kRefused;
    }
    if (cork && corked_ && !sending_) {  // we join the held batch
      hold(g, copy);
      if (defer || queued_ <= kCorkHoldMax) return Claim::kQueued;
      corked_ = false;
      sending_ = true;
      return Claim::kDrain;
    }
    if (sending_ || (!outq_.empty() && !corked_)) {
      // Someone sends (or EPOLLOUT will): queue a copy (or references).
      if (g.by_ref) {
        queue_by_ref(g, 0, false);
      } else {
        outq_.push_back(copy != nullptr ? std::move(*copy) : copy_out(g, 0));
      }
      queued_ += g.total;
      return Claim::kQueued;
    }
    if (!cork) {
      sending_ = true;
      return Claim::kSend;
    }
    // The socket is idle: hold the frames until a post without kWrMore or
    // flush(), which send the whole batch with one system call.
    hold(g, copy);
    corked_ = true;
    list_cork = !cork_listed_;
    cork_listed_ = true;
  }
  // Held; still listed from an earlier cork (a post without kWrMore sent
  // that one, and flush() has not run since) or listed now. Either way we
  // do not hold the sending role: never fall through to drain().
  if (list_cork) t_->add_corked(shared_from_this());
  return Claim::kQueued;
}

// Held frames (mu_ held, nobody sending, so no drain points into outq_):
// the batch is one string, appended to; a new batch starts in the spare
// buffer a drain left, so a stream of held frames allocates nothing. A
// frame copied already (`copy`) is queued as it is, and a batch never
// grows past its buffer's capacity (that would copy it again): a frame
// that does not fit starts a new one.
void Conn::hold(const Gather& g, std::string* copy) {
  queued_ += g.total;
  if (copy != nullptr) {
    outq_.push_back(std::move(*copy));
    return;
  }
  if (g.by_ref) {
    queue_by_ref(g, 0, false);
    return;
  }
  if (!corked_ || outq_.empty() || outq_.back().ref != nullptr || outq_.back().owes ||
      outq_.back().own.size() + g.total > outq_.back().own.capacity()) {
    std::string b = std::move(spare_);
    b.clear();
    b.reserve(std::max(kCorkHoldMax, g.total));
    outq_.push_back(std::move(b));
  }
  g.append_to(&outq_.back().own);
}

// The large sges of a post by reference go into the queue as pointers; the
// frame headers and small sges between them as copies. The last entry owes
// the post's kSendDone.
void Conn::queue_by_ref(const Gather& g, size_t skip, bool front) {
  Queued items[kMaxPostBatch * (2 + kMaxSge)];
  size_t k = 0;
  for (int i = 0; i < g.niov; ++i) {
    const size_t l = g.iov[i].iov_len;
    if (skip >= l) {
      skip -= l;
      continue;
    }
    const auto* p = static_cast<const std::byte*>(g.iov[i].iov_base) + skip;
    if (g.ref_iov[i]) {
      items[k].ref = p;
      items[k++].ref_len = l - skip;
    } else {
      if (k == 0 || items[k - 1].ref != nullptr) ++k;
      items[k - 1].own.append(reinterpret_cast<const char*>(p), l - skip);
    }
    skip = 0;
  }
  if (k == 0) return;
  items[k - 1].owes = true;
  items[k - 1].done_id = g.done_id;
  if (front) {
    for (size_t i = k; i-- > 0;) outq_.push_front(std::move(items[i]));
  } else {
    for (size_t i = 0; i < k; ++i) outq_.push_back(std::move(items[i]));
  }
}

// Back-pressure for a large post; *busy: someone sends, so the post will
// most likely be queued.
bool Conn::over_queue_limit(bool must_queue, bool* busy) {
  std::lock_guard<std::mutex> lock(mu_);
  *busy = sending_ || (!outq_.empty() && !corked_);
  return !must_queue && queued_ > t_->config_.max_queued_bytes;
}

void Conn::flush_cork() {
  {
    std::lock_guard<std::mutex> g(mu_);
    cork_listed_ = false;
    if (sending_ || !corked_.load(std::memory_order_relaxed)) return;
    sending_ = true;
    corked_.store(false, std::memory_order_relaxed);
  }
  drain();
}

Result<size_t> Conn::post(std::span<const WorkRequest> wrs) {
  bool owed = false;
  auto r = post_frames(wrs, &owed);
  if (r.is_ok() && !owed) {
    // Sends complete when posted (the transport owns any unsent bytes), so a
    // signaled request is reported at once, through the next poll(). A post
    // by reference that was queued is reported by whoever sends its end.
    for (size_t i = 0; i < *r; ++i) {
      if (wrs[i].flags & kWrSignaled) t_->report_done(wrs[i].wr_id, peer_.load(), Code::kOk, false);
    }
  }
  return r;
}

void Conn::fail_owed() {
  uint64_t ids[64];
  size_t n = 0;
  for (bool more = true; more;) {
    {
      std::lock_guard<std::mutex> g(mu_);
      more = false;
      for (Queued& q : outq_) {
        if (!q.owes) continue;
        if (n == std::size(ids)) {
          more = true;
          break;
        }
        q.owes = false;
        ids[n++] = q.done_id;
      }
    }
    for (size_t i = 0; i < n; ++i) t_->report_done(ids[i], peer_.load(), Code::kPeerDown, true);
    n = 0;
  }
}

void Conn::drain() {
  for (;;) {
    iovec iov[kMaxIov];
    int niov = 0;
    {
      std::lock_guard<std::mutex> g(mu_);
      if (outq_.empty() || dead_.load(std::memory_order_relaxed)) {
        sending_ = false;
        retry_ = false;
        return;
      }
      size_t off = out_off_;
      for (auto& s : outq_) {
        if (niov == kMaxIov) break;
        iov[niov++] = {const_cast<char*>(s.data()) + off, s.size() - off};
        off = 0;
      }
    }
    ssize_t n = send_iov(iov, niov);
    if (n < 0) {
      if (errno == EINTR) continue;
      std::lock_guard<std::mutex> g(mu_);
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (retry_) {
          retry_ = false;
          continue;
        }
      } else {
        mark_dead();
      }
      sending_ = false;
      return;
    }
    // Sent buffers are kept or freed after the lock (a large one's free is
    // a system call), and the kSendDone a post by reference owes reported;
    // at most one per iovec was sent.
    std::string sent[kMaxIov];
    uint64_t done[kMaxIov];
    size_t nsent = 0, ndone = 0;
    {
      std::lock_guard<std::mutex> g(mu_);
      size_t left = static_cast<size_t>(n);
      queued_ -= left;
      while (left > 0) {
        size_t avail = outq_.front().size() - out_off_;
        if (avail <= left) {
          left -= avail;
          Queued& q = outq_.front();
          if (q.owes) done[ndone++] = q.done_id;
          // A held batch's buffer is kept for the next one.
          if (q.own.capacity() >= kCorkHoldMax && spare_.capacity() < kCorkHoldMax) {
            spare_ = std::move(q.own);
          } else if (q.ref == nullptr) {
            sent[nsent++] = std::move(q.own);
          }
          outq_.pop_front();
          out_off_ = 0;
        } else {
          out_off_ += left;
          left = 0;
        }
      }
    }
    for (size_t i = 0; i < nsent; ++i) spares_.give(&sent[i]);
    for (size_t i = 0; i < ndone; ++i) t_->report_done(done[i], peer_.load(), Code::kOk, true);
  }
}

void Conn::on_writable() {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (sending_) {
      retry_ = true;
      return;
    }
    if (outq_.empty()) return;
    sending_ = true;
    corked_.store(false, std::memory_order_relaxed);
  }
  drain();
}

}  // namespace lt::transport::tcp
