#include "qos/scheduler.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <thread>

#include "common/log.h"
#include "common/tls.h"
#include "qos/base_rtt.h"
#include "qos/cpu_placement.h"
#include "qos/cpu_policy.h"
#include "qos/peer_lanes.h"

namespace lt::qos {

namespace {
// A class counts as active while it has operations in flight or admitted one
// this recently.
constexpr uint64_t kActiveNs = 1'000'000;
// Tokens an operation costs at least, so calls without payload still count.
constexpr uint64_t kOpCost = 64;
// A derived RTT target: this multiple of the least RTT the class saw in the
// last kBaseWindowNs, plus a slack for scheduling noise.
constexpr uint64_t kAutoTargetMultiple = 3;
constexpr uint64_t kAutoTargetSlackNs = 20'000;
constexpr uint64_t kBaseWindowNs = 10'000'000'000ull;
// A throttled call sleeps for waits above this, yields below it.
constexpr uint64_t kSleepAboveNs = 50'000;

std::atomic<uint64_t> next_scheduler_id{1};

struct ThreadClass {
  uint64_t scheduler = 0;
  uint8_t cls = 0;
};
LT_TLS_FAST thread_local ThreadClass tl_class;
}  // namespace

struct Scheduler::Class {
  explicit Class(const QosClass& c) : cfg(c), rc(c.floor_percent), lanes(c.floor_percent) {
    cap_ops.set_rate(c.max_ops_per_s);
    cap_bytes.set_rate(c.max_bytes_per_s);
    // A derived target is per peer; without the table, the class's own base.
    if (c.target_rtt_ns == 0) (void)peers.make();
  }
  QosClass cfg;
  CpuMask cpus;  // where its threads run (cfg.cpus within the process's CPUs)

  // rc, lanes, the caps and the interval's figures. A mutex, not a SpinLock:
  // a thread of an idle class (cpu_policy: idle) takes it in its own pace()
  // and in a tick (every class's); preempted there by a normal thread that
  // then spun and yielded on the lock, it got no CPU, and calls waited
  // 0.3-4 ms before their post. A waiter that sleeps frees the core for the
  // holder.
  std::mutex mu;
  RateControl rc;                  // the whole class: for congestion that names no peer it reaches
  PeerLanes lanes;                 // per peer: for congestion at that peer
  TokenBucket cap_ops, cap_bytes;  // max_ops_per_s, max_bytes_per_s: always (rate 0: none)
  uint64_t interval_bytes = 0;
  bool interval_done = false;    // a completion in this interval
  CongestedPeers interval_over;  // where completions of this interval were above target
  // The class's congestion signal: where completions of the last interval
  // that had any were above their target, kept through intervals without
  // completions (a slow call signals until a faster one completes), dropped
  // when the class goes idle.
  CongestedPeers signal;
  uint64_t lane_throttles = 0;  // times a lane's throttling started
  BaseRtt base;                 // over all peers: the target shown in the stats
  PeerBases peers;              // per peer: the target each completion is judged by

  std::atomic<uint64_t> ops{0}, bytes{0}, in_flight{0}, waiting{0}, delayed{0};
  std::atomic<uint64_t> last_active{0};
  std::atomic<uint64_t> target{0};        // ns; 0 until derived
  std::atomic<bool> under_higher{false};  // a higher class was active at the last tick
  RttHistogram rtt;

