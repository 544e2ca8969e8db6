// When a spinning thread gives its core away, and when it moves to another.
//
// A spinner yields once its spin goes long, because the thread it waits for
// may share its core. Where that thread last ran decides whether a yield can
// help (PeerCpu, from the CPU hints shared-memory records and message
// headers carry):
//  - The peer ran on another CPU: a yield cannot help it. It only hands this
//    core to whatever else wants it, and when that is a thread that does not
//    give it back (a CPU hog on this core) it costs a whole time slice. The
//    spinner does not yield.
//  - The peer ran on this CPU, or nothing tells (no message from it yet, or it
//    runs on another machine: a header's hint counts only from this one): yield. A yield
//    that comes back at once found nobody else wanting the core, and the next
//    comes after twice the gap, up to `max_gap_ns`, so a thread alone on its
//    core pays a system call only that often. One that took longer than
//    kHandedNs gave the core to another thread, so the next comes at the next
//    look: a ping-pong of two threads on one core then costs one switch per
//    hop instead of a whole gap.
// Two spinners that feed each other on one core while another core runs
// something else (a CPU hog) is a placement the kernel's balancer keeps:
// moving one of three busy tasks between two cores gains it nothing. It
// costs a context switch per hop where one spinner per core costs none. So
// after kMoveAfter hand-offs in a row to a peer known to run here, the
// spinner moves itself to another CPU it may run on (at most once per
// kMoveEveryNs). The peer learns where it went from its next record.
//
// Thread contract: a YieldPacer belongs to one spinning thread and one wait;
// the hand-off streak is the thread's (thread-local), kept across its waits.
// PeerCpu is written by the progress token holder and read by any spinner.
#pragma once

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "common/cpu_hint.h"
#include "common/time.h"
#include "transport/transport.h"

namespace lt::proto {

/// Where the last peer that sent this engine a hinted record ran (one peer:
/// the hint helps a thread in an exchange with one peer, and tells nothing
/// about the others).
class PeerCpu {
 public:
  /// A record from `from` written on `cpu` (a known hint).
  void note(transport::NodeId from, CpuHint cpu) {
    const uint64_t v = (uint64_t{from} << 16) | cpu;
    if (word_.load(std::memory_order_relaxed) != v) word_.store(v, std::memory_order_relaxed);
  }
  /// The CPU `peer` last sent from; kNoNode: whichever peer sent last.
  /// Unknown when the last hint came from another peer.
  CpuHint of(transport::NodeId peer) const {
    const uint64_t v = word_.load(std::memory_order_relaxed);
    if (peer != transport::kNoNode && (v >> 16) != peer) return kCpuUnknown;
    return static_cast<CpuHint>(v & 0xffff);
  }

 private:
  alignas(64) std::atomic<uint64_t> word_{0};  // node << 16 | CpuHint
};

/// Moves the calling thread to another CPU of its affinity mask and gives it
/// its mask back (the kernel then leaves it where it is). False when the mask
/// has one CPU or a call fails.
bool move_to_another_cpu();

class YieldPacer {
 public:
  /// `peers` may be null (no hints: always yield when due); `peer` is the
  /// node the wait is for (kNoNode: any); `may_move`: engine.move_spinners.
  YieldPacer(uint64_t max_gap_ns, const PeerCpu* peers, transport::NodeId peer,
             bool may_move = true)
      : max_gap_ns_(max_gap_ns), peers_(peers), peer_(peer), may_move_(may_move) {}

  /// A new spin: the first yield after one gap.
  void start(uint64_t now) { next_ns_ = now + gap_ns_; }
  /// Whether maybe_yield(now) would look at yielding (a `now` behind the
  /// clock may say no where a fresh one says yes, never the reverse).
  bool due(uint64_t now) const { return now >= next_ns_; }

  enum class Did : uint8_t {
    kNotDue,   // no yield due yet
    kSkipped,  // due, but the peer runs on another CPU
    kAlone,    // yielded; nobody else wanted the core
    kHanded,   // yielded; the core went to another thread
  };
  /// Called as the spinner reads the clock: yields when due. `now` moves
  /// past the yield when one was made.
  Did maybe_yield(uint64_t* now);

  /// How often the pacer moved the calling thread.
  static uint32_t moves();
  /// What a pacer calls to move its thread: move_to_another_cpu unless a
  /// test put another in (a test keeps its threads on one CPU to see the
  /// pacer decide). nullptr restores the default.
  using Mover = bool (*)();
  static void set_mover(Mover m);

  static constexpr uint64_t kHandedNs = 1500;
  static constexpr uint32_t kMoveAfter = 8;
  static constexpr uint64_t kMoveEveryNs = 1000000;

 private:
  static constexpr uint64_t kMinGapNs = 250;
  void handed(uint64_t at, CpuHint peer);

  const uint64_t max_gap_ns_;
  const PeerCpu* const peers_;
  const transport::NodeId peer_;
  const bool may_move_;
  uint64_t gap_ns_ = kMinGapNs;
  uint64_t next_ns_ = 0;
};

}  // namespace lt::proto
