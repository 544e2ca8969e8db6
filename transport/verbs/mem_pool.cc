#include "transport/verbs/mem_pool.h"

#include <infiniband/verbs.h>
#include <sys/mman.h>
#ifdef LTIER_HAVE_NUMA
#include <numa.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "common/time.h"
#include "transport/verbs/verbs_device.h"

namespace lt::transport::verbs {

namespace {
constexpr uint64_t kDedicated = uint64_t{1} << 63;
constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                        IBV_ACCESS_REMOTE_ATOMIC;

uint64_t slice_bytes(uint64_t rkey64, uint64_t* first_byte) {
  if (rkey64 & kDedicated) {
    *first_byte = 0;
    return ((rkey64 >> 32) & 0x7fffffff) * kPage;
  }
  *first_byte = ((rkey64 >> 32) & 0xffff) * kPage;
  return ((rkey64 >> 48) & 0x7fff) * kPage;
}
}  // namespace

bool decode_rkey(uint64_t rkey64, uint64_t off, uint64_t len, uint32_t* rkey, uint64_t* raddr) {
  uint64_t first = 0;
  const uint64_t size = slice_bytes(rkey64, &first);
  if (off > size || len > size - off) return false;
  *rkey = static_cast<uint32_t>(rkey64);
  *raddr = first + off;
  return true;
}

MemPools::MemPools(VerbsDevice& dev, size_t pool_bytes, int numa_node, bool zero_based,
                   size_t first_pool_bytes)
    : dev_(dev),
      pool_bytes_(std::min<uint64_t>((pool_bytes + kPage - 1) / kPage * kPage, kMaxPoolBytes)),
      numa_node_(numa_node),
      zero_based_(zero_based) {
  if (pool_bytes_ == 0) pool_bytes_ = kPage;
  next_pool_bytes_ =
      std::clamp<size_t>((first_pool_bytes + kPage - 1) / kPage * kPage, kPage, pool_bytes_);
}

MemPools::~MemPools() {
  for (auto& p : pools_) release_pool(p.get());
}

Result<MemPools::Pool*> MemPools::add_pool(size_t len, bool dedicated) {
  size_t k = nspans_.load(std::memory_order_relaxed);
  if (k == kMaxSpans) {
    LT_ERROR("rc: %zu registrations made; no more LMR pools (raise verbs.pool_bytes)", k);
    return Code::kNoMemory;
  }
  void* mem = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return Code::kNoMemory;
#ifdef LTIER_HAVE_NUMA
  if (numa_node_ >= 0 && numa_available() >= 0) numa_tonode_memory(mem, len, numa_node_);
#endif
  ibv_mr* mr = zero_based_ ? ibv_reg_mr_iova(dev_.pd(), mem, len, 0, kAccess)
                           : ibv_reg_mr(dev_.pd(), mem, len, IBV_ACCESS_LOCAL_WRITE);
  if (mr == nullptr) {
    LT_ERROR("rc: registering %zu bytes of LMR memory on %s: %s (locked-memory limit? ulimit -l)",
             len, dev_.choice().device.c_str(), std::strerror(errno));
    ::munmap(mem, len);
    return Code::kNoMemory;
  }
  auto p = std::make_unique<Pool>();
  p->base = static_cast<std::byte*>(mem);
  p->len = len;
  p->mr = mr;
  p->dedicated = dedicated;
  if (!dedicated) p->free_pages[0] = len / kPage;
  p->span = k;
  Span& s = spans_[k];
  s.base.store(reinterpret_cast<uintptr_t>(mem), std::memory_order_relaxed);
  s.lkey.store(mr->lkey, std::memory_order_relaxed);
  s.len.store(len, std::memory_order_release);
  nspans_.store(k + 1, std::memory_order_release);
  pools_.push_back(std::move(p));
  return pools_.back().get();
}

void MemPools::release_pool(Pool* p) {
  if (!p->adopted) spans_[p->span].len.store(0, std::memory_order_release);
  if (p->mr != nullptr) ibv_dereg_mr(p->mr);
  if (!p->adopted) ::munmap(p->base, p->len);
  p->mr = nullptr;
}

Result<MemRegion> MemPools::adopt(std::span<std::byte> mem) {
  const uint64_t pages = mem.size() / kPage;
  if (reinterpret_cast<uintptr_t>(mem.data()) % kPage != 0 || mem.size() % kPage != 0 ||
      pages == 0 || pages > 0x7fffffffull || !zero_based_) {
    return Code::kInvalidArg;
  }
  ibv_mr* mr = ibv_reg_mr_iova(dev_.pd(), mem.data(), mem.size(), 0, kAccess);
  if (mr == nullptr) {
    LT_ERROR("rc: registering %zu bytes of LMR memory on %s: %s (locked-memory limit? ulimit -l)",
             mem.size(), dev_.choice().device.c_str(), std::strerror(errno));
    return Code::kNoMemory;
  }
  auto p = std::make_unique<Pool>();
  p->base = mem.data();
  p->len = mem.size();
  p->mr = mr;
  p->dedicated = true;
  p->adopted = true;
  const uint64_t rkey = kDedicated | (pages << 32) | mr->rkey;
  p->live[0] = rkey;
  std::lock_guard<std::mutex> g(mu_);
  reap(now_ns());
  pools_.push_back(std::move(p));
  return MemRegion{mem.data(), mem.size(), mr->lkey, rkey};
}

// First fit over the pool's free runs.
bool MemPools::take(Pool* p, uint64_t pages, uint64_t* first) {
  for (auto it = p->free_pages.begin(); it != p->free_pages.end(); ++it) {
    if (it->second < pages) continue;
    *first = it->first;
    uint64_t rest = it->second - pages;
    uint64_t at = it->first + pages;
    p->free_pages.erase(it);
    if (rest != 0) p->free_pages[at] = rest;
    return true;
  }
  return false;
}

void MemPools::give_back(Pool* p, uint64_t first, uint64_t pages) {
  std::memset(p->base + first * kPage, 0, pages * kPage);
  auto next = p->free_pages.lower_bound(first);
  if (next != p->free_pages.end() && first + pages == next->first) {
    pages += next->second;
    next = p->free_pages.erase(next);
  }
  if (next != p->free_pages.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == first) {
      prev->second += pages;
      return;
    }
  }
  p->free_pages[first] = pages;
}

