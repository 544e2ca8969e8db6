// A connection's lane: a small ring per direction beside the main rings
// (shm_ring.h), with a producer lock of its own. Private to transport/shm/.
//
// Why: the main ring's producer lock is shared by every thread that sends to
// the peer. A bulk sender holds it while it copies a record in; preempted
// there (a thread of an idle class, or a vCPU the hypervisor stopped), it
// holds up every other sender for as long as it is off the CPU, and a
// latency-class RPC waits milliseconds for a lock held for a microsecond.
// Posts that keep no order with the connection's other messages (RPC calls
// and replies from threads that do not run idle) go to the lane instead, so
// they only ever wait for each other.
//
// The lane is a plain SPSC ring as in shm_ring.h: records published by their
// stamps (position ^ the segment's salt), a pad to the ring's end when a
// record does not fit before it, the consumer's tail in its RingCtrl, and a
// bell after publishing when the consumer asked for one (want_data). It
// never queues: a post that finds no room is refused, and the caller sends
// the message by the main ring instead. It has no window: 32 KiB is touched
// at most.
//
// Thread contract: post() from any thread (under the lane's lock); the rx
// side (ready, take, release) by the transport's poller only.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/cpu_hint.h"
#include "common/small_copy.h"
#include "common/spinlock.h"
#include "transport/shm/shm_ring.h"

namespace lt::transport::shm {

class ShmLane {
 public:
  static constexpr uint64_t kMask = kLaneBytes - 1;
  static constexpr uint64_t kMaxRecord = kLaneBytes / 4;
  /// The largest payload a lane record carries.
  static constexpr size_t kMaxPayload = kMaxRecord - kRecHdr;

  void attach(std::byte* tx, RingCtrl* tx_ctrl, std::byte* rx, RingCtrl* rx_ctrl, uint64_t salt) {
    tx_ = tx;
    tx_ctrl_ = tx_ctrl;
    rx_ = rx;
    rx_ctrl_ = rx_ctrl;
    salt_ = salt;
  }

  /// Producer: one message of hdr then data, or false with nothing written
  /// (too large for a lane record, or no room now). *bell: ring the peer's
  /// bell after this returns.
  bool post(const void* hdr, size_t hlen, const void* data, size_t dlen, bool* bell) {
    const size_t len = hlen + dlen;
    *bell = false;
    if (len > kMaxPayload) return false;
    const uint64_t rec = record_bytes(len);
    lock_.lock();
    uint64_t idx = head_ & kMask;
    const uint64_t pad = kLaneBytes - idx;
    const bool wrap = rec > pad;
    if (!room(wrap ? pad + rec : rec)) {
      lock_.unlock();
      return false;
    }
    if (wrap) {
      write_record_header(tx_ + idx, RecKind::kPad, pad - kRecHdr, 0, 0);
      publish(idx, pad);
      idx = 0;
    }
    write_record_header(tx_ + idx, RecKind::kMsg, len, 0, 0);
    std::byte* at = tx_ + idx + kRecHdr;
    copy_small(at, hdr, hlen);
    if (dlen != 0) copy_small(at + hlen, data, dlen);
    publish(idx, rec);
    stamp_barrier(*reinterpret_cast<uint64_t*>(tx_ + idx));
    *bell = take_bell_request(tx_ctrl_);
    lock_.unlock();
    return true;
  }

  /// Poller: true when the next record has been published.
  bool ready(std::memory_order mo = std::memory_order_acquire) const {
    return stamp_at(rx_, rx_pos_ & kMask).load(mo) == (rx_pos_ ^ salt_);
  }
  /// Poller: the next record (ready() said so), checked. Null when it is
  /// malformed (*why says how); else its payload, *len and *cpu set, and
  /// the record taken (its bytes stay lent until release()). Pads are
  /// passed over: *len is then kPadTaken and the result non-null.
  static constexpr uint32_t kPadTaken = ~0u;
  const std::byte* take(uint32_t* len, CpuHint* cpu, const char** why) {
    const uint64_t idx = rx_pos_ & kMask, contig = kLaneBytes - idx;
    const uint64_t avail = kLaneBytes - (rx_pos_ - rx_released_);
    const std::byte* at = rx_ + idx;
    RecHeader h;
    std::memcpy(&h, at, sizeof(h));  // a private copy: the peer cannot change it under us
    const uint64_t rec = record_bytes(h.len);
    if (static_cast<RecKind>(h.kind) == RecKind::kPad) {
      if (contig > avail || h.len != contig - kRecHdr) {
        *why = "bad pad record in the lane";
        return nullptr;
      }
      rx_pos_ += contig;
      *len = kPadTaken;
      return at;
    }
    if (static_cast<RecKind>(h.kind) != RecKind::kMsg || h.imm != 0) {
      *why = "bad record kind in the lane";
      return nullptr;
    }
    if (rec > contig || rec > avail || rec > kMaxRecord) {
      *why = "lane record beyond the producer's room";
      return nullptr;
    }
    rx_pos_ += rec;
    *len = h.len;
    *cpu = h.cpu;
    return at + kRecHdr;
  }
  /// Poller: hands what was taken back to the producer.
  void release() {
    if (rx_pos_ == rx_released_) return;
    rx_released_ = rx_pos_;
    aref(rx_ctrl_->tail).store(rx_pos_, std::memory_order_release);
  }
  /// Poller, going to sleep: asks for a bell; true when a record is there
  /// already (then no bell may come for it). seq_cst on both sides as for
  /// the main rings (ShmConn::publish_locked).
  bool arm() {
    aref(rx_ctrl_->want_data).store(1, std::memory_order_seq_cst);
    return ready(std::memory_order_seq_cst);
  }
  void disarm() { aref(rx_ctrl_->want_data).store(0, std::memory_order_relaxed); }

 private:
  static std::atomic_ref<uint64_t> stamp_at(std::byte* ring, uint64_t idx) {
    return aref(*reinterpret_cast<uint64_t*>(ring + idx));
  }
  bool room(uint64_t need) {
    if (head_ + need - tail_ <= kLaneBytes) return true;
    const uint64_t t = aref(tx_ctrl_->tail).load(std::memory_order_acquire);
    // A tail outside [head - L, head] is the peer's bug; treat it as "no room".
    if (t > head_ || head_ - t > kLaneBytes) return false;
    tail_ = t;
    return head_ + need - tail_ <= kLaneBytes;
  }
  void publish(uint64_t idx, uint64_t bytes) {
    const uint64_t pos = head_;
    head_ += bytes;
    stamp_at(tx_, idx).store(pos ^ salt_, std::memory_order_release);
  }

  std::byte* tx_ = nullptr;
  std::byte* rx_ = nullptr;
  RingCtrl* tx_ctrl_ = nullptr;
  RingCtrl* rx_ctrl_ = nullptr;
  uint64_t salt_ = 0;

  // Producer side, under lock_.
  SpinLock lock_;
  uint64_t head_ = 0, tail_ = 0;

  // Poller-only.
  uint64_t rx_pos_ = 0, rx_released_ = 0;
};

}  // namespace lt::transport::shm
