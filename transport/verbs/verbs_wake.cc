// The rc transport's wake-ups (ARCHITECTURE §6d): the completion channel's
// events, and arming the CQs just before the poller sleeps (the receive CQ,
// and the send CQ only while messages are in flight; the one-sided CQ
// never, onesided_cq.h).
#include <infiniband/verbs.h>
#include <sys/epoll.h>

#include "common/net.h"
#include "transport/verbs/verbs_transport.h"

namespace lt::transport::verbs {

void VerbsTransport::handle_events() {
  epoll_event evs[4];
  int k = ::epoll_wait(epfd_.get(), evs, 4, 0);
  for (int i = 0; i < k; ++i) {
    if (evs[i].data.u64 == kCqChannelTag) {
      bool send_fired = false;
      dev_->drain_events(&send_fired);
      if (send_fired) send_armed_.store(false, std::memory_order_seq_cst);
      if (armed_.exchange(false)) kick();
    }
  }
}

void VerbsTransport::arm_send() {
  if (!send_armed_.exchange(true, std::memory_order_seq_cst)) dev_->arm_send();
}

// Before the post, so the completion of a message posted while the poller
// sleeps raises the event. Pairs with try_arm: each stores before it loads,
// so one of them sees the other and the send CQ is armed.
void VerbsTransport::msg_posting() {
  msgs_out_.fetch_add(1, std::memory_order_seq_cst);
  if (armed_.load(std::memory_order_seq_cst) && !send_armed_.load(std::memory_order_relaxed)) {
    arm_send();
  }
}

// Armed only here, never by a spin of empty polls: an armed CQ makes the
// device raise an event per completion (on Soft-RoCE a tasklet and a
// wake-up of the channel's waiters), which a caller polling for its reply
// would pay for with nobody asleep to wake.
void VerbsTransport::prepare_sleep() {
  dev_->events().read();  // the device's own events (async_events.h), before the poller sleeps
  handle_events();        // a stale event would end the sleep at once
  try_arm();
}

// Going to sleep: arm the receive CQ, and the send CQ while messages are in
// flight (msg_posting arms it for one posted later), then look once more (a
// completion that came before the arming raises no event).
void VerbsTransport::try_arm() {
  if (conns_.has_pending() || has_backlog_.load() || has_broken_.load()) return;
  // What an earlier arming stashed still waits for a poll (two threads may
  // prepare to sleep in a row: the progress thread and a caller that sleeps
  // on the transports): keep it, and stay awake.
  if (stash_n_ != 0) {
    kick();
    return;
  }
  net::drain_eventfd(awake_fd_.get());
  armed_.store(true, std::memory_order_seq_cst);
  if (dev_->recv_cq() == dev_->cq()) {
    dev_->arm();  // one CQ for both
  } else {
    dev_->arm_recv();
    if (msgs_out_.load(std::memory_order_seq_cst) != 0) arm_send();
  }
  // Completions that came before the arming raise no event: take them now
  // (the send CQ's are handled where they are found; the receive CQ's wait
  // in stash_ for the next poll) and stay awake if there were any.
  poll_send_cq();
  stash_n_ = ibv_poll_cq(dev_->recv_cq(), 1, stash_.get());
  if (stash_n_ < 0) stash_n_ = 0;
  if (stash_n_ != 0 || done_.pending()) {
    armed_.store(false, std::memory_order_seq_cst);
    kick();
  }
}

}  // namespace lt::transport::verbs