Result<MemRegion> MemPools::alloc(size_t len) {
  if (len == 0) return Code::kInvalidArg;
  const uint64_t pages = (len + kPage - 1) / kPage;
  std::lock_guard<std::mutex> g(mu_);
  if (pages * kPage > pool_bytes_) {
    if (pages > 0x7fffffffull) return Code::kNoMemory;
    auto p = add_pool(pages * kPage, true);
    if (!p) return p.status();
    const uint64_t rkey = kDedicated | (pages << 32) | (*p)->mr->rkey;
    (*p)->live[0] = rkey;
    return MemRegion{(*p)->base, (*p)->len, (*p)->mr->lkey, rkey};
  }
  reap(now_ns());
  Pool* pool = nullptr;
  uint64_t first = 0;
  for (auto& p : pools_) {
    if (!p->dedicated && p->mr != nullptr && take(p.get(), pages, &first)) {
      pool = p.get();
      break;
    }
  }
  if (pool == nullptr) {
    const size_t size = std::max<size_t>(next_pool_bytes_, pages * kPage);  // <= pool_bytes_
    auto p = add_pool(size, false);
    if (!p) return p.status();
    next_pool_bytes_ = std::min(pool_bytes_, size * 2);
    pool = *p;
    if (!take(pool, pages, &first)) return Code::kNoMemory;
  }
  const uint64_t rkey = (pages << 48) | (first << 32) | pool->mr->rkey;
  pool->live[first] = rkey;
  return MemRegion{pool->base + first * kPage, pages * kPage, pool->mr->lkey, rkey};
}

