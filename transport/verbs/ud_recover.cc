// ud's QP put back in service after an error (ARCHITECTURE §6e). A UD QP
// goes to the error state (or to SQE, the send queue's error state) on a
// local error: a failed send or receive, or what the device reports as a
// QP event. Every peer of the node is behind that one QP, so instead of
// declaring them all lost the poller resets it: it stops granting posts,
// waits until the device has completed (flushed) every post already made,
// moves the QP through RESET to RTS again and lets the posts go on. A
// device that has not flushed them all a second later is reset anyway:
// the reset empties its send queue, so those posts will never complete,
// and their slots are taken back. The QP number does not change, so peers
// notice nothing but lost datagrams, which ltier's acknowledgements send
// again; no message is lost or failed.
#include <infiniband/verbs.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "common/log.h"
#include "transport/verbs/ud_transport.h"

namespace lt::transport::verbs {

namespace {
constexpr uint64_t kFenceWaitNs = 1'000'000'000;  // posts still in the device after this: reset
constexpr uint64_t kFenceSpinNs = 2'000'000;      // the poller spins this long for flushes,
constexpr uint64_t kFenceTickNs = 1'000'000;      // then looks this often
constexpr uint64_t kRetryFirstNs = 100'000'000;   // a failed reset is tried again after this,
constexpr uint64_t kRetryMaxNs = 10'000'000'000;  // doubling up to this
}  // namespace

// While the fence waits, the poller stays awake for the flushed sends of a
// QP that failed a moment ago, then looks every millisecond until the
// reset is due (kFenceWaitNs); one whose reset failed looks again on its
// retry timer.
uint64_t UdTransport::fence_deadline(uint64_t now) const {
  if (!sq_fenced_) return UINT64_MAX;
  if (reset_retry_ns_ != 0) return reset_retry_ns_;
  if (now - fenced_at_ns_ < kFenceSpinNs) return 0;
  return std::min(now + kFenceTickNs, fenced_at_ns_ + kFenceWaitNs);
}

// Runs in the poller while qp_error_ or the fence is set: never blocks.
void UdTransport::recover_qp(uint64_t now) {
  const Choice& c = dev_->choice();
  if (!sq_fenced_) {
    qp_error_.store(false, std::memory_order_release);
    ibv_qp_attr a{};
    ibv_qp_init_attr ia{};
    if (ibv_query_qp(qp_, &a, IBV_QP_STATE, &ia) == 0 && a.qp_state == IBV_QPS_RTS) {
      return;  // a failed work request that left the QP in service
    }
    LT_WARN(
        "ud: the UD QP %u on %s port %u is in the %s state; resetting it (its datagrams are "
        "sent again)",
        qp_->qp_num, c.device.c_str(), c.port,
        a.qp_state == IBV_QPS_SQE ? "send queue error" : "error");
    sq_used_.fetch_add(kSqFence, std::memory_order_acq_rel);
    sq_fenced_ = true;
    fenced_at_ns_ = now;
    fence_warned_ = false;
    reset_retry_ns_ = 0;
    retry_gap_ns_ = 0;
  }
  // Every post granted before the fence completes (flushed, as the QP is in
  // error) before the reset, so that no slot is left counted in the device.
  // Fewer than none in flight (more completions than posts) counts as
  // none, or the fence would never lift and every peer would be lost;
  // completions of no post are dropped before they count (completion_of),
  // so this is a second line.
  poll_send_cq();
  if (static_cast<int32_t>(sq_used_.load(std::memory_order_acquire) - kSqFence) > 0) {
    if (now - fenced_at_ns_ < kFenceWaitNs) return;
    if (!fence_warned_) {
      // Soft-RoCE (kernel 6.1) has been seen to leave sends posted as the
      // QP went to error neither sent nor flushed: waiting longer would
      // lose every peer.
      LT_WARN(
          "ud: %u posts to the UD QP on %s have not completed a second after it failed; "
          "resetting it anyway (their slots are taken back)",
          sq_used_.load() - kSqFence, c.device.c_str());
      fence_warned_ = true;
    }
  }
  if (now < reset_retry_ns_) return;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RESET;
  int rc = ibv_modify_qp(qp_, &a, IBV_QP_STATE);
  if (rc != 0) {
    LT_ERROR(
        "ud: the UD QP on %s port %u cannot be reset: %s; its peers are declared lost "
        "after verbs.ud_peer_timeout_ms",
        c.device.c_str(), c.port, std::strerror(rc));
  }
  if (rc != 0 || !ready_qp().is_ok()) {  // ready_qp logs why; tried again later
    retry_gap_ns_ = retry_gap_ns_ == 0 ? kRetryFirstNs : std::min(2 * retry_gap_ns_, kRetryMaxNs);
    reset_retry_ns_ = now + retry_gap_ns_;
    need_timer(reset_retry_ns_);
    return;
  }
  poll_send_cq();  // flushes that came before the reset
  // Exact: send() never counts a post it does not grant, and none is
  // granted while fenced.
  const int32_t left = static_cast<int32_t>(sq_used_.load(std::memory_order_acquire) - kSqFence);
  if (left < 0) {
    LT_WARN("ud: the UD QP on %s completed %d more posts than it was given before its reset",
            c.device.c_str(), -left);
  } else if (left > 0) {
    LT_WARN("ud: the UD QP on %s was reset with %d posts never completed; %u slots taken back",
            c.device.c_str(), left, take_back_slots());
  }
  if (const uint64_t stray = stray_completions_.exchange(0); stray != 0) {
    LT_WARN("ud: the UD QP on %s flushed %llu work requests it did not hold (dropped)",
            c.device.c_str(), static_cast<unsigned long long>(stray));
  }
  // Back to exactly none in flight.
  sq_used_.fetch_sub(static_cast<uint32_t>(static_cast<int64_t>(kSqFence) + left),
                     std::memory_order_acq_rel);
  sq_fenced_ = false;
  qp_resets_.fetch_add(1, std::memory_order_relaxed);
  LT_INFO("ud: the UD QP %u on %s is in service again", qp_->qp_num, c.device.c_str());
  // What was in flight went with the error: sent again now rather than at
  // each datagram's retransmission timeout.
  for (const auto& sp : std::vector<std::shared_ptr<UdConn>>(conns_.snapshot())) {
    if (!sp->dead_.load()) sp->resend_in_flight();
  }
}

// After a reset: the emptied send queue will complete none of the posts
// it held, so every slot forgets its posts in the device, and one its
// sender released is free. A connection's slot_posted racing with this
// (its post will not be granted) is forgotten too, and its slot_done then
// finds nothing to undo; a released slot is posted only by the poller
// (acknowledgements, this thread) or at close, so none of those races.
// Returns the slots that held posts.
uint32_t UdTransport::take_back_slots() {
  uint32_t held = 0;
  for (uint32_t slot = 0; slot < slots_; ++slot) {
    uint32_t s = slot_state_[slot].load(std::memory_order_acquire);
    while ((s & kInDeviceMask) != 0 && !slot_state_[slot].compare_exchange_weak(
                                           s, s & ~kInDeviceMask, std::memory_order_acq_rel)) {
    }
    if ((s & kInDeviceMask) == 0) continue;
    ++held;
    if ((s & kReleased) != 0) free_slot(slot);
  }
  return held;
}

bool UdTransport::fault_due() {
  return posts_seen_.fetch_add(1, std::memory_order_relaxed) + 1 == config_.ud_fault_after;
}

// verbs.ud_fault_after: what a local error does to the QP, on purpose.
// verbs.ud_fault_stuck adds what a device that loses sends does: slots
// counted as posted whose completions never come.
void UdTransport::break_qp_for_test() {
  LT_WARN("ud: moving the UD QP to the error state (verbs.ud_fault_after)");
  for (uint32_t i = 0; i < config_.ud_fault_stuck; ++i) {
    uint32_t slot;
    if (!take_slots(1, &slot)) break;
    slot_state_[slot].store(kReleased, std::memory_order_relaxed);
    slot_posted(slot);
    sq_used_.fetch_add(1, std::memory_order_acq_rel);
  }
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  if (int rc = ibv_modify_qp(qp_, &a, IBV_QP_STATE); rc != 0) {
    LT_WARN("ud: the UD QP could not be moved to the error state: %s", std::strerror(rc));
  }
}

}  // namespace lt::transport::verbs
