// Progress: the pass that polls every transport and handles what arrived
// (one thread at a time: the progress token), and the progress thread that
// makes passes when no caller is waiting, then parks or sleeps.
#include <sched.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <functional>

#include "common/net.h"
#include "common/trace_points.h"
#include "proto/engine.h"
#include "qos/cpu_policy.h"

namespace lt::proto {

using transport::Completion;

namespace {
// The progress thread's epoll sets: `all` (the transports, the manager
// socket, the wake fd) to sleep on when idle, and `park` (the manager, the
// wake fd and the park timer only) for while callers spin and poll the
// transports themselves. Manager events go to `on_manager` (false: the manager is
// gone, stop watching it); the wake fd is drained.
class WaitSets {
 public:
  WaitSets(std::span<const std::unique_ptr<transport::Transport>> transports, int manager_fd,
           int wake_fd, int timer_fd, std::function<bool()> on_manager)
      : all_(epoll_create1(EPOLL_CLOEXEC)),
        park_(epoll_create1(EPOLL_CLOEXEC)),
        manager_fd_(manager_fd),
        wake_fd_(wake_fd),
        on_manager_(std::move(on_manager)) {
    for (size_t i = 0; i < transports.size(); ++i) {
      transports_.push_back(transports[i].get());
      add(all_, transports[i]->wait_fd(), kTransport + static_cast<uint32_t>(i));
    }
    for (int set : {all_, park_}) {
      add(set, manager_fd, kManager);
      add(set, wake_fd, kWake);
    }
    if (timer_fd >= 0) add(park_, timer_fd, kTimer);
  }
  ~WaitSets() {
    close(park_);
    close(all_);
  }
  WaitSets(const WaitSets&) = delete;
  WaitSets& operator=(const WaitSets&) = delete;

  /// The manager socket is new (a reconnect): watch it from now on.
  void watch_manager(int fd) {
    manager_fd_ = fd;
    for (int set : {all_, park_}) add(set, fd, kManager);
  }
  /// Waits on everything up to timeout_ms (0: just look).
  void wait(int timeout_ms) {
    epoll_event evs[4];
    handle(evs, epoll_wait(all_, evs, 4, timeout_ms));
  }
  /// Waits on the manager, the wake fd and the park timer only, up to ns.
  void park(uint64_t ns) {
    const timespec t = {static_cast<time_t>(ns / 1000000000ull),
                        static_cast<long>(ns % 1000000000ull)};
    epoll_event evs[4];
    handle(evs, epoll_pwait2(park_, evs, 4, &t, nullptr));
  }

 private:
  // Transport i is tagged kTransport + i.
  static constexpr uint32_t kManager = 0, kWake = 1, kTimer = 2, kTransport = 3;
  static void add(int set, int fd, uint32_t tag) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = tag;
    epoll_ctl(set, EPOLL_CTL_ADD, fd, &ev);
  }
  void handle(const epoll_event* evs, int n) {
    for (int i = 0; i < n; ++i) {
      if (evs[i].data.u32 == kManager) {
        if (!on_manager_()) {
          epoll_ctl(all_, EPOLL_CTL_DEL, manager_fd_, nullptr);
          epoll_ctl(park_, EPOLL_CTL_DEL, manager_fd_, nullptr);
        }
      } else if (evs[i].data.u32 == kWake) {
        net::drain_eventfd(wake_fd_);
      } else if (evs[i].data.u32 >= kTransport) {
        transports_[evs[i].data.u32 - kTransport]->woken();
      }
    }
  }

  const int all_, park_;
  std::vector<transport::Transport*> transports_;
  int manager_fd_;
  const int wake_fd_;
  std::function<bool()> on_manager_;
};
}  // namespace

