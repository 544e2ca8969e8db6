// Scheduler::post for a thread whose posts are deferred (defers_posts():
// an idle-class thread in a process that is not idle). Its requests go with
// kWrDeferred, so a stream transport queues them for the poller to send
// rather than let this thread, which the kernel may leave preempted for as
// long as any normal thread wants the CPU, hold a connection's sending role.
#include <algorithm>

#include "qos/scheduler.h"

namespace lt::qos {

// The requests are copied with kWrDeferred added, a bounded batch at a
// time (no allocation per post).
Result<size_t> Scheduler::post_deferred(transport::Endpoint& ep,
                                        std::span<const transport::WorkRequest> wrs) {
  constexpr size_t kBatch = 16;
  transport::WorkRequest batch[kBatch];
  size_t done = 0;
  while (done < wrs.size()) {
    const size_t n = std::min(wrs.size() - done, kBatch);
    for (size_t i = 0; i < n; ++i) {
      batch[i] = wrs[done + i];
      batch[i].flags |= transport::kWrDeferred;
    }
    auto r = ep.post(std::span<const transport::WorkRequest>(batch, n));
    if (!r) return done > 0 ? Result<size_t>(done) : r;  // the rest fails when posted again
    done += *r;
    if (*r < n) break;
  }
  return done;
}

}  // namespace lt::qos
