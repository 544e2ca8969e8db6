// QoS scheduler: the only way proto/ reaches a transport endpoint, and the
// gate every operation passes first (admit) and reports to when it ends
// (complete).
//
// With no classes configured (qos.classes empty) it is a pass-through that
// enforces the tenant's quota on operations in flight. With classes, each
// call belongs to a class (the thread's, set by set_thread_class, else the
// process's qos.class, else the tenant's default); the scheduler measures
// each class's RTT on completions, and a class with a higher class above it
// passes through token buckets whose rates follow the higher classes' RTT
// (RateControl): one per peer it sends to (PeerLanes), cut where a higher
// class is congested at that peer, and the class's own, cut for congestion
// this host's resources carry. A throttled call waits for its tokens in admit(), sleeping,
// bounded by its deadline. LMR quotas (bytes and count) are kept here too.
//
// Thread-safe. Per operation: no allocation; a class's spin lock is held
// for a few instructions, never across a system call.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/config.h"
#include "common/spinlock.h"
#include "common/time.h"
#include "qos/cpu_policy.h"
#include "qos/host_board.h"
#include "qos/rate_control.h"
#include "qos/rtt_histogram.h"
#include "qos/token_bucket.h"
#include "transport/transport.h"

namespace lt::qos {

// Work requests posted are counted per peer by proto (Traffic), per thread:
// a shared counter here cost a locked add on a shared line per post.
struct SchedulerStats {
  uint64_t backpressured = 0;
  uint64_t quota_refused = 0;
};

struct ClassStats {
  std::string name;
  uint32_t priority = 0;
  uint64_t ops = 0, bytes = 0;
  uint64_t in_flight = 0;  // admitted, not completed
  uint64_t waiting = 0;    // calls waiting for tokens now (the class's queue)
  uint64_t rtt_p50_ns = 0, rtt_p99_ns = 0;
  uint64_t target_rtt_ns = 0;    // configured, or derived (0: not yet measured)
  uint64_t throttles = 0;        // times throttling started (the class's, or a peer's)
  uint64_t delayed = 0;          // calls that waited for tokens
  uint64_t rate = 0;             // bytes/s now; RateControl::kUnlimited when not throttled
  uint32_t throttled_peers = 0;  // peers it is throttled towards (rate: the least of them)
  std::vector<std::pair<transport::NodeId, uint64_t>> peer_rates;  // theirs, bytes/s
};

/// What admit() hands the operation, for complete(). `peer` is the node the
/// operation goes to (0: none), set by the caller before admit(): a class is
/// throttled per peer, and judges each completion against that peer's own
/// RTT.
struct Ticket {
  static constexpr uint8_t kNone = 0xff;
  uint8_t cls = kNone;
  transport::NodeId peer = 0;
  uint64_t start_ns = 0;
};

/// Sleeps above 50 us, yields the CPU below: how a throttled call waits.
void nap(uint64_t ns);

/// The clock the scheduler reads and how a throttled call waits: the real
/// ones, except in tests that drive a simulated clock.
struct Clock {
  uint64_t (*now)() = &now_ns;
  void (*sleep)(uint64_t ns) = &nap;
};

class Scheduler {
 public:
  static constexpr size_t kMaxClasses = 16;

  explicit Scheduler(const QosConfig& config, Clock clock = {});
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  /// Checks the tenant and the process's class against the policy and
  /// builds the class tables; before any other call. Moves the calling
  /// thread to the process's class's CPUs when it names some (the threads
  /// it starts later inherit them). kInvalidArg with `*error` naming the key.
  Status start(std::string* error);

  bool enabled() const { return !classes_.empty(); }

  /// Largest piece a blocking transfer of the calling thread's class should
  /// be cut into: `normal`, or kYieldChunk while a higher class is active, so
  /// a higher class's call never waits behind a whole large transfer of this
  /// one in a transport's queue. Each piece passes the gate on its own.
  static constexpr uint64_t kYieldChunk = 64 << 10;
  uint64_t chunk_bytes(uint64_t normal) const;

  /// The calling thread's calls go to class `name` from now on (empty: back
  /// to the process's class), and the thread runs on that class's CPUs when
  /// it names some (qos/cpu_placement.h). kNotFound: no such class; kPermission:
  /// the tenant may not use it; kUnsupported: QoS is off.
  Status set_thread_class(const std::string& name) const;  // only the calling thread's state
  /// The calling thread's class name ("" with QoS off).
  std::string thread_class() const;

