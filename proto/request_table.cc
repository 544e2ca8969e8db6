#include "proto/request_table.h"

#include <algorithm>
#include <vector>

#include "common/tls.h"

namespace lt::proto {

namespace {

// Live tables, for a thread that exits with a slot parked: it gives the
// slot back only to a table that still exists. Cold: tables register at
// start and leave at destruction; threads look only as they exit or after
// a table went away. Leaked: a thread may exit after the statics are gone.
struct Registry {
  std::mutex mu;
  std::vector<RequestTable*> tables;  // under mu
};
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}
std::atomic<uint64_t> g_next_table_id{1};  // 0: no table
std::atomic<uint64_t> g_tables_gone{0};    // tables destroyed so far

RequestTable* live_table(uint64_t id) {  // under registry().mu
  for (RequestTable* t : registry().tables) {
    if (t->id() == id) return t;
  }
  return nullptr;
}

// One thread's parked slot, reached in one load (common/tls.h). The table's
// id rather than its address: a table made later at the same address is
// another table.
struct Parked {
  uint64_t table;
  Request* r;
  uint64_t gone_seen;  // g_tables_gone when the slot was parked
  bool hooked;         // the thread's exit hook is armed
};
LT_TLS_FAST constinit thread_local Parked t_parked{0, nullptr, 0, false};

}  // namespace

// Gives the parked slot back as its thread exits (armed at the first park).
struct ParkedReturn {
  ~ParkedReturn() { RequestTable::return_parked(); }
};

namespace {
thread_local ParkedReturn t_return;
}  // namespace

void RequestTable::return_parked() {
  Parked& p = t_parked;
  if (p.r == nullptr) return;
  std::lock_guard<std::mutex> g(registry().mu);
  if (RequestTable* t = live_table(p.table)) t->push(p.r);
  p.r = nullptr;
}

Request* RequestTable::unpark() {
  Parked& p = t_parked;
  if (p.table != id_ || p.r == nullptr) return nullptr;
  Request* r = p.r;
  p.r = nullptr;
  return r;
}

bool RequestTable::park(Request* r) {
  Parked& p = t_parked;
  if (p.r != nullptr && p.table != id_ &&
      g_tables_gone.load(std::memory_order_relaxed) != p.gone_seen) {
    // A slot of a table that went away is forgotten (its memory is gone).
    std::lock_guard<std::mutex> g(registry().mu);
    p.gone_seen = g_tables_gone.load(std::memory_order_relaxed);
    if (live_table(p.table) == nullptr) p.r = nullptr;
  }
  if (p.r != nullptr) {
    if (p.table != id_) return false;
    push(p.r);  // the newer one stays: its lines are the warmer
  }
  if (!p.hooked) {
    p.hooked = true;
    (void)&t_return;  // constructs it, arming its destructor
  }
  p.table = id_;
  p.r = r;
  p.gone_seen = g_tables_gone.load(std::memory_order_relaxed);
  return true;
}

RequestTable::RequestTable(uint32_t max_requests) : id_(g_next_table_id.fetch_add(1)) {
  // At most 2^30 slots: an id's index never has bit 31 set, which callers
  // may use to tell ids from other values.
  uint32_t n = std::clamp<uint32_t>(max_requests, kChunk, 1u << 30);
  max_ = (n + kChunk - 1) / kChunk * kChunk;
  chunks_.reset(new std::unique_ptr<Request[]>[max_ / kChunk]);
  std::lock_guard<std::mutex> g(registry().mu);
  registry().tables.push_back(this);
}

RequestTable::~RequestTable() {
  std::lock_guard<std::mutex> g(registry().mu);
  std::erase(registry().tables, this);
  g_tables_gone.fetch_add(1, std::memory_order_relaxed);
}

Status RequestTable::grow() {
  std::lock_guard<std::mutex> g(grow_mu_);
  if (static_cast<uint32_t>(free_head_.load(std::memory_order_acquire)) != 0) {
    return Status::ok();  // another thread grew (or freed) meanwhile
  }
  uint32_t base = num_.load(std::memory_order_relaxed);
  if (base >= max_) return Code::kNoResource;
  chunks_[base / kChunk].reset(new Request[kChunk]);
  for (uint32_t i = 0; i < kChunk; ++i) {
    Request* r = at(base + i);
    r->idx = base + i;
    r->word.store(req_word(1, kStFree), std::memory_order_relaxed);
  }
  num_.store(base + kChunk, std::memory_order_release);
  // Link the chunk and push it whole onto the free stack.
  for (uint32_t i = 0; i + 1 < kChunk; ++i) {
    at(base + i)->free_next.store(base + i + 2, std::memory_order_relaxed);
  }
  uint64_t head = free_head_.load(std::memory_order_acquire);
  for (;;) {
    at(base + kChunk - 1)->free_next.store(static_cast<uint32_t>(head), std::memory_order_relaxed);
    uint64_t next = ((head >> 32) + 1) << 32 | (base + 1);
    if (free_head_.compare_exchange_weak(head, next, std::memory_order_acq_rel)) break;
  }
  return Status::ok();
}

}  // namespace lt::proto