  // The configured target, or one derived from `b` (0: nothing measured yet).
  uint64_t target_from(const BaseRtt& b) const {
    if (cfg.target_rtt_ns != 0) return cfg.target_rtt_ns;
    const uint64_t least = b.get();
    return least == BaseRtt::kNone ? 0 : least * kAutoTargetMultiple + kAutoTargetSlackNs;
  }
};

void nap(uint64_t ns) {
  if (ns > kSleepAboveNs) {
    std::this_thread::sleep_for(std::chrono::nanoseconds(ns));
  } else {
    sched_yield();
  }
}

Scheduler::Scheduler(const QosConfig& config, Clock clock)
    : config_(config),
      clock_(clock),
      max_in_flight_(config.max_outstanding_ops),
      id_(next_scheduler_id.fetch_add(1)) {}

Scheduler::~Scheduler() = default;

Status Scheduler::start(std::string* error) {
  const QosPolicy& p = config_.policy;
  LT_RETURN_IF_ERROR(validate_qos_policy(p, error));
  LT_RETURN_IF_ERROR(check_qos_tenant(p, config_.tenant, error));
  if (!p.enabled()) {
    if (!config_.default_class.empty()) {
      if (error) *error = "qos.class (LTIER_QOS_CLASS) is set but no qos.classes are configured";
      return Code::kInvalidArg;
    }
    return Status::ok();
  }
  if (p.classes.size() > kMaxClasses) {
    if (error) *error = "qos.classes: at most " + std::to_string(kMaxClasses) + " classes";
    return Code::kInvalidArg;
  }
  std::vector<const QosClass*> order;
  for (const auto& c : p.classes) order.push_back(&c);
  std::stable_sort(order.begin(), order.end(),
                   [](const QosClass* a, const QosClass* b) { return a->priority < b->priority; });
  classes_.clear();
  for (const QosClass* c : order) classes_.push_back(std::make_unique<Class>(*c));
  auto index = [&](const std::string& name) -> int {
    for (size_t i = 0; i < classes_.size(); ++i) {
      if (classes_[i]->cfg.name == name) return static_cast<int>(i);
    }
    return -1;
  };
  std::string default_class = p.classes.front().name;
  allowed_.clear();
  if (const QosTenant* t = p.find_tenant(config_.tenant)) {
    for (const auto& c : t->classes) allowed_.push_back(static_cast<uint8_t>(index(c)));
    default_class = t->default_class;
    if (t->max_ops_in_flight != 0) max_in_flight_ = t->max_ops_in_flight;
    max_lmr_bytes_ = t->max_lmr_bytes;
    max_lmrs_ = t->max_lmrs;
    max_msg_credits_ = t->max_msg_credits;
    max_rpc_credits_ = t->max_rpc_credits;
  } else {
    for (size_t i = 0; i < classes_.size(); ++i) allowed_.push_back(static_cast<uint8_t>(i));
  }
  if (!config_.default_class.empty()) {
    const int i = index(config_.default_class);
    if (i < 0 || std::find(allowed_.begin(), allowed_.end(), i) == allowed_.end()) {
      if (error) {
        *error = "qos.class (LTIER_QOS_CLASS) '" + config_.default_class + "' " +
                 (i < 0 ? "is not in qos.classes"
                        : "is not one tenant '" + config_.tenant + "' may use");
      }
      return Code::kInvalidArg;
    }
    default_class = config_.default_class;
  }
  process_class_ = static_cast<uint8_t>(index(default_class));
  process_runs_idle_ = classes_[process_class_]->cfg.cpu_policy == QosCpuPolicy::kIdle;
  LT_RETURN_IF_ERROR(place_classes(error));
  if (config_.board != "none") {
    const std::string name = config_.board == "auto" || config_.board.empty()
                                 ? "ltier-qos-" + std::to_string(::getuid())
                                 : config_.board;
    if (!board_.open(name, static_cast<uint32_t>(classes_.size())).is_ok()) {
      LT_WARN("qos: no host board: classes of other processes on this host do not throttle ours");
    }
  }
  LT_INFO("qos: tenant '%s', %zu classes, this process's class '%s'", config_.tenant.c_str(),
          classes_.size(), default_class.c_str());
  // The joining thread, and so the threads the engine starts after this.
  apply_to_thread(*classes_[process_class_]);
  return Status::ok();
}

// Each class's CPUs within those the joining thread may run on.
Status Scheduler::place_classes(std::string* error) {
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) CPU_ZERO(&allowed);
  for (auto& k : classes_) {
    std::string why;
    if (!CpuMask::within(k->cfg.cpus, allowed, &k->cpus, &why).is_ok()) {
      if (error) {
        *error = "qos.classes '" + k->cfg.name + "'" +
                 (k->cfg.line > 0 ? " (line " + std::to_string(k->cfg.line) + ")" : "") + ": " +
                 why;
      }
      return Code::kInvalidArg;
    }
  }
  return Status::ok();
}

// The calling thread runs where, and as, class `k` says.
void Scheduler::apply_to_thread(const Class& k) {
  place_thread(k.cpus);
  set_thread_cpu_policy(k.cfg.cpu_policy);
}

