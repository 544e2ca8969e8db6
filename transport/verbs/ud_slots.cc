// The ud transport's send slots (registered, one MTU each, shared by every
// peer; a slot's state counts its posts in the device and says whether its
// sender released it) and its posts to the device: datagrams out, send
// completions back, and connections waiting for either.
#include <infiniband/verbs.h>

#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "transport/verbs/ud_transport.h"

namespace lt::transport::verbs {

bool UdTransport::take_slots(uint32_t n, uint32_t* out) {
  std::lock_guard<SpinLock> g(free_mu_);
  if (free_slots_.size() < n) return false;
  for (uint32_t i = 0; i < n; ++i) {
    out[i] = free_slots_.back();
    free_slots_.pop_back();
  }
  return true;
}

void UdTransport::free_slot(uint32_t slot) {
  slot_state_[slot].store(0, std::memory_order_relaxed);
  std::lock_guard<SpinLock> g(free_mu_);
  free_slots_.push_back(slot);
}

void UdTransport::slot_posted(uint32_t slot) {
  slot_state_[slot].fetch_add(1, std::memory_order_acq_rel);
}

// The device is done with one post of `slot`; the last one of a released
// slot frees it.
void UdTransport::slot_done(uint32_t slot) { (void)completion_of(slot); }

void UdTransport::release_slot(uint32_t slot) {
  if (slot == kNoSlot) return;
  const uint32_t prev = slot_state_[slot].fetch_or(kReleased, std::memory_order_acq_rel);
  if ((prev & kInDeviceMask) == 0) free_slot(slot);
}

size_t UdTransport::send(UdConn& c, const UdSend* s, size_t n) {
  // Only what is granted is ever counted (no add taken back later), so the
  // count is exact whenever no post is granted: recover_qp relies on it.
  uint32_t used = sq_used_.load(std::memory_order_acquire);
  size_t grant;
  do {
    grant = used >= sq_depth_ ? 0 : std::min<size_t>(n, sq_depth_ - used);
  } while (grant > 0 && !sq_used_.compare_exchange_weak(used, used + static_cast<uint32_t>(grant),
                                                        std::memory_order_acq_rel));
  ibv_ah* ah = c.ah();
  if (grant > 0 && ah != nullptr) {
    ibv_send_wr wr[kUdBatch];
    ibv_sge sge[kUdBatch];
    for (size_t i = 0; i < grant; ++i) {
      sge[i].addr = reinterpret_cast<uint64_t>(slot_ptr(s[i].slot));
      sge[i].length = s[i].bytes;
      sge[i].lkey = send_region_->lkey();
      wr[i] = ibv_send_wr{};
      wr[i].wr_id = s[i].slot;
      wr[i].sg_list = &sge[i];
      wr[i].num_sge = 1;
      wr[i].opcode = IBV_WR_SEND;
      wr[i].send_flags = IBV_SEND_SIGNALED;
      wr[i].wr.ud.ah = ah;
      wr[i].wr.ud.remote_qpn = c.qpn();
      wr[i].wr.ud.remote_qkey = kUdQkey;
      wr[i].next = i + 1 < grant ? &wr[i + 1] : nullptr;
    }
    ibv_send_wr* bad = nullptr;
    if (int rc = ibv_post_send(qp_, wr, &bad); rc != 0) {
      const size_t posted = bad != nullptr ? static_cast<size_t>(bad - wr) : 0;
      LT_DEBUG("ud: ibv_post_send took %zu of %zu: %s", posted, grant, std::strerror(rc));
      sq_used_.fetch_sub(static_cast<uint32_t>(grant - posted), std::memory_order_acq_rel);
      grant = posted;
    }
    if (config_.ud_fault_after != 0 && grant > 0 && fault_due()) break_qp_for_test();
  } else if (grant > 0) {
    sq_used_.fetch_sub(static_cast<uint32_t>(grant), std::memory_order_acq_rel);
    grant = 0;
  }
  for (size_t i = grant; i < n; ++i) slot_done(s[i].slot);
  return grant;
}

// A completion for a slot with no post in the device is not one of ours:
// Soft-RoCE (kernel 6.1) has been seen to flush a whole extra lap of a UD
// send queue that went to the error state, stale work requests included.
// Taken as real, those freed slots that were free already and counted
// posts that were never made, and the node lost every ud peer. They are
// dropped here and counted. (A stale one that names a slot in the device
// frees it early; the QP is in error, so the device sends nothing from it,
// and the slot's own completion then finds it done and is dropped.)
bool UdTransport::completion_of(uint32_t slot) {
  if (slot >= slots_) return false;
  uint32_t s = slot_state_[slot].load(std::memory_order_acquire);
  for (;;) {
    if ((s & kInDeviceMask) == 0) return false;
    if (slot_state_[slot].compare_exchange_weak(s, s - 1, std::memory_order_acq_rel)) break;
  }
  if (s == (kReleased | 1)) free_slot(slot);
  return true;
}

void UdTransport::poll_send_cq() {
  ibv_wc wc[32];
  int k;
  while ((k = ibv_poll_cq(dev_->cq(), 32, wc)) > 0) {
    uint32_t ours = 0;
    for (int i = 0; i < k; ++i) {
      if (wc[i].status != IBV_WC_SUCCESS) {
        LT_DEBUG("ud: a send failed: %s", ibv_wc_status_str(wc[i].status));
        note_qp_error();
      }
      if (completion_of(static_cast<uint32_t>(wc[i].wr_id))) ++ours;
    }
    sq_used_.fetch_sub(ours, std::memory_order_acq_rel);
    if (ours != static_cast<uint32_t>(k)) {
      stray_completions_.fetch_add(static_cast<uint32_t>(k) - ours, std::memory_order_relaxed);
    }
  }
}

void UdTransport::report_send_done(uint64_t wr_id) {
  done_.push(wr_id, Code::kOk);
  if (armed_.load(std::memory_order_seq_cst)) kick();
}

void UdTransport::note_backlog(UdConn* c) {
  {
    std::lock_guard<std::mutex> g(backlog_mu_);
    if (std::none_of(backlogged_.begin(), backlogged_.end(),
                     [&](const auto& p) { return p.get() == c; })) {
      backlogged_.push_back(c->shared_from_this());
    }
    has_backlog_.store(true, std::memory_order_seq_cst);
  }
  if (armed_.load(std::memory_order_seq_cst)) kick();
}

}  // namespace lt::transport::verbs