Status MemPools::reserve(size_t len, uint32_t count) {
  if (len == 0 || count == 0) return Status::ok();
  const uint64_t pages = (len + kPage - 1) / kPage;
  if (pages * kPage > pool_bytes_) return Status::ok();
  std::lock_guard<std::mutex> g(mu_);
  reap(now_ns());
  uint64_t fit = 0;
  for (auto& p : pools_) {
    if (p->dedicated || p->mr == nullptr) continue;
    for (const auto& [first, n] : p->free_pages) fit += n / pages;
  }
  if (fit >= count) return Status::ok();
  const size_t need = (count - fit) * pages * kPage;
  const size_t size = std::min(pool_bytes_, std::max(next_pool_bytes_, need));
  auto p = add_pool(size, false);
  if (!p) return p.status();
  next_pool_bytes_ = std::min(pool_bytes_, size * 2);
  return Status::ok();
}

void MemPools::reap(uint64_t now) {
  while (!quarantine_.empty() && now - quarantine_.front().since_ns > kQuarantineNs) {
    const Quarantined& q = quarantine_.front();
    give_back(q.pool, q.first, q.pages);
    quarantine_.pop_front();
  }
  for (auto it = pools_.begin(); it != pools_.end();) {
    Pool* p = it->get();
    if (p->retired_ns != 0 && now - p->retired_ns > kQuarantineNs) {
      release_pool(p);
      it = pools_.erase(it);
    } else {
      ++it;
    }
  }
}

void MemPools::free(const MemRegion& r) {
  std::lock_guard<std::mutex> g(mu_);
  for (auto it = pools_.begin(); it != pools_.end(); ++it) {
    Pool* p = it->get();
    if (r.addr < p->base || r.addr >= p->base + p->len || p->mr == nullptr) continue;
    if (p->retired_ns != 0) continue;  // an earlier registration of the same addresses
    if (p->dedicated) {
      p->live.clear();
      p->retired_ns = now_ns();
      reap(p->retired_ns);
      return;
    }
    const uint64_t first = static_cast<uint64_t>(r.addr - p->base) / kPage;
    p->live.erase(first);
    quarantine_.push_back({p, first, r.len / kPage, now_ns()});
    return;
  }
  LT_ASSERT(false);
}

uint32_t MemPools::lkey_of(const void* ptr, size_t len, uint64_t* addr) const {
  const auto a = reinterpret_cast<uintptr_t>(ptr);
  const size_t n = nspans_.load(std::memory_order_acquire);
  for (size_t i = 0; i < n; ++i) {
    const Span& s = spans_[i];
    const size_t slen = s.len.load(std::memory_order_acquire);
    const uintptr_t base = s.base.load(std::memory_order_relaxed);
    if (a >= base && a - base <= slen && len <= slen - (a - base)) {
      *addr = zero_based_ ? a - base : a;
      return s.lkey.load(std::memory_order_relaxed);
    }
  }
  return 0;
}

bool MemPools::slice_of(const void* ptr, size_t len, MemRegion* out) const {
  const auto* b = static_cast<const std::byte*>(ptr);
  std::lock_guard<std::mutex> g(mu_);
  for (auto& p : pools_) {
    if (b < p->base || b >= p->base + p->len || p->mr == nullptr || p->retired_ns != 0) continue;
    const uint64_t page = static_cast<uint64_t>(b - p->base) / kPage;
    auto it = p->live.upper_bound(page);
    if (it == p->live.begin()) return false;
    --it;
    const uint64_t rkey = it->second;
    uint64_t first_byte = 0;
    uint64_t size = 0;
    if (rkey & kDedicated) {
      size = ((rkey >> 32) & 0x7fffffff) * kPage;
    } else {
      first_byte = ((rkey >> 32) & 0xffff) * kPage;
      size = ((rkey >> 48) & 0x7fff) * kPage;
    }
    const uint64_t off = static_cast<uint64_t>(b - p->base);
    if (off < first_byte || off - first_byte > size || len > size - (off - first_byte)) {
      return false;
    }
    *out = MemRegion{p->base + first_byte, size, p->mr->lkey, rkey};
    return true;
  }
  return false;
}

size_t MemPools::registrations() const {
  std::lock_guard<std::mutex> g(mu_);
  size_t n = 0;
  for (auto& p : pools_) n += p->mr != nullptr;
  return n;
}

}  // namespace lt::transport::verbs
