// Named locks and barriers, served by ltier-manager (FIFO-fair locks,
// reusable barriers). A lock's owner is the calling thread, so the state a
// node daemon would keep per client is nothing more than that id.
#include <sys/syscall.h>
#include <unistd.h>

#include "proto/engine.h"

namespace lt::proto {

namespace {
// The owner token of a lock: the calling thread. Locks are per thread, so two
// threads of one node exclude each other.
CtlArgs lock_owner() {
  CtlArgs a;
  a.has_u64 = true;
  a.u64 = static_cast<uint64_t>(syscall(SYS_gettid));
  return a;
}
bool valid_sync_name(const std::string& n) { return !n.empty() && n.size() <= kMaxName; }
}  // namespace

Status Engine::lock(const std::string& name, Deadline d) {
  LT_RETURN_IF_ERROR(usable());
  if (!valid_sync_name(name)) return Code::kInvalidArg;
  CtlArgs a = lock_owner();
  uint64_t req = 0;
  auto r = membership_.name_call(CtlType::kLockAcquire, name, d, a, &req);
  if (r.status().code() == Code::kTimedOut) {
    // Withdraw the waiting acquire; if the grant crossed it, this releases.
    (void)membership_.post_only(CtlType::kLockRelease, membership_.new_req(), name, a);
  }
  if (r) membership_.note_lock(name, a.u64, true);  // claimed back after a manager restart
  return r.status();
}

Status Engine::unlock(const std::string& name, Deadline d) {
  LT_RETURN_IF_ERROR(usable());
  if (!valid_sync_name(name)) return Code::kInvalidArg;
  CtlArgs a = lock_owner();
  Status s = membership_.name_call(CtlType::kLockRelease, name, d, a).status();
  if (s.is_ok()) membership_.note_lock(name, a.u64, false);
  // With the manager away, nobody can take the lock; forgetting it here means
  // it is not claimed back, so it is free under the restarted manager.
  if (s.code() == Code::kPeerDown && membership_.note_lock(name, a.u64, false)) {
    return Status::ok();
  }
  return s;
}

Status Engine::barrier(const std::string& name, uint32_t count, Deadline d) {
  LT_RETURN_IF_ERROR(usable());
  if (!valid_sync_name(name) || count == 0) return Code::kInvalidArg;
  CtlArgs a;
  a.has_u32 = true;
  a.u32 = count;
  uint64_t req = 0;
  auto r = membership_.name_call(CtlType::kBarrier, name, d, a, &req);
  if (r.status().code() == Code::kTimedOut) {
    CtlArgs w;
    w.has_u32 = true;
    w.u32 = 0;  // withdraw arrival `req`
    (void)membership_.post_only(CtlType::kBarrier, req, name, w);
  }
  return r.status();
}

}  // namespace lt::proto
