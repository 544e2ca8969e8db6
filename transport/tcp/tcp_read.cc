// TcpTransport's receive path: a connection's bytes framed in its rx buffer
// (lent to the engine in place), kWrite frames placed straight from the socket
// into registered memory, and the round over ready connections.
#include <cerrno>

#include "common/log.h"
#include "transport/tcp/tcp_conn.h"

namespace lt::transport::tcp {

bool TcpTransport::read_conn(Conn* c, std::span<Completion> out, size_t* n) {
  size_t read_now = 0;
  // A recv() that returned less than it asked for emptied the socket: after
  // parsing, stop without the recv() that would only say EAGAIN (one system
  // call on every message's path). Edge-triggered epoll reports data that
  // arrives later, and a spinning poller tries again anyway.
  bool drained = false;
  for (;;) {
    if (c->place_left_ > 0) {
      if (ReadStep st = place_rest(c, out, n, &read_now); st != ReadStep::kMore) {
        return st == ReadStep::kDone;
      }
      continue;
    }
    size_t need = kHdr;
    if (ReadStep st = parse_frames(c, out, n, &need); st != ReadStep::kMore) {
      return st == ReadStep::kDone;
    }
    c->rx_need_ = need;
    if (c->rx_begin_ == c->rx_end_ && !c->pinned_) c->rx_begin_ = c->rx_end_ = 0;
    if (c->place_left_ > 0) continue;
    if (drained) {
      c->in_ready_ = false;
      return true;
    }
    if (ReadStep st = recv_more(c, out, n, need, &read_now, &drained); st != ReadStep::kMore) {
      return st == ReadStep::kDone;
    }
  }
}

// The rest of a kWrite: straight from the socket into its target, within the
// same bounds as reads into rx_.
TcpTransport::ReadStep TcpTransport::place_rest(Conn* c, std::span<Completion> out, size_t* n,
                                                size_t* read_now) {
  if (*read_now >= kMaxReadPerPoll) return ReadStep::kFull;
  Registration* reg = c->place_reg_.get();
  if (!reg->enter()) {
    wire::WriteDesc d{reinterpret_cast<uintptr_t>(c->place_at_), 0};
    refuse_write(c, out, n, d, c->place_left_, "region deregistered during the write");
    return ReadStep::kDone;
  }
  ssize_t r = ::recv(c->fd_.get(), c->place_at_, std::min(c->place_left_, kMaxRecv), 0);
  int err = errno;
  reg->leave();
  if (r > 0) {
    c->place_at_ += r;
    c->place_left_ -= static_cast<size_t>(r);
    *read_now += static_cast<size_t>(r);
    if (c->place_left_ == 0) c->place_reg_.reset();
    return ReadStep::kMore;
  }
  return recv_failed(c, out, n, r, err);
}

// A recv() that returned `r` <= 0 (errno `err`): closed, retry, or drained.
TcpTransport::ReadStep TcpTransport::recv_failed(Conn* c, std::span<Completion> out, size_t* n,
                                                 ssize_t r, int err) {
  if (r == 0) {
    close_conn(c, out, n, "closed by peer");
    return ReadStep::kDone;
  }
  if (err == EINTR) return ReadStep::kMore;
  if (err == EAGAIN || err == EWOULDBLOCK) {
    c->in_ready_ = false;
    return ReadStep::kDone;
  }
  close_conn(c, out, n, strerror(err));
  return ReadStep::kDone;
}

// Frames what rx_ holds: hellos, messages (lent to `out` in place) and the
// start of kWrites. kMore when it needs more bytes (*need: how many the
// current frame wants in rx_).
TcpTransport::ReadStep TcpTransport::parse_frames(Conn* c, std::span<Completion> out, size_t* n,
                                                  size_t* need) {
  for (;;) {
    size_t avail = c->rx_end_ - c->rx_begin_;
    auto bytes = std::span<const std::byte>(c->rx_.get() + c->rx_begin_, avail);
    wire::FrameHeader h;
    // Any length for a kWrite (it is not buffered: its registration bounds
    // it); max_msg for the others.
    Status s = wire::decode_frame_header(bytes, UINT32_MAX, &h);
    if (s.code() == Code::kNoResource) return ReadStep::kMore;
    if (s.is_ok() && h.kind != static_cast<uint8_t>(wire::FrameKind::kWrite) &&
        h.length > config_.max_msg_bytes) {
      s = Code::kMalformed;
    }
    if (!s.is_ok()) return drop_malformed(c, out, n, "malformed frame header");
    // Before the hello, accept nothing but a hello-sized hello: an
    // unauthenticated peer must not make us buffer a large frame.
    if (!c->hello_done_ && (h.kind != static_cast<uint8_t>(wire::FrameKind::kHello) ||
                            h.length != sizeof(HelloBody))) {
      return drop_malformed(c, out, n, "bad or missing hello");
    }
    auto kind = static_cast<wire::FrameKind>(h.kind);
    if (kind == wire::FrameKind::kWrite) {  // after the hello (checked above)
      ReadStep st = start_write(c, out, n, bytes, h.length, need);
      if (st != ReadStep::kMore || c->place_left_ > 0 || *need > kHdr) return st;
      continue;
    }
    *need = kHdr + h.length;
    if (avail < *need) return ReadStep::kMore;
    auto body = bytes.subspan(kHdr, h.length);
    if (!c->hello_done_ || kind == wire::FrameKind::kHello) {
      if (c->hello_done_ || kind != wire::FrameKind::kHello || !handle_hello(c, body)) {
        return drop_malformed(c, out, n, "bad or missing hello");
      }
    } else if (kind != wire::FrameKind::kData && kind != wire::FrameKind::kDataImm) {
      return drop_malformed(c, out, n, "unexpected frame kind");
    } else {
      if (*n == out.size()) return ReadStep::kFull;
      fill_recv_completion(&out[(*n)++], c->peer_.load(std::memory_order_relaxed), body.data(),
                           h.length, h.imm);
      if (!c->pinned_) {
        c->pinned_ = true;
        pinned_.push_back(c);
      }
    }
    c->rx_begin_ += *need;
    *need = kHdr;
  }
}

TcpTransport::ReadStep TcpTransport::drop_malformed(Conn* c, std::span<Completion> out, size_t* n,
                                                    const char* why) {
  malformed_.fetch_add(1, std::memory_order_relaxed);
  close_conn(c, out, n, why);
  return ReadStep::kDone;
}

// A kWrite frame at the front of rx_ (`length` bytes after its header): only
// the descriptor is buffered; the bytes go to the target, what rx_ holds of
// them copied now and the rest received in place (place_rest). kMore with
// *need > kHdr: the descriptor is not all in yet.
TcpTransport::ReadStep TcpTransport::start_write(Conn* c, std::span<Completion> out, size_t* n,
                                                 std::span<const std::byte> bytes, uint32_t length,
                                                 size_t* need) {
  if (length < kDesc) {
    refuse_write(c, out, n, wire::WriteDesc{}, length, "shorter than its descriptor");
    return ReadStep::kDone;
  }
  *need = kHdr + kDesc;
  if (bytes.size() < *need) return ReadStep::kMore;
  wire::WriteDesc d;
  std::memcpy(&d, bytes.data() + kHdr, kDesc);
  const size_t len = length - kDesc;
  const char* why = nullptr;
  std::shared_ptr<Registration> reg = writable(d, len, &why);
  if (!reg || !reg->enter()) {
    refuse_write(c, out, n, d, len, reg ? "region deregistered" : why);
    return ReadStep::kDone;
  }
  auto* target = reinterpret_cast<std::byte*>(static_cast<uintptr_t>(d.addr));
  const size_t have = std::min(bytes.size() - *need, len);
  if (have > 0) std::memcpy(target, bytes.data() + *need, have);
  reg->leave();
  c->rx_begin_ += *need + have;
  *need = kHdr;
  if (have < len) {  // rx_ is empty now
    c->place_reg_ = std::move(reg);
    c->place_at_ = target + have;
    c->place_left_ = len - have;
  }
  return ReadStep::kMore;
}

// Makes room in rx_ for the rest of the current frame (`need` bytes from
// rx_begin_) and receives what the socket has. kFull when rx_ is lent out
// (come back after release_rx) or this poll's budget is spent.
TcpTransport::ReadStep TcpTransport::recv_more(Conn* c, std::span<Completion> out, size_t* n,
                                               size_t need, size_t* read_now, bool* drained) {
  if (c->rx_cap_ - c->rx_begin_ < need || c->rx_end_ == c->rx_cap_) {
    if (c->pinned_) return ReadStep::kFull;
    size_t live = c->rx_end_ - c->rx_begin_;
    std::memmove(c->rx_.get(), c->rx_.get() + c->rx_begin_, live);
    c->rx_begin_ = 0;
    c->rx_end_ = live;
    c->rx_reserve(need);
  }
  // At most kMaxRecv per call and kMaxReadPerPoll per connection and poll:
  // a steady stream must not keep the poller here (heartbeats, other
  // peers), and sanitizers account each call at its full length.
  if (*read_now >= kMaxReadPerPoll) return ReadStep::kFull;
  size_t want = std::min(c->rx_cap_ - c->rx_end_, kMaxRecv);
  ssize_t r = ::recv(c->fd_.get(), c->rx_.get() + c->rx_end_, want, 0);
  if (r > 0) {
    c->rx_end_ += static_cast<size_t>(r);
    *read_now += static_cast<size_t>(r);
    *drained = static_cast<size_t>(r) < want;
    return ReadStep::kMore;
  }
  return recv_failed(c, out, n, r, errno);
}

// Reads the connections in ready_; those that ran dry (or closed) leave it.
size_t TcpTransport::read_ready(std::span<Completion> out, size_t n) {
  size_t keep = 0;
  for (size_t i = 0; i < ready_.size(); ++i) {
    Conn* c = ready_[i];
    bool done = c->closed_ || read_conn(c, out, &n);
    if (!done) ready_[keep++] = c;
  }
  ready_.resize(keep);
  return n;
}

}  // namespace lt::transport::tcp