Status Scheduler::set_thread_class(const std::string& name) const {
  if (classes_.empty()) return Code::kUnsupported;
  if (name.empty()) {
    tl_class.scheduler = 0;
    apply_to_thread(*classes_[process_class_]);
    return Status::ok();
  }
  for (size_t i = 0; i < classes_.size(); ++i) {
    if (classes_[i]->cfg.name != name) continue;
    if (std::find(allowed_.begin(), allowed_.end(), i) == allowed_.end()) return Code::kPerm;
    tl_class = {id_, static_cast<uint8_t>(i)};
    apply_to_thread(*classes_[i]);
    if (process_runs_idle_ && classes_[i]->cfg.cpu_policy != QosCpuPolicy::kIdle &&
        !mixed_idle_told_.exchange(true, std::memory_order_relaxed)) {
      LT_WARN(
          "qos: a thread of class '%s' shares this engine with the process's class '%s' "
          "(cpu_policy: idle), so the engine's progress thread runs idle and this thread's "
          "calls wait for it whenever the CPU is busy; make a normal class the process's own "
          "and LT_set_class the bulk threads to the idle one (docs/CONFIG.md)",
          name.c_str(), classes_[process_class_]->cfg.name.c_str());
    }
    return Status::ok();
  }
  return Code::kNotFound;
}

uint64_t Scheduler::chunk_bytes(uint64_t normal) const {
  if (classes_.empty()) return normal;
  return classes_[current_class()]->under_higher.load(std::memory_order_relaxed)
             ? std::min(normal, kYieldChunk)
             : normal;
}

std::string Scheduler::thread_class() const {
  return classes_.empty() ? std::string() : classes_[current_class()]->cfg.name;
}

uint8_t Scheduler::current_class() const {
  return tl_class.scheduler == id_ ? tl_class.cls : process_class_;
}

Status Scheduler::pace(uint64_t bytes, Deadline d, Ticket* t) {
  const uint8_t c = current_class();
  Class& k = *classes_[c];
  uint64_t now = clock_.now();
  maybe_tick(now);
  k.last_active.store(now, std::memory_order_relaxed);
  const uint64_t cost = std::max(bytes, kOpCost);
  bool counted_wait = false;
  for (;;) {
    k.mu.lock();
    Lane* lane = t->peer != 0 ? k.lanes.take(t->peer, now, kActiveNs) : nullptr;
    const uint64_t wait = std::max({k.rc.wait(now), lane != nullptr ? lane->rc.wait(now) : 0,
                                    k.cap_ops.wait(now), k.cap_bytes.wait(now)});
    if (wait == 0) {
      k.rc.spend(cost);
      k.cap_ops.spend(1);
      k.cap_bytes.spend(bytes);
      k.interval_bytes += cost;
      if (lane != nullptr) {
        lane->rc.spend(cost);
        lane->interval_bytes += cost;
        lane->last_used = now;
      }
    }
    k.mu.unlock();
    if (wait == 0) break;
    if (!counted_wait) {
      counted_wait = true;
      k.delayed.fetch_add(1, std::memory_order_relaxed);
      k.waiting.fetch_add(1, std::memory_order_relaxed);
    }
    if (d.expired()) {
      k.waiting.fetch_sub(1, std::memory_order_relaxed);
      return Code::kTimedOut;
    }
    // At most one control interval at a time: a class set free (the higher
    // class went idle) goes on within an interval, not after a long wait.
    clock_.sleep(
        std::min({wait, RateControl::kIntervalNs, std::max<uint64_t>(d.remaining_ns(), 1)}));
    now = clock_.now();
    maybe_tick(now);
  }
  if (counted_wait) k.waiting.fetch_sub(1, std::memory_order_relaxed);
  k.ops.fetch_add(1, std::memory_order_relaxed);
  k.bytes.fetch_add(bytes, std::memory_order_relaxed);
  k.in_flight.fetch_add(1, std::memory_order_relaxed);
  t->cls = c;
  t->start_ns = now;
  return Status::ok();
}

void Scheduler::on_complete(const Ticket& t, uint64_t now) {
  Class& k = *classes_[t.cls];
  const uint64_t rtt = now > t.start_ns ? now - t.start_ns : 0;
  k.rtt.record(rtt);
  k.last_active.store(now, std::memory_order_relaxed);
  k.mu.lock();
  k.base.note(rtt, now, kBaseWindowNs);
  // A derived target is the peer's own: over all peers, the nearest one's
  // base would make every completion from a farther peer look congested.
  BaseRtt* own = k.cfg.target_rtt_ns == 0 ? k.peers.of(t.peer) : nullptr;
  if (own != nullptr) own->note(rtt, now, kBaseWindowNs);
  const uint64_t target = k.target_from(own != nullptr ? *own : k.base);
  k.interval_done = true;
  if (target != 0 && rtt > target) k.interval_over.add(t.peer);
  k.mu.unlock();
  maybe_tick(now);
}

