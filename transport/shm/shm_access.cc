// ShmConn's one-sided operations: reads, writes and atomics straight on a
// peer's mapped memory (regions it made with alloc_memory, mapped here at
// first use; the ops themselves are MappedRegion's), the views of those
// mappings it hands to callers (Endpoint::view), cross-memory copies into
// memory the peer registered (placement), and the guard a post may check
// before its op (transport.h kWrGuard).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "common/small_copy.h"
#include "transport/shm/shm_conn.h"

namespace lt::transport::shm {

Result<std::shared_ptr<RemoteMap>> ShmConn::remote_map(uint64_t rkey) {
  {
    std::lock_guard<SpinLock> g(map_lock_);
    for (auto& [k, m] : maps_) {
      if (k == rkey) return m;
    }
  }
  // First use of this region: open the owner's memfd through /proc (same uid)
  // and check that it is the file the rkey names.
  if (rkey_ino(rkey) == 0) return Code::kBadHandle;
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/fd/%d", static_cast<int>(peer_pid_), rkey_fd(rkey));
  net::Fd f(::open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY));
  if (!f.valid() && errno == ELOOP) f.reset(::open(path, O_RDWR | O_CLOEXEC | O_NOCTTY));
  if (!f.valid()) {
    LT_DEBUG("shm: rkey %#" PRIx64 " of node %u: cannot open %s: %s", rkey, peer_.load(), path,
             strerror(errno));
    return Code::kBadHandle;
  }
  struct stat st;
  int seals = ::fcntl(f.get(), F_GET_SEALS);
  if (::fstat(f.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_dev != memfd_dev_ ||
      static_cast<uint32_t>(st.st_ino) != rkey_ino(rkey) || st.st_uid != ::geteuid() ||
      st.st_size <= 0 || seals < 0 || !(seals & F_SEAL_SHRINK)) {
    LT_DEBUG("shm: rkey %#" PRIx64 " of node %u names no alloc_memory region", rkey, peer_.load());
    return Code::kBadHandle;
  }
  size_t len = static_cast<size_t>(st.st_size);
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, f.get(), 0);
  if (p == MAP_FAILED) {
    LT_WARN("shm: mapping a region of node %u (%zu bytes): %s", peer_.load(), len, strerror(errno));
    return Code::kNoMemory;
  }
  auto m = std::make_shared<RemoteMap>(static_cast<std::byte*>(p), len, rkey_access(rkey));
  std::shared_ptr<RemoteMap> evicted;  // unmapped after the lock is dropped
  std::lock_guard<SpinLock> g(map_lock_);
  for (auto& [k, old] : maps_) {
    if (k == rkey) return old;  // another thread mapped it meanwhile; ours goes
  }
  if (maps_.size() >= kMaxRemoteMaps) {
    evicted = std::move(maps_.front().second);
    evicted->retire();
    maps_.erase(maps_.begin());
  }
  maps_.emplace_back(rkey, m);
  return m;
}

// Native one-sided op, done here and now. Checks come first so a refused op
// touches nothing. kWriteImm also queues a zero-length record with the imm;
// the written bytes are in place before that record is published.
// kWrite (or kRead) of ordinary peer memory named by a placement rkey: one
// copy by the kernel between the two address spaces. The peer registered the
// range; the kernel refuses what is not mapped there (kOutOfBounds).
Status ShmConn::place(const WorkRequest& wr, size_t len) const {
  if (!t_->caps_.placement) return Code::kBadHandle;
  if (wr.op != Op::kWrite && wr.op != Op::kRead) return Code::kUnsupported;
  Access need = wr.op == Op::kWrite ? Access::kRemoteWrite : Access::kRemoteRead;
  if (!has_access(rkey_access(wr.remote.rkey), need)) return Code::kPerm;
  if (len == 0) return Status::ok();
  if (wr.remote.addr > UINTPTR_MAX - len) return Code::kOutOfBounds;
  iovec local[kMaxSge];
  int n = 0;
  for (int i = 0; i < wr.num_sge; ++i) {
    if (wr.sge[i].len == 0) continue;
    local[n++] = {const_cast<std::byte*>(wr.sge[i].addr), wr.sge[i].len};
  }
  size_t done = 0;
  while (done < len) {
    // Resume after a partial copy: skip what went already.
    iovec l[kMaxSge];
    int ln = 0;
    size_t skip = done;
    for (int i = 0; i < n; ++i) {
      if (skip >= local[i].iov_len) {
        skip -= local[i].iov_len;
        continue;
      }
      l[ln++] = {static_cast<std::byte*>(local[i].iov_base) + skip, local[i].iov_len - skip};
      skip = 0;
    }
    iovec r{reinterpret_cast<void*>(static_cast<uintptr_t>(wr.remote.addr) + done), len - done};
    ssize_t k = wr.op == Op::kWrite
                    ? ::process_vm_writev(peer_pid_, l, static_cast<unsigned long>(ln), &r, 1, 0)
                    : ::process_vm_readv(peer_pid_, l, static_cast<unsigned long>(ln), &r, 1, 0);
    if (k > 0) {
      done += static_cast<size_t>(k);
      continue;
    }
    int e = k == 0 ? EFAULT : errno;
    if (e == EINTR) continue;
    LT_DEBUG("shm: cross-memory %s of %zu bytes at node %u: %s",
             wr.op == Op::kWrite ? "write" : "read", len, peer_.load(), strerror(e));
    switch (e) {
      case EFAULT:
        return Code::kOutOfBounds;
      case ESRCH:
        return Code::kPeerDown;
      case EPERM:
        return Code::kPerm;
      case ENOMEM:
        return Code::kNoMemory;
      default:
        return Code::kSys;
    }
  }
  return Status::ok();
}

