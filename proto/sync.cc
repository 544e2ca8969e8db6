// Named locks and barriers, served by the membership service (ltier-manager:
// FIFO-fair locks, reusable barriers). A lock's owner is the calling thread,
// so the state a node daemon would keep per client is nothing more than that
// id.
#include <sys/syscall.h>
#include <unistd.h>

#include "proto/engine.h"

namespace lt::proto {

namespace {
// The owner token of a lock: the calling thread. Locks are per thread, so two
// threads of one node exclude each other.
uint64_t lock_owner() { return static_cast<uint64_t>(syscall(SYS_gettid)); }
bool valid_sync_name(const std::string& n) { return !n.empty() && n.size() <= kMaxName; }
}  // namespace

Status Engine::lock(const std::string& name, Deadline d) {
  LT_RETURN_IF_ERROR(usable());
  if (!valid_sync_name(name)) return Code::kInvalidArg;
  return membership_->lock(name, lock_owner(), d);
}

Status Engine::unlock(const std::string& name, Deadline d) {
  LT_RETURN_IF_ERROR(usable());
  if (!valid_sync_name(name)) return Code::kInvalidArg;
  return membership_->unlock(name, lock_owner(), d);
}

Status Engine::barrier(const std::string& name, uint32_t count, Deadline d) {
  LT_RETURN_IF_ERROR(usable());
  if (!valid_sync_name(name) || count == 0) return Code::kInvalidArg;
  return membership_->barrier(name, count, d);
}

}  // namespace lt::proto