// Longer than a function should be, for a reason: one loop whose state (the
// clock, the spin's end, both pacers, the park) every branch reads and moves,
// and about a third of it is the comments that say why. Split, that state
// would travel in a struct through every helper.
void Engine::progress_loop() {
  progress_tid_.store(std::this_thread::get_id(), std::memory_order_release);
  // Timed parks may end up to kSlackNs late, so the kernel can fold their
  // alarm into a timer interrupt that comes anyway (ParkTimer).
  (void)prctl(PR_SET_TIMERSLACK, ParkTimer::kSlackNs, 0, 0, 0);
  std::vector<Membership::Event> events;
  WaitSets sets(transports_.all(), membership_->fd(), wake_fd_, park_timer_.fd(),
                [&] { return on_manager_readable(&events); });
  // After serving a peer, keep polling for a bounded time: the next request
  // of a busy client is then served without a wake-up, which costs tens of
  // microseconds on small VMs. Replies alone (this node as a client) do not
  // start a spin: the caller waiting for them spins itself, and a third busy
  // thread on a 2-core machine hurts everyone. Then sleep, the transports
  // armed just before (prepare_sleep; a spinning caller polls them unarmed):
  // an idle engine costs no CPU. How long: engine.progress_spin_us, or up to twice the
  // usual gap between served requests when that is longer (serve_gauge_), so
  // a client whose next call comes a little later still finds us awake.
  // Parked while callers spin (they poll for everyone), and while they keep
  // calling: one whose wait ended within its spin since we last looked
  // (spin_ends_) is between two calls, outside wait() for its post.
  // Sleeping on the transports then would have every reply wake this
  // thread as well as the caller polling for it. The park lasts
  // ParkTimer::kWindowNs (give or take its slack), then we look and park
  // again while callers are still busy, without a poll while one spins: a
  // ping-pong costs this thread a wake-up every millisecond or so and no
  // caller sets a timer (ParkTimer says why; over tcp, callers that pushed
  // an alarm out every 250 us made the 8 B p99 3.3x the p50). A caller that
  // stops spinning to sleep unparks us through wake_fd_ (or, if it did so
  // before we set parked_, tells us by sleeper_: seq_cst on both sides); one
  // that just stops calling leaves us parked up to kWindowNs + kSlackNs: how
  // long peers' requests may then wait for an idle engine.
  uint64_t spin_until = 0, next_manager_check = 0, next_collect = 0;
  // Whom a yield of this spin can help: the peer that sent last, when it
  // shares our CPU (its hint says so, or nothing tells), or a thread of this
  // engine that this thread woke during the spin (a receiver, a server loop,
  // an RPC worker: no hint tells where those run). So the spin yields as a
  // waiter does (wait_impl) until it woke one of ours; from then on it
  // yields whatever the hint says. (Skipping every yield while the sender
  // ran elsewhere kept a receiving caller off its core: 8 B streaming over
  // shm halved.) The progress thread is never moved to another CPU.
  YieldPacer pacer(kSpinYieldNs, &peer_cpu_, transport::kNoNode, false);
  YieldPacer unhinted(kSpinYieldNs, nullptr, transport::kNoNode, false);
  uint32_t wakes_at_spin = t_wakes;
  uint64_t last_served = 0;
  uint64_t ends_seen = spin_ends_.load(std::memory_order_relaxed);
  bool unparked = false;
  // The clock is read after a pass that did work, after a park or a sleep,
  // and every kIdleClockPasses idle passes: on a VM a read (21 ns) took as
  // long as an idle pass, and a request that came during it waited for it.
  // A stale `now` only delays the spin's end or a yield by a few passes.
  constexpr uint32_t kIdleClockPasses = 8;
  uint32_t idle_passes = 0;
  uint64_t now = 0;
  bool stale = true;
  uint32_t plain_since_work = 0;  // idle passes since work: unpaused up to kPlainPolls
  // Serves since the last look, this thread's or another's: a caller
  // asleep on the transports hands the polling back after serving a peer
  // (poll_asleep), and the spin below is for that peer's next call.
  uint64_t served_seen = served_.load(std::memory_order_relaxed);
  while (running_.load(std::memory_order_relaxed)) {
    const uint64_t served_before = served_seen;
    const uint32_t wakes_before = t_wakes;
    // Back from a park while a caller spins: it polls for everyone, and a
    // pass of ours now would take replies it is waiting for (and the core
    // it needs) until a pass found nothing.
    bool did = false;
    if (!unparked || spinners_.load(std::memory_order_seq_cst) == 0) did = progress();
    if (did || unparked || stale || ++idle_passes % kIdleClockPasses == 0 ||
        served_.load(std::memory_order_relaxed) != served_before) {
      now = now_ns();
    }
    unparked = stale = false;
    if (did) plain_since_work = 0;
    int hb = membership_->heartbeat(now);
    if (peers_.retired() != 0 && now >= next_collect) {
      // Endpoints of gone connections: freed (with their descriptors and
      // mappings) once no caller can hold them.
      peers_.collect();
      next_collect = now + kCollectEveryNs;
    }
    if (membership_->rejoin_ready()) {  // the manager came back, or refused us
      events.clear();
      if (membership_->finish_rejoin(&events)) sets.watch_manager(membership_->fd());
      apply_events(events);
    }
    if (served_.load(std::memory_order_relaxed) != served_before) {
      served_seen = served_.load(std::memory_order_relaxed);
      if (last_served != 0) serve_gauge_.note(now - last_served);
      last_served = now;
      spin_until = now + serve_gauge_.budget_ns();
      pacer.start(now);
      unhinted.start(now);
      wakes_at_spin = wakes_before;
    }
    if (did) {
      // Under sustained load, still look at the manager socket, every
      // kBusyManagerCheckNs: an epoll_wait per pass (~0.3 us here) sat
      // between an RPC server's reply and its next poll.
      if (now >= next_manager_check) {
        sets.wait(0);
        next_manager_check = now + kBusyManagerCheckNs;
      }
      continue;
    }
    const uint64_t ends = spin_ends_.load(std::memory_order_relaxed);
    const bool calling = ends != ends_seen;
    ends_seen = ends;
    // A caller asleep on the transports polls for everyone as well, unless
    // another sleeps on a futex and needs us.
    auto polled = [this] {
      return poller_.load(std::memory_order_seq_cst) &&
             futex_sleepers_.load(std::memory_order_seq_cst) == 0;
    };
    if (spinners_.load(std::memory_order_seq_cst) > 0 || calling || polled()) {
      // A caller is spinning in wait() and polls the transports, serving
      // peers too: a second spinner would only take its core (2 cores here).
      // For a sleeping poller alone no alarm: it may sleep for long, and
      // hands the polling back when it ends (poll_asleep).
      park_timer_.drain();
      const bool untimed = spinners_.load(std::memory_order_seq_cst) == 0 && !calling && polled();
      parked_.store(true, std::memory_order_seq_cst);
      // The poller may have ended before it could see us parked: then the
      // park is timed after all (either it sees parked_ or we see poller_).
      // Timed too while senders may hold messages back (CorkWatch): the
      // sleeping poller wakes for what arrives, not for what waits to go.
      const bool timed = !untimed || !polled() || !corks_.begin_untimed();
      if (spinners_.load(std::memory_order_seq_cst) > 0 || polled() ||
          (calling && !sleeper_.exchange(false, std::memory_order_seq_cst))) {
        const uint64_t hb_ns = uint64_t{static_cast<uint32_t>(hb)} * 1000000ull;
        LT_TRACE_POINT('k');
        sets.park(timed || park_timer_.fd() < 0 ? std::min(ParkTimer::kWindowNs, hb_ns) : hb_ns);
        LT_TRACE_POINT('K');
      }
      corks_.end_untimed();
      parked_.store(false, std::memory_order_relaxed);
      unparked = true;
      continue;
    }
    if (now >= spin_until) {
      // Asleep on the transports; for ParkTimer's window at most while
      // senders may hold messages back (CorkWatch): the next pass sends them.
      if (prepare_sleep()) {
        LT_TRACE_POINT('s');
        sets.wait(corks_.begin_untimed() ? hb : std::min(hb, ParkTimer::kWindowMs));
        LT_TRACE_POINT('a');
        corks_.end_untimed();
        stale = true;
      }
    } else {
      YieldPacer& p = t_wakes == wakes_at_spin ? pacer : unhinted;
      if (p.due(now)) {  // the yield times itself from `now`: a fresh one
        now = now_ns();
        (void)p.maybe_yield(&now);
      }
      if (++plain_since_work > kPlainPolls) cpu_relax();
    }
  }
}