void Scheduler::class_done(uint8_t cls) {
  classes_[cls]->in_flight.fetch_sub(1, std::memory_order_relaxed);
}

// What the strictly higher priorities did in an interval, in this engine
// and on the host board.
struct Scheduler::Above {
  bool active = false;
  CongestedPeers congested;
};

// One priority group's lanes, their solo rates and weights summed by peer:
// a lane grows towards its weight's share of what the group's lanes to that
// peer did alone, as the class does for the group's solo rate (weighted
// AIMD, per path). At most kMaxClasses x kLanes entries, scanned linearly;
// a group has a few classes in practice.
struct Scheduler::LaneSums {
  struct Sum {
    transport::NodeId peer;
    uint64_t solo;
    uint32_t weight;
  };
  std::array<Sum, kMaxClasses * PeerLanes::kLanes> sums;
  uint32_t n = 0;

  void add(transport::NodeId peer, uint64_t solo, uint32_t weight) {
    for (uint32_t j = 0; j < n; ++j) {
      if (sums[j].peer == peer) {
        sums[j].solo += solo;
        sums[j].weight += weight;
        return;
      }
    }
    if (n < sums.size()) sums[n++] = {peer, solo, weight};
  }
  Share of(transport::NodeId peer, uint32_t weight) const {
    for (uint32_t j = 0; j < n; ++j) {
      if (sums[j].peer == peer) return Share{sums[j].solo, weight, sums[j].weight};
    }
    return Share{0, weight, weight};  // the class is alone at that peer
  }
};

// Runs the law on each of k's lanes with the congestion at its own peer, and
// says whether the class as a whole must be cut too: for congestion that
// names no peer, at a peer this class has not sent to lately (what the two
// classes share then is this host: its NIC, its CPUs, its sockets), or at a
// peer whose lane is already at its floor (cutting that path further cannot
// help, so the contention is elsewhere). k.mu held.
bool Scheduler::throttle_lanes(Class& k, uint64_t now, uint64_t dt, const Above& above,
                               const LaneSums& sums) {
  for (Lane& l : k.lanes.all()) {
    if (l.peer == 0) continue;
    const bool was = l.rc.throttled();
    l.rc.update(now, dt, l.interval_bytes, above.active, above.congested.has(l.peer),
                sums.of(l.peer, k.cfg.weight));
    l.interval_bytes = 0;
    if (l.rc.throttled() && !was) ++k.lane_throttles;
  }
  if (above.congested.host) return true;
  for (uint32_t j = 0; j < above.congested.n; ++j) {
    const Lane* l = k.lanes.find(above.congested.peer[j]);
    if (l == nullptr || now - std::min(now, l->last_used) >= kActiveNs || l->rc.at_floor()) {
      return true;
    }
  }
  return false;
}

