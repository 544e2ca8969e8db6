// Returning message credits (the counting is in credits.h): a consumed
// message's credit rides on the next message to its sender or goes in a
// MsgCredit once a batch is owed.
#include "proto/engine.h"

namespace lt::proto {

void Engine::credit_consumed(NodeId from, bool credit_now) {
  bool due;
  {
    std::lock_guard<SpinLock> g(client_.ports.mutex());
    due = credits_.count_consumed(from, from == self() || credit_now);
  }
  if (due) send_credit(from);
}

// Sends what is owed to `to` now (count_consumed said a MsgCredit is due).
void Engine::send_credit(NodeId to) {
  uint32_t n = credits_.take_owed(to);
  if (n == 0) return;  // a piggybacking sender took them
  if (to == self()) return credits_.apply_msg(to, n);
  MsgCredit c{make_header(MsgOp::kMsgCredit, 0), n, 0};
  (void)send(to, &c, sizeof(c), nullptr, 0, default_deadline(), true);
}

}  // namespace lt::proto