Status ShmConn::one_sided(const WorkRequest& wr, size_t len, bool* refused, bool* bell) {
  if (is_place_rkey(wr.remote.rkey)) return place(wr, len);
  const bool plain = wr.op != Op::kWriteImm;
  if (plain && len > 0 && len <= kAccessUnderLockBytes) {
    // A small access is done while map_lock_ keeps the region mapped: no
    // shared_ptr copied and dropped (two locked instructions on the path
    // of every 8-byte LT_read), and the lock is held for a few nanoseconds.
    std::lock_guard<SpinLock> g(map_lock_);
    for (auto& [k, m] : maps_) {
      if (k == wr.remote.rkey) return m->access(wr, len);
    }
  }
  std::shared_ptr<RemoteMap> m;
  if (len > 0) {
    auto r = remote_map(wr.remote.rkey);
    if (!r.is_ok()) return r.status();
    m = std::move(r.value());
  }
  if (plain) return len > 0 ? m->access(wr, len) : Status::ok();
  // kWriteImm. Room first, so that a refusal writes nothing; then the bytes,
  // then the record that announces them (its stamp publishes it at once).
  std::byte* target = nullptr;
  if (len > 0) {
    if (!has_access(rkey_access(wr.remote.rkey), Access::kRemoteWrite)) return Code::kPerm;
    if (wr.remote.addr > m->len() || len > m->len() - wr.remote.addr) return Code::kOutOfBounds;
    target = m->base() + wr.remote.addr;
  }
  lock_tx();
  const bool must_queue = (wr.flags & kWrMustQueue) != 0;
  if (!must_queue && !(backlog_.empty() && single_fits_locked(0))) {
    *bell |= unlock_tx();
    *refused = true;
    return Status::ok();
  }
  if (len > 0) gather_of(wr).copy(target, 0, len);
  if (!enqueue_locked(Gather{}, 0, wr.imm, must_queue)) *refused = true;  // no memory
  *bell |= unlock_tx();
  return Status::ok();
}

// The usual post of a native op (proto's 8 B LT_read is [guard, read]): a
// few small reads, writes or atomics on regions mapped already, done under
// one hold of map_lock_ (one locked instruction per post, not one per op).
// False, with nothing done: the post holds anything else (post() goes op by
// op then). Otherwise *out is post()'s answer.
bool ShmConn::post_small_accesses(std::span<const WorkRequest> wrs, Result<size_t>* out) {
  constexpr size_t kMax = 4;
  if (wrs.size() > kMax) return false;
  size_t lens[kMax];
  for (size_t i = 0; i < wrs.size(); ++i) {
    const WorkRequest& wr = wrs[i];
    const bool plain = wr.op == Op::kRead || wr.op == Op::kWrite || wr.op == Op::kFetchAdd ||
                       wr.op == Op::kCmpSwap;
    if (!plain || (wr.flags & kWrSignaled) != 0 || is_place_rkey(wr.remote.rkey)) return false;
    if (!check(wr, &lens[i]).is_ok() || lens[i] == 0 || lens[i] > kAccessUnderLockBytes) {
      return false;
    }
  }
  std::lock_guard<SpinLock> g(map_lock_);
  const RemoteMap* maps[kMax];
  for (size_t i = 0; i < wrs.size(); ++i) {
    maps[i] = i > 0 && wrs[i].remote.rkey == wrs[i - 1].remote.rkey ? maps[i - 1] : nullptr;
    for (size_t j = 0; maps[i] == nullptr && j < maps_.size(); ++j) {
      if (maps_[j].first == wrs[i].remote.rkey) maps[i] = maps_[j].second.get();
    }
    if (maps[i] == nullptr) return false;  // mapped at first use, outside the lock
  }
  size_t done = 0, guards = 0;
  for (; done < wrs.size(); ++done) {
    Status s = maps[done]->access(wrs[done], lens[done]);
    if (!s.is_ok()) {  // after nothing but guards, the op's failure is the post's
      *out = done > guards ? Result<size_t>(done) : Result<size_t>(s);
      return true;
    }
    if (guard_differs(wrs[done])) {
      *out = Code::kBadHandle;  // what came before it is done; nothing after
      return true;
    }
    if (is_guard(wrs[done]) && guards == done) ++guards;
  }
  *out = done;
  return true;
}

std::shared_ptr<const MappedRegion> ShmConn::view(uint64_t rkey) {
  if (dead_.load(std::memory_order_acquire) || is_place_rkey(rkey)) return nullptr;
  auto r = remote_map(rkey);
  if (!r.is_ok()) return nullptr;
  // mark_dead() may have retired the maps just before this one joined them:
  // retired too, so the caller sees the death through live().
  if (dead_.load(std::memory_order_acquire)) (*r)->retire();
  return std::move(r.value());
}

}  // namespace lt::transport::shm