  /// Reserves room for one operation of `bytes` of payload. kQuota when the
  /// tenant already has its limit in flight; with QoS on, waits for the
  /// class's tokens, and its lane's for `t->peer` (kTimedOut past `d`).
  /// Pair with retire(); `*t` goes to complete().
  Status admit(uint64_t bytes, Deadline d, Ticket* t) {
    if (count_ops_) {
      uint32_t n = in_flight_.fetch_add(1, std::memory_order_relaxed);
      if (n >= max_in_flight_) {
        in_flight_.fetch_sub(1, std::memory_order_relaxed);
        quota_refused_.fetch_add(1, std::memory_order_relaxed);
        return Code::kQuota;
      }
    }
    if (!classes_.empty()) {
      Status s = pace(bytes, d, t);
      if (!s.is_ok()) {
        if (count_ops_) in_flight_.fetch_sub(1, std::memory_order_relaxed);
        return s;
      }
    }
    return Status::ok();
  }
  void retire(const Ticket& t) {
    if (count_ops_) in_flight_.fetch_sub(1, std::memory_order_relaxed);
    if (t.cls != Ticket::kNone) class_done(t.cls);
  }
  /// The engine's request slots, after start() and before any operation.
  /// With QoS off every admitted operation holds a slot, so a quota at or
  /// above the slots binds no sooner than they run out: admit() then counts
  /// nothing (two locked instructions per request saved) and the caller
  /// that finds no slot asks out_of_slots() what to answer.
  void set_slot_capacity(uint32_t slots) {
    count_ops_ = !classes_.empty() || max_in_flight_ < slots;
    quota_is_slots_ = max_in_flight_ == slots;
  }
  /// No request slot was left: kQuota (counted) when the quota is exactly
  /// the slots, as a count would have refused it first; else kNoResource.
  Code out_of_slots() {
    if (count_ops_ || !quota_is_slots_) return Code::kNoResource;
    quota_refused_.fetch_add(1, std::memory_order_relaxed);
    return Code::kQuota;
  }
  /// The operation admitted with `t` completed at `now`: its RTT sample,
  /// taken once (a second call does nothing).
  void complete(Ticket& t, uint64_t now) {
    if (t.cls != Ticket::kNone && t.start_ns != 0) on_complete(t, now);
    t.start_ns = 0;
  }
  void complete(Ticket& t) {
    if (t.cls != Ticket::kNone) complete(t, clock_.now());
  }

  /// Keeps this process's classes visible to the host's other processes
  /// while its calls wait. Only the control law's tick, run on calls,
  /// refreshes a class's slot on the host board, and the board ignores a
  /// slot older than HostBoard::kFreshNs: a latency class whose call waits
  /// longer than that (its server busy with another tenant's bulk) looked
  /// idle to the bulk tenant just when it suffered, and the bulk went
  /// unthrottled. A waiting caller calls this between polls, and between
  /// sleeps no longer than kKeepFreshNs, with the time it read (the
  /// scheduler's clock: now_ns outside tests). Nothing with QoS off.
  bool paced() const { return !classes_.empty(); }
  void keep_fresh(uint64_t now) {
    if (!classes_.empty()) maybe_tick(now);
  }
  static constexpr uint64_t kKeepFreshNs = HostBoard::kFreshNs / 2;

  /// An operation the caller does in place, with no request (a native read
  /// or write on `peer`'s memory, say): with QoS on it passes the gate,
  /// reports its RTT and retires. `op()` says whether it was done in place; a
  /// refusal by the gate goes to *s (and counts as done).
  template <typename Op>
  bool gated(uint64_t bytes, transport::NodeId peer, Deadline d, Status* s, Op&& op) {
    if (classes_.empty()) return op();
    Ticket t;
    t.peer = peer;
    *s = admit(bytes, d, &t);
    if (!s->is_ok()) return true;
    const bool done = op();
    if (done) complete(t);
    retire(t);
    return done;
  }