// Classes are visited in priority order; each priority's classes are
// updated with what the strictly higher priorities did in the interval, then
// add their own activity and congestion for the priorities below.
void Scheduler::tick(uint64_t now) {
  if (!tick_mu_.try_lock()) return;  // another tick is running
  std::lock_guard<SpinLock> held(tick_mu_, std::adopt_lock);
  const uint64_t dt =
      last_tick_ != 0 && now > last_tick_ ? now - last_tick_ : RateControl::kIntervalNs;
  last_tick_ = now;
  board_.scan(now, &remote_);
  Above above;
  size_t i = 0;
  while (i < classes_.size()) {
    const uint32_t prio = classes_[i]->cfg.priority;
    for (const BoardEntry& r : remote_) {  // other processes' higher classes
      if (r.priority < prio && r.active) {
        above.active = true;
        above.congested.add(r.congested);
      }
    }
    // The group is [i, end); its active classes share its solo rate by
    // weight, and their lanes to each peer that peer's.
    size_t end = i;
    std::array<bool, kMaxClasses> is_active{};
    Share group{0, 0, 0};
    LaneSums lane_sums;
    for (; end < classes_.size() && classes_[end]->cfg.priority == prio; ++end) {
      Class& k = *classes_[end];
      is_active[end] =
          k.in_flight.load(std::memory_order_relaxed) != 0 ||
          now - std::min(now, k.last_active.load(std::memory_order_relaxed)) < kActiveNs;
      if (!is_active[end]) continue;
      k.mu.lock();
      group.group_solo += k.rc.solo_rate();
      for (const Lane& l : k.lanes.all()) {
        if (l.peer != 0) lane_sums.add(l.peer, l.rc.solo_rate(), k.cfg.weight);
      }
      k.mu.unlock();
      group.group_weight += k.cfg.weight;
    }
    Above group_did;
    for (; i < end; ++i) {
      Class& k = *classes_[i];
      const bool active = is_active[i];
      k.mu.lock();
      const uint64_t bytes = k.interval_bytes;
      if (k.interval_done) k.signal = k.interval_over;
      if (!active) k.signal.clear();
      const CongestedPeers signal = k.signal;
      k.interval_bytes = 0;
      k.interval_done = false;
      k.interval_over.clear();
      const uint64_t target = k.target_from(k.base);
      const bool was_throttled = k.rc.throttled();
      const bool host_congested = throttle_lanes(k, now, dt, above, lane_sums);
      k.rc.update(now, dt, bytes, above.active, host_congested,
                  Share{group.group_solo, k.cfg.weight, group.group_weight});
      const bool throttled = k.rc.throttled();
      k.mu.unlock();
      k.target.store(target, std::memory_order_relaxed);
      k.under_higher.store(above.active, std::memory_order_relaxed);
      if (throttled && !was_throttled) {
        LT_DEBUG("qos: class '%s' throttled", k.cfg.name.c_str());
      }
      board_.publish(static_cast<uint32_t>(i), prio, active, active ? signal : CongestedPeers{},
                     now);
      group_did.active = group_did.active || active;
      if (active) group_did.congested.add(signal);
    }
    above.active = above.active || group_did.active;
    above.congested.add(group_did.congested);
  }
}

Status Scheduler::take_lmr(uint64_t bytes) {
  const uint32_t n = lmrs_.fetch_add(1, std::memory_order_relaxed);
  const uint64_t b = lmr_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  if ((max_lmrs_ != 0 && n >= max_lmrs_) || (max_lmr_bytes_ != 0 && b + bytes > max_lmr_bytes_)) {
    give_lmr(bytes);
    quota_refused_.fetch_add(1, std::memory_order_relaxed);
    return Code::kQuota;
  }
  return Status::ok();
}

void Scheduler::give_lmr(uint64_t bytes) {
  lmrs_.fetch_sub(1, std::memory_order_relaxed);
  lmr_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
}

std::vector<ClassStats> Scheduler::class_stats() const {
  std::vector<ClassStats> out;
  for (size_t i = 0; i < classes_.size(); ++i) {
    // Only the tenant's own classes: the others carry none of its calls.
    if (std::find(allowed_.begin(), allowed_.end(), i) == allowed_.end()) continue;
    Class& k = *classes_[i];
    ClassStats s;
    s.name = k.cfg.name;
    s.priority = k.cfg.priority;
    s.ops = k.ops.load(std::memory_order_relaxed);
    s.bytes = k.bytes.load(std::memory_order_relaxed);
    s.in_flight = k.in_flight.load(std::memory_order_relaxed);
    s.waiting = k.waiting.load(std::memory_order_relaxed);
    s.delayed = k.delayed.load(std::memory_order_relaxed);
    s.rtt_p50_ns = k.rtt.quantile(0.5);
    s.rtt_p99_ns = k.rtt.quantile(0.99);
    s.target_rtt_ns = k.target.load(std::memory_order_relaxed);
    s.peer_rates.reserve(PeerLanes::kLanes);  // no allocation under the spin lock
    k.mu.lock();
    s.throttles = k.rc.throttles() + k.lane_throttles;
    s.rate = k.rc.rate();
    for (const Lane& l : k.lanes.all()) {
      if (l.peer == 0 || !l.rc.throttled()) continue;
      ++s.throttled_peers;
      s.peer_rates.emplace_back(l.peer, l.rc.rate());
      if (!k.rc.throttled()) s.rate = std::min(s.rate, l.rc.rate());
    }
    k.mu.unlock();
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace lt::qos
