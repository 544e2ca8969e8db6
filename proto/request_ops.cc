// Requests from the caller's side: made, waited for (spin, then sleep),
// tested, cancelled, released; and the sweep that fails a lost peer's.
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>

#include "common/log.h"
#include "common/net.h"
#include "common/trace_points.h"
#include "proto/engine.h"
#include "qos/cpu_policy.h"

namespace lt::proto {

Result<ReqId> Engine::done_request(Status s) {
  ReqId id = 0;
  auto r = alloc_request(ReqKind::kPlain, 0, &id);
  if (!r) return r.status();
  (*r)->set_claimed();
  finish(*r, s);
  return id;
}

void Engine::release(Request* r) {
  drop_placement(r);  // a request that never finished (unsent) may hold one
  r->bounce.reset();
  r->copy_dst.reset();
  if (r->admitted) sched_.retire(r->ticket);
  r->admitted = false;
  r->ticket = {};
  client_.requests.put_back(r);
  // A blocking send or call out of slots waits on the credit epoch too.
  credits_.room_freed();
}

void Engine::fail_requests_to(NodeId peer, Code c) {
  RequestTable& reqs = client_.requests;
  for (uint32_t i = 0, n = reqs.size(); i < n; ++i) {
    Request* r = reqs.at(i);
    if (r->peer.load() != peer) continue;
    uint64_t w = r->word.load();
    if (!live_state(word_state(w))) continue;
    if (r->word.compare_exchange_strong(w, (w & ~uint64_t{0xff}) | kStClaimed)) {
      if (r->peer.load() == peer) {
        // No reply will return this call's RPC credit.
        if (r->kind == ReqKind::kRpc) credits_.return_rpc(peer);
        finish(r, c);
      } else {
        r->word.store(w);
      }
    }
  }
}

Status Engine::wait(ReqId id, Deadline d) { return wait_impl(id, d, nullptr); }

// kPolls marks neither: the progress thread stays parked for a poller, and a
// poller is no caller between two calls (that would keep it parked after the
// poller hands back).
void Engine::end_spin(SpinEnd how) {
  const bool will_sleep = how == SpinEnd::kSleeps;
  if (will_sleep) {
    sleeper_.store(true, std::memory_order_seq_cst);
  } else if (how == SpinEnd::kDone) {
    // Only "it moved" matters to the progress thread: no locked increment.
    spin_ends_.store(spin_ends_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  if (spinners_.fetch_sub(1, std::memory_order_seq_cst) == 1 && will_sleep &&
      parked_.load(std::memory_order_seq_cst)) {
    net::ring_eventfd(wake_fd_);  // nobody polls while we sleep: unpark the progress thread
  }
}

bool Engine::become_poller() {
  // Not while other callers spin (this one is still counted): they poll for
  // everyone, and a thread asleep on the transports would wake for traffic
  // they take (an idle receiver, beside a busy one, cost 8 B tcp streaming 8%).
  if (poller_epfd_ < 0 || spinners_.load(std::memory_order_seq_cst) > 1) return false;
  bool expected = false;
  if (!poller_.compare_exchange_strong(expected, true, std::memory_order_seq_cst)) return false;
  // Only while the progress thread is parked: it then stays parked for us
  // (progress_loop). Polling or asleep on the transports, it is the poller.
  if (parked_.load(std::memory_order_seq_cst)) return true;
  poller_.store(false, std::memory_order_seq_cst);
  return false;
}

// The caller sleeps in epoll on every transport's wait_fd(), armed as the
// progress thread arms them (prepare_sleep), and on poller_fd_, which the
// completer of its request rings when another thread completed it. Each
// wake-up is a progress pass: it serves peers and completes other callers'
// requests as the progress thread would. Returns with `r` done, the
// deadline passed, the progress thread polling again (unparked: other
// callers sleep on their futex and need it; two threads asleep on the
// transports would both wake for every event), or another caller spinning
// (it polls), and hands the polling back. Returns true when the caller
// still waits and is counted in futex_sleepers_ for its futex sleep.
bool Engine::poll_asleep(Request* r, Deadline d) {
  while (!r->done()) {
    const uint64_t served_before = served_.load(std::memory_order_relaxed);
    const uint64_t left = d.remaining_ns();
    if (left == 0 || !parked_.load(std::memory_order_seq_cst) ||
        spinners_.load(std::memory_order_seq_cst) != 0) {
      break;
    }
    if (!prepare_sleep()) {  // another thread holds the token, or wants a pass
      progress(&r->word);
      cpu_relax();
      continue;
    }
    r->notify_fd.store(poller_fd_, std::memory_order_relaxed);
    r->sleepers.fetch_add(1, std::memory_order_seq_cst);
    AsymFence::heavy();  // the completer's side is a plain store (Request::complete)
    if (word_state(r->word.load(std::memory_order_seq_cst)) != kStDone) {
      // Capped as the futex sleep is: QoS keeps its board fresh.
      const uint64_t ns =
          std::min<uint64_t>(left, sched_.paced() ? qos::Scheduler::kKeepFreshNs : kMaxSleepNs);
      const timespec t = {static_cast<time_t>(ns / 1'000'000'000ull),
                          static_cast<long>(ns % 1'000'000'000ull)};
      epoll_event evs[8];
      const int n = epoll_pwait2(poller_epfd_, evs, 8, &t, nullptr);
      const auto all = transports_.all();
      for (int i = 0; i < n; ++i) {
        const uint32_t tag = evs[i].data.u32;
        if (tag < all.size()) {
          all[tag]->woken();
        } else {
          net::drain_eventfd(poller_fd_);
        }
      }
    }
    r->sleepers.fetch_sub(1, std::memory_order_seq_cst);
    r->notify_fd.store(-1, std::memory_order_relaxed);
    if (sched_.paced()) sched_.keep_fresh(now_ns());
    progress(&r->word);
    // It served a peer (a call, a read over tcp): a peer that calls calls
    // again, and this thread would meet each call with a wake-up from epoll
    // (an RPC server with a receiver blocked beside it: 8 B calls took 14 us
    // at the median, not 1.2). The progress thread spins after serving
    // (serve_gauge_), so the polling goes back to it.
    if (served_.load(std::memory_order_relaxed) != served_before) break;
  }
  // A caller that still waits sleeps on its futex next: counted before the
  // hand-over, so that a parked progress thread is woken for it at once
  // rather than at the end of its park window.
  // It also tells the progress thread, as end_spin does, that a caller
  // stopped to sleep: one whose earlier wait ended within its spin would
  // otherwise keep it parked, as for a caller between two calls, for its
  // window and slack (up to 4 ms) with nobody polling (traced: a call to a
  // server whose receiver had handed back waited 3.9 ms).
  const bool sleeps = !r->done() && d.remaining_ns() != 0;
  if (sleeps) {
    futex_sleepers_.fetch_add(1, std::memory_order_seq_cst);
    sleeper_.store(true, std::memory_order_seq_cst);
  }
  poller_.store(false, std::memory_order_seq_cst);
  // Back to the progress thread: at once if a caller sleeps on a futex (it
  // needs someone to poll), else within its park window, as after any call.
  if (parked_.load(std::memory_order_seq_cst)) {
    if (futex_sleepers_.load(std::memory_order_seq_cst) != 0) {
      net::ring_eventfd(wake_fd_);
    } else {
      park_timer_.arm();
    }
  }
  return sleeps;
}

void Engine::open_poller_set() {
  poller_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  poller_epfd_ = poller_fd_ >= 0 ? epoll_create1(EPOLL_CLOEXEC) : -1;
  if (poller_epfd_ < 0) return;  // callers then sleep on their futex only
  const auto all = transports_.all();
  auto add = [&](int fd, uint32_t tag) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = tag;
    return epoll_ctl(poller_epfd_, EPOLL_CTL_ADD, fd, &ev) == 0;
  };
  bool ok = add(poller_fd_, static_cast<uint32_t>(all.size()));
  for (uint32_t i = 0; ok && i < all.size(); ++i) ok = add(all[i]->wait_fd(), i);
  if (!ok) {
    close(poller_epfd_);
    poller_epfd_ = -1;
  }
}

Status Engine::wait_credits(uint32_t seen, Deadline d) {
  const uint64_t start = now_ns();
  const uint64_t spin_until = start + wait_gauge_.budget_ns();
  spinners_.fetch_add(1, std::memory_order_seq_cst);
  while (credits_.epoch() == seen && now_ns() < spin_until) {
    if (!progress()) cpu_relax();
  }
  // Counted before end_spin may unpark the progress thread, which looks.
  const bool sleeps = credits_.epoch() == seen;
  if (sleeps) futex_sleepers_.fetch_add(1, std::memory_order_seq_cst);
  end_spin(sleeps ? SpinEnd::kSleeps : SpinEnd::kDone);
  if (!sleeps) return Status::ok();
  Status s = credits_.sleep_while(seen, d);
  futex_sleepers_.fetch_sub(1, std::memory_order_seq_cst);
  return s;
}

Status Engine::wait_impl(ReqId id, Deadline d, Results* res) {
  if (id == kDoneReqId) return Status::ok();
  Request* r = lookup(id);
  if (r == nullptr) return Code::kBadHandle;
  if (r->done()) return collect(r, res);  // a streaming receiver's usual case: no spin to count
  if (holder_.load(std::memory_order_relaxed) == std::this_thread::get_id()) {
    // A look (timeout 0) by a handler is no wait: it only times out.
    return d.at_ns() == 0 ? Status(Code::kTimedOut) : waited_in_handler();
  }
  // The spin budget starts at the first clock read, 8 polls in: a wait that
  // ends before that (a ping-pong) reads no clock at all.
  uint64_t spin_until = 0, started = 0;
  YieldPacer pacer(kSpinYieldNs, &peer_cpu_, r->peer.load(std::memory_order_relaxed),
                   config_.engine.move_spinners != 0);
  // A thread of an idle class does not spin (qos/cpu_policy.h): it could be
  // preempted holding the progress token for as long as the CPU is busy.
  const bool spins = !qos::thread_runs_idle();
  spinners_.fetch_add(1, std::memory_order_seq_cst);
  for (uint32_t i = 1; spins && !r->done(); ++i) {
    if (!progress(&r->word) && i > kPlainPolls) cpu_relax();
    if (i % 8 != 0) continue;  // the clock is not free either
    uint64_t now = now_ns();
    if (spin_until == 0) {
      d.fix(now);  // a lazy deadline starts here, a few polls into the call
      started = now;
      spin_until = now + wait_gauge_.budget_ns();
      pacer.start(now);
      continue;
    }
    if (now >= spin_until + r->spin_extra_us.load(std::memory_order_relaxed) * 1000ull) break;
    if (now >= d.at_ns()) break;  // a short timeout (0: look once) ends the spin too
    sched_.keep_fresh(now);
    // A spin this long means the other side is slow, often because it
    // shares this core (a CPU hog took the other one): let it run.
    pacer.maybe_yield(&now);
  }
  // Sleep on the transports if the progress thread is parked (nobody else
  // polls), else on the request's futex: counted before end_spin may unpark
  // the progress thread, which looks.
  LT_TRACE_POINT('g');
  const bool polls = spins && !r->done() && become_poller();
  bool counted = !polls && !r->done();
  if (counted) futex_sleepers_.fetch_add(1, std::memory_order_seq_cst);
  end_spin(polls ? SpinEnd::kPolls : counted ? SpinEnd::kSleeps : SpinEnd::kDone);
  if (polls) counted = poll_asleep(r, d);
  if (!counted && !r->done()) {  // the deadline passed as the poller left
    futex_sleepers_.fetch_add(1, std::memory_order_seq_cst);
    counted = true;
  }
  while (!r->done()) {
    uint64_t left = d.remaining_ns();
    if (left == 0) {
      if (counted) futex_sleepers_.fetch_sub(1, std::memory_order_seq_cst);
      return Code::kTimedOut;
    }
    uint32_t seen = r->wake.load(std::memory_order_seq_cst);
    r->sleepers.fetch_add(1, std::memory_order_seq_cst);
    AsymFence::heavy();  // the completer's side is a plain store (Request::complete)
    if (word_state(r->word.load(std::memory_order_seq_cst)) != kStDone) {
      // The progress thread completes the request and wakes us; the cap on
      // the sleep only bounds the cost of a missed wake-up, or, with QoS
      // on, keeps this process's waiting classes on the host board.
      const uint64_t cap = sched_.paced() ? qos::Scheduler::kKeepFreshNs : kMaxSleepNs;
      futex_wait(&r->wake, seen, std::min<uint64_t>(left, cap));
    }
    r->sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (sched_.paced()) sched_.keep_fresh(now_ns());
  }
  if (counted) futex_sleepers_.fetch_sub(1, std::memory_order_seq_cst);
  // A wait long enough to read the clock teaches the gauge how long waits
  // last here (one that slept included: spinning would have saved its wake-up).
  if (started != 0) wait_gauge_.note(now_ns() - started);
  return collect(r, res);
}

// A handler that progress() runs on this thread (it holds the token) waits
// for a request only a pass can complete: an op its owner serves (tcp, ud),
// a call, a message. No thread can make a pass until the handler returns,
// so the wait could only time out, and this node's heartbeats would stop
// meanwhile (it would be declared down). It ends now as a timeout (a
// blocking call then cancels the request), said once per engine. Native
// one-sided ops (shm, rc) are done before any wait and never come here.
Status Engine::waited_in_handler() {
  if (!handler_wait_told_.exchange(true, std::memory_order_relaxed)) {
    LT_ERROR(
        "an RPC handler run by the progress thread waited for an operation that needs this "
        "engine's progress (one its owner serves over tcp or ud, a call, a message): it cannot "
        "complete before the handler returns, so it fails at once with LT_ERR_TIMEDOUT. Set "
        "engine.rpc_workers (LTIER_RPC_WORKERS) to run handlers on threads of their own");
  }
  return Code::kTimedOut;
}

Status Engine::collect(Request* r, Results* res) {
  Status s = r->status;
  if (res != nullptr) {
    res->alloc = r->alloc;
    res->mapr = r->mapr;
  }
  release(r);
  return s;
}

Status Engine::test(ReqId id) {
  if (id == kDoneReqId) return Status::ok();
  Request* r = lookup(id);
  if (r == nullptr) return Code::kBadHandle;
  if (!r->done()) {
    progress();
    if (!r->done()) return Code::kNoResource;
  }
  return collect(r, nullptr);
}

// How long a timed-out wait on a write still sent by reference waits
// before it looks at the request again.
constexpr uint64_t kSendingWaitUs = 1000;

Status Engine::wait_or_cancel(ReqId id, Deadline d, Results* res) {
  Status s = wait_impl(id, d, res);
  if (s.code() != Code::kTimedOut) return s;
  Request* r = lookup(id);
  if (r == nullptr) return s;
  // A write the transport still sends from the caller's buffer cannot be
  // withdrawn: wait until its bytes left (or its connection broke), then
  // cancel it as any other. A handler cannot wait for that (no pass runs).
  const uint64_t sending = req_word(req_gen(id), kStSending);
  while (r->word.load(std::memory_order_acquire) == sending &&
         holder_.load(std::memory_order_relaxed) != std::this_thread::get_id()) {
    s = wait_impl(id, Deadline::after_us(kSendingWaitUs), res);
    if (s.code() != Code::kTimedOut) return s;
  }
  if (r->move(req_gen(id), kStPending, kStCancelled)) {
    // Nobody can complete it now; a late reply finds the state changed.
    if (r->kind == ReqKind::kRecv || r->kind == ReqKind::kRpcRecv) unpost(r, id);
    release(r);
    return Code::kTimedOut;
  }
  // A completer claimed it just in time: take its result.
  return wait_impl(id, Deadline::never(), res);
}

}  // namespace lt::proto
