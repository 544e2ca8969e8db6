// The send completions a verbs transport reports through its next poll():
// a user-signaled request done by another thread than the poller (rc's
// one-sided ops complete in their caller, its messages in whichever thread
// polls the send CQ, ud's sends when acknowledged). A vector and a read
// index, emptied whole: no allocation once it has grown to the most ever
// waiting.
// Any thread pushes; the poller drains. `pending()` is what the poller's
// arming looks at before it sleeps: a push made after it armed kicks it
// (the caller's job, after push).
//
// Thread contract: push from any thread, drain and pending from the poller.
#pragma once

#include <atomic>
#include <cstddef>
#include <iterator>
#include <mutex>
#include <span>
#include <vector>

#include "transport/transport.h"

namespace lt::transport::verbs {

class DoneQueue {
 public:
  void push(uint64_t wr_id, Code code) {
    Completion c;
    c.kind = CqKind::kSendDone;
    c.wr_id = wr_id;
    c.status = code;
    std::lock_guard<std::mutex> g(mu_);
    q_.push_back(c);
    count_.fetch_add(1, std::memory_order_seq_cst);  // ordered before the caller reads `armed`
  }
  /// Whether any wait: seq_cst, as the arming's last look before sleeping.
  bool pending() const { return count_.load(std::memory_order_seq_cst) != 0; }
  /// Moves what fits into out[n..]; returns the new n.
  size_t drain(std::span<Completion> out, size_t n) {
    if (count_.load(std::memory_order_acquire) == 0) return n;
    std::lock_guard<std::mutex> g(mu_);
    while (head_ < q_.size() && n < out.size()) {
      out[n++] = q_[head_++];
      count_.fetch_sub(1, std::memory_order_relaxed);
    }
    if (head_ == q_.size()) {
      q_.clear();  // keeps its capacity
      head_ = 0;
    } else if (head_ >= 1024) {  // never emptied under a steady stream: drop what was read
      q_.erase(q_.begin(), q_.begin() + static_cast<std::ptrdiff_t>(head_));
      head_ = 0;
    }
    return n;
  }

 private:
  std::mutex mu_;
  std::vector<Completion> q_;
  size_t head_ = 0;  // q_[head_..] wait
  std::atomic<size_t> count_{0};
};

}  // namespace lt::transport::verbs