  /// LMR quotas of the tenant: kQuota when `bytes` more (one LMR more)
  /// would pass max_lmr_bytes or max_lmrs. Pair with give_lmr().
  Status take_lmr(uint64_t bytes);
  void give_lmr(uint64_t bytes);
  /// The tenant's quotas on message and RPC credits held at once, over all
  /// peers (0: none). proto's Credits enforces them and reports refusals.
  uint32_t msg_credit_quota() const { return max_msg_credits_; }
  uint32_t rpc_credit_quota() const { return max_rpc_credits_; }
  void count_quota_refusal() { quota_refused_.fetch_add(1, std::memory_order_relaxed); }

  /// Posts to `ep`; a short count is back-pressure (counted, never logged).
  /// Deferred (kWrDeferred) when defers_posts(): the caller then sees to it
  /// that the poller makes a pass soon.
  Result<size_t> post(transport::Endpoint& ep, std::span<const transport::WorkRequest> wrs) {
    auto r = defers_posts() ? post_deferred(ep, wrs) : ep.post(wrs);
    if (r.is_ok() && *r < wrs.size()) backpressured_.fetch_add(1, std::memory_order_relaxed);
    return r;
  }

  /// Whether the calling thread's posts go kWrDeferred: it runs idle
  /// (qos/cpu_policy.h) in a process whose progress thread does not, so
  /// preempted it must not be the one writing a connection others share.
  bool defers_posts() const { return thread_runs_idle() && !process_runs_idle_; }

  SchedulerStats stats() const {
    return {backpressured_.load(std::memory_order_relaxed),
            quota_refused_.load(std::memory_order_relaxed)};
  }
  /// The classes the tenant may use, in priority order.
  std::vector<ClassStats> class_stats() const;
  const std::string& tenant() const { return config_.tenant; }

  /// Runs the control law for the interval ending at `now` (the scheduler
  /// does this itself on its calls; public for the tests' simulated clock).
  void tick(uint64_t now);

 private:
  struct Class;
  struct Above;
  struct LaneSums;
  static bool throttle_lanes(Class& k, uint64_t now, uint64_t dt, const Above& above,
                             const LaneSums& sums);
  Status pace(uint64_t bytes, Deadline d, Ticket* t);
  void on_complete(const Ticket& t, uint64_t now);
  void class_done(uint8_t cls);
  Status place_classes(std::string* error);
  static void apply_to_thread(const Class& k);
  Result<size_t> post_deferred(transport::Endpoint& ep,
                               std::span<const transport::WorkRequest> wrs);
  uint8_t current_class() const;
  void maybe_tick(uint64_t now) {
    uint64_t next = next_tick_.load(std::memory_order_relaxed);
    if (now >= next && next_tick_.compare_exchange_strong(next, now + RateControl::kIntervalNs,
                                                          std::memory_order_relaxed)) {
      tick(now);
    }
  }
  // One tick at a time: a tick preempted past the next interval must not
  // run beside the next one (tick_mu_ guards last_tick_, remote_ and the
  // board's slots); a caller that finds it taken skips its turn.
  SpinLock tick_mu_;
  mutable std::atomic<bool> mixed_idle_told_{false};  // the warning of set_thread_class, once

  QosConfig config_;
  const Clock clock_;
  uint32_t max_in_flight_;
  bool count_ops_ = true;                        // admit() counts in_flight_ (set_slot_capacity)
  bool quota_is_slots_ = false;                  // max_in_flight_ equals the engine's request slots
  std::vector<std::unique_ptr<Class>> classes_;  // in priority order, highest first
  uint8_t process_class_ = 0;
  bool process_runs_idle_ = false;  // the process's class (so its progress thread's) is idle
  std::vector<uint8_t> allowed_;    // the tenant's classes (indexes into classes_)
  uint64_t max_lmr_bytes_ = 0;
  uint32_t max_lmrs_ = 0;
  uint32_t max_msg_credits_ = 0, max_rpc_credits_ = 0;
  const uint64_t id_;  // tells this engine's thread classes from another's
  std::atomic<uint64_t> next_tick_{0};
  // The tick's own (one thread at a time, the winner of next_tick_'s CAS).
  uint64_t last_tick_ = 0;
  HostBoard board_;                 // the other engines of this host
  std::vector<BoardEntry> remote_;  // their classes, as of the last tick
  std::atomic<uint32_t> in_flight_{0};
  std::atomic<uint64_t> lmr_bytes_{0};
  std::atomic<uint32_t> lmrs_{0};
  std::atomic<uint64_t> backpressured_{0}, quota_refused_{0};
};

}  // namespace lt::qos
