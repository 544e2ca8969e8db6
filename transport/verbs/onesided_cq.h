// The send CQ of the rc transport's one-sided QPs (verbs_conn.h), never
// armed: a one-sided op's completion is its caller's to poll (it waits for
// it itself, Channel::wait_for), so it raises no event and wakes no poller.
// The message QPs' send CQ is armed while the poller sleeps and messages are
// in flight, and a message left unsignaled counts as in flight until a later
// signaled request on its QP completes; one-sided completions on that CQ
// woke the sleeping poller once per op, for nothing.
//
// Its size is fixed: a post waits for room (room()), so it never overflows.
// Thread contract: any thread polls it, one at a time under lock() (a
// try-lock, as the message CQ's).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "common/spinlock.h"
#include "common/status.h"

struct ibv_cq;

namespace lt::transport::verbs {

class VerbsDevice;

class OneSidedCq {
 public:
  static Result<std::unique_ptr<OneSidedCq>> create(VerbsDevice& dev, uint32_t entries,
                                                    std::string* why);
  ~OneSidedCq();
  OneSidedCq(const OneSidedCq&) = delete;
  OneSidedCq& operator=(const OneSidedCq&) = delete;

  ibv_cq* raw() const { return cq_; }
  SpinLock& lock() { return mu_; }
  /// Whether a post of a few more requests fits.
  bool room() const { return posted_.load(std::memory_order_relaxed) < limit_; }
  void count_posted(uint32_t n) { posted_.fetch_add(n, std::memory_order_relaxed); }
  void count_done(uint32_t n) { posted_.fetch_sub(n, std::memory_order_relaxed); }

 private:
  OneSidedCq() = default;
  ibv_cq* cq_ = nullptr;
  uint64_t limit_ = 0;
  std::atomic<uint64_t> posted_{0};
  SpinLock mu_;
};

}  // namespace lt::transport::verbs
