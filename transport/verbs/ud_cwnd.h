// The congestion window of one ud stream (ARCHITECTURE §6e), counted in
// datagrams: how many may be unacknowledged, below the fixed flow window
// (verbs.ud_window, what the receiver holds early).
//
// A UD datagram is lost, not queued, when the receiver has no receive
// buffer posted for it (the shared queue is empty) or a link drops it, so a
// fixed window lets many senders to one node overrun its buffers and then
// resend into the same overrun. The window follows NewReno's rules
// (RFC 5681, RFC 6582) in datagrams, but starts at the flow window, as
// datacenter transports start at line rate (DCQCN, Swift): a fabric without
// loss never sees the window below the fixed one.
//   - a congestion event halves the window, once per window of data:
//     events about datagrams sent before the cut belong to that cut. The
//     window does not grow again until the cumulative ack passes what was
//     in flight at the cut; then it grows by one datagram per window's worth
//     acknowledged (additive increase). The events, by Mode:
//       * a mark: an acknowledgement the receiver marked because its
//         posted receive buffers ran low while the stream's datagrams came
//         (kUdMark), as an ECN echo is (RFC 3168): the overrun is signalled
//         before it drops anything;
//       * a loss the selective acks report (a hole below a datagram that
//         arrived);
//   - a retransmission timeout halves the slow-start threshold and restarts
//     from kFloor: each datagram acknowledged adds one up to the threshold,
//     then additive increase again;
//   - in kMarks only marks move the window: losses and timeouts are resent
//     (the timer backing off as always) but cut nothing, so a link that
//     drops at random while receivers keep up does not slow the stream;
//   - never below kFloor: loss that is not congestion (a lossy link) keeps a
//     few datagrams moving per round trip instead of one.
// Not thread-safe: the connection's tx_mu_ guards it.
#pragma once

#include <algorithm>
#include <cstdint>

#include "transport/verbs/ud_wire.h"

namespace lt::transport::verbs {

class UdCwnd {
 public:
  static constexpr uint32_t kFloor = 4;
  /// verbs.ud_congestion: what moves the window.
  enum class Mode : uint32_t {
    kFixed = 0,         // nothing: always the flow window
    kLossAndMarks = 1,  // marks, reported losses and timeouts
    kMarks = 2,         // marks only
  };

  /// `limit`: the flow window, the most the congestion window reaches;
  /// `first_seq`: the stream's first sequence number.
  explicit UdCwnd(uint32_t limit, uint32_t first_seq = 0, Mode mode = Mode::kLossAndMarks)
      : limit_(limit),
        adaptive_(mode != Mode::kFixed),
        loss_cuts_(mode == Mode::kLossAndMarks),
        cwnd_(limit),
        ssthresh_(limit),
        recover_(first_seq) {}

  /// Datagrams that may be unacknowledged now.
  uint32_t window() const { return cwnd_; }
  uint32_t threshold() const { return ssthresh_; }
  /// Cuts made so far (marks, losses and timeouts that cut the window).
  uint64_t cuts() const { return cuts_; }

  /// The cumulative ack moved by `n` datagrams to `cum`.
  void on_acked(uint32_t n, uint32_t cum) {
    if (!adaptive_) return;
    if (!seq_before(cum, recover_)) {  // past the last cut's flight (and kept near the acks)
      const bool recovered = holding_;
      holding_ = false;
      recover_ = cum;
      if (recovered) return;  // the window stays at the cut's value for this ack (NewReno)
    }
    if (holding_ || n == 0) return;
    if (cwnd_ < ssthresh_) {
      const uint32_t grow = std::min(n, ssthresh_ - cwnd_);
      cwnd_ += grow;
      n -= grow;
    }
    acked_ += n;
    while (cwnd_ < limit_ && acked_ >= cwnd_) {
      acked_ -= cwnd_;
      ++cwnd_;
    }
    if (cwnd_ >= limit_) {
      cwnd_ = limit_;
      acked_ = 0;
    }
  }

  /// Datagram `seq` was lost; `nxt` is the next number to be given. True
  /// when that cut the window (the first loss of a window of data).
  bool on_loss(uint32_t seq, uint32_t nxt) { return loss_cuts_ && cut(seq, nxt); }

  /// The receiver marked the acknowledgement that moved the cumulative ack
  /// to `cum` (call before on_acked with it): the datagrams before `cum`
  /// met a receiver short of buffers. True when that cut the window (the
  /// first mark of a window of data); counted in marks().
  bool on_mark(uint32_t cum, uint32_t nxt) {
    if (!adaptive_ || !cut(cum - 1, nxt)) return false;
    ++marks_;
    return true;
  }
  /// Cuts made by marks.
  uint64_t marks() const { return marks_; }

  /// The retransmission timer expired with datagrams up to `nxt` in flight.
  /// A second expiry before the window grew again keeps the threshold. True
  /// when the window follows (kLossAndMarks).
  bool on_timeout(uint32_t nxt) {
    if (!loss_cuts_) return false;
    if (cwnd_ > kFloor) ssthresh_ = std::max(cwnd_ / 2, kFloor);
    cwnd_ = kFloor;
    acked_ = 0;
    recover_ = nxt;
    holding_ = false;  // slow start again from the floor
    ++cuts_;
    return true;
  }

 private:
  // A congestion event about datagram `seq`: halves the window unless a cut
  // after `seq` was sent already answered it.
  bool cut(uint32_t seq, uint32_t nxt) {
    if (!adaptive_ || seq_before(seq, recover_)) return false;
    ssthresh_ = std::max(cwnd_ / 2, kFloor);
    cwnd_ = ssthresh_;
    acked_ = 0;
    recover_ = nxt;
    holding_ = true;
    ++cuts_;
    return true;
  }

  const uint32_t limit_;
  const bool adaptive_;
  const bool loss_cuts_;
  uint32_t cwnd_;
  uint32_t ssthresh_;
  uint32_t acked_ = 0;    // acknowledged since the window last grew by one (additive increase)
  uint32_t recover_;      // losses of datagrams numbered before this are one event
  bool holding_ = false;  // after a loss cut: no growth until the ack passes recover_
  uint64_t cuts_ = 0;
  uint64_t marks_ = 0;
};

}  // namespace lt::transport::verbs
