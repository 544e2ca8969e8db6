// Membership events for the application (LT_member_event): a bounded queue
// that the progress thread fills and any thread drains, oldest first. When
// the application does not keep up, the oldest events go and the next one
// handed out says how many were lost (`missed`), so a reader can fall back
// to LT_nodes.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>

#include "common/status.h"
#include "common/time.h"
#include "transport/transport.h"

namespace lt::proto {

struct MemberEvent {
  uint8_t kind = 0;  // Membership::Event::Kind
  transport::NodeId node = 0;
  uint32_t missed = 0;  // events dropped before this one
};

class MemberEvents {
 public:
  explicit MemberEvents(size_t cap = 1024) : cap_(cap) {}

  void push(uint8_t kind, transport::NodeId node) {
    std::lock_guard<std::mutex> g(mu_);
    if (q_.size() == cap_) {
      q_.pop_front();
      ++missed_;
    }
    q_.push_back({kind, node, 0});
    cv_.notify_one();
  }

  /// The next event, waiting until `d`: kTimedOut when none came, kClosed
  /// once the engine left.
  Result<MemberEvent> next(Deadline d) {
    std::unique_lock<std::mutex> g(mu_);
    for (;;) {
      if (!q_.empty()) {
        MemberEvent e = q_.front();
        q_.pop_front();
        e.missed = missed_;
        missed_ = 0;
        return e;
      }
      if (closed_) return Code::kClosed;
      uint64_t left = d.remaining_ns();
      if (left == 0) return Code::kTimedOut;
      cv_.wait_for(g, std::chrono::nanoseconds(left));
    }
  }

  void close() {
    std::lock_guard<std::mutex> g(mu_);
    closed_ = true;
    cv_.notify_all();
  }

 private:
  const size_t cap_;
  std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  std::deque<MemberEvent> q_;
  uint32_t missed_ = 0;
  bool closed_ = false;
};

}  // namespace lt::proto