bool Engine::prepare_sleep() {
  if (busy_.exchange(true, std::memory_order_acquire)) return false;
  for (auto& t : transports_.all()) t->prepare_sleep();
  busy_.store(false, std::memory_order_seq_cst);
  return !want_.load(std::memory_order_seq_cst);
}

bool Engine::progress(const std::atomic<uint64_t>* watch) {
  if (transports_.empty()) return false;
  if (qos::thread_runs_idle() &&
      std::this_thread::get_id() != progress_tid_.load(std::memory_order_relaxed)) {
    // A thread of an idle class never takes the token (qos/cpu_policy.h):
    // preempted while it holds it, it would stop every other thread's
    // passes for as long as the CPU stays busy. It asks for a pass instead.
    want_.store(true, std::memory_order_seq_cst);
    if (parked_.load(std::memory_order_seq_cst)) net::ring_eventfd(wake_fd_);
    return false;
  }
  bool did = false;
  // One thread polls at a time (busy_). A caller that finds it taken leaves
  // want_ set, and the holder re-checks want_ after it lets go, so a pass
  // asked for during a pass still happens; uncontended, this costs one
  // exchange and one store.
  if (busy_.exchange(true, std::memory_order_acquire)) {
    want_.store(true, std::memory_order_seq_cst);
    if (busy_.exchange(true, std::memory_order_acquire)) return false;
  }
  // Taking and letting go of the token are two locked instructions, about a
  // third of an empty pass on Zen 5, and a message that arrived during them
  // waited for them. So a pass that found nothing goes again with the token
  // held, up to kEmptyPassesPerCall, unless another thread asked for it
  // (want_, read plainly: a request missed here is met by the next pass) or
  // the watched request completed.
  int empty_passes = 0;
  for (;;) {
    want_.store(false, std::memory_order_relaxed);
    holder_.store(std::this_thread::get_id(), std::memory_order_relaxed);
    if (held_rx_ != nullptr) {  // the last pass's watched message: its room goes back now
      held_rx_->release_rx(std::span<const Completion>(&held_cq_, 1));
      held_rx_ = nullptr;
    }
    // What senders held (rpc_async's calls, deferred posts) goes first;
    // ask_for_flush() rings again for posts that come after this.
    if (flush_asked_.load(std::memory_order_relaxed)) {
      (void)flush_asked_.exchange(false, std::memory_order_seq_cst);
    }
    for (auto& t : transports_.all()) t->flush();  // cheap when nothing is held
    // A bounded pass (16 batches per transport, and 2 ms): under a steady
    // stream the caller (the progress thread: heartbeats, the manager
    // socket) gets control back; it calls again at once since work was found.
    uint64_t pass_end = 0;  // read the clock only after two batches with work
    const bool on_progress_thread =
        std::this_thread::get_id() == progress_tid_.load(std::memory_order_acquire);
    const auto all = transports_.all();
    for (uint32_t ti = 0; ti < all.size(); ++ti) {  // ti: t's index, for the traffic counts
      const auto& t = all[ti];
      for (int batches = 0; batches < kMaxBatchesPerPass; ++batches) {
        if (batches > 1) {  // one message per batch (a ping-pong) reads no clock
          uint64_t now = now_ns();
          if (pass_end == 0) pass_end = now + kMaxPassNs;
          if (now >= pass_end) break;
        }
        size_t n = t->poll(cq_);
        if (n == 0) break;
        did = true;
        for (size_t i = 0; i < n; ++i) {
          more_in_batch_ = i + 1 < n;
          if (cq_[i].kind == transport::CqKind::kRecv) traffic_.rx(cq_[i].peer, ti, cq_[i].len);
          handle(cq_[i]);
          // A batch of big copies (staged 1 MiB messages, say) can take long,
          // much longer under sanitizers: keep the heartbeats going.
          if (i % 8 == 7 && on_progress_thread) (void)membership_->heartbeat(now_ns());
        }
        more_in_batch_ = false;
        const bool watched_done =
            watch != nullptr && word_state(watch->load(std::memory_order_acquire)) == kStDone;
        if (watched_done && n == 1 && cq_[0].len <= kHoldRxBytes) {
          // A ping-pong's message: handing its ring room back (a locked
          // store to a line the peer reads) can wait for the next pass, out
          // of the waiter's way. Only a small one: the peer needs no room.
          held_rx_ = t.get();
          held_cq_ = cq_[0];
        } else {
          t->release_rx(std::span<const Completion>(cq_.data(), n));
        }
        t->flush();               // the batch's corked replies go now, not after the pass
        if (watched_done) break;  // the waiter can go; another poll would only delay it
      }
      if (watch != nullptr && word_state(watch->load(std::memory_order_acquire)) == kStDone) break;
    }
    if (!did && ++empty_passes < kEmptyPassesPerCall && !want_.load(std::memory_order_relaxed) &&
        (watch == nullptr || word_state(watch->load(std::memory_order_acquire)) != kStDone)) {
      continue;
    }
    holder_.store(std::thread::id(), std::memory_order_relaxed);
    busy_.store(false, std::memory_order_seq_cst);
    if (!want_.load(std::memory_order_seq_cst)) return did;
    if (busy_.exchange(true, std::memory_order_acquire)) return did;  // its holder runs it
  }
}

}  // namespace lt::proto
