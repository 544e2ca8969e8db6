#include "proto/lmr/handles.h"

#include <algorithm>

#include "common/tls.h"

namespace lt::proto {

namespace {

// The calling thread's last handle lookup: the table (its address and its
// erasures() then), the handle, and a reference that keeps the mapping alive
// until the thread looks up another handle. `lent` while a MappingRef
// borrows it.
struct HandleCache {
  const HandleTable* table = nullptr;
  uint64_t erasures = 0;
  LmrHandle h = 0;
  std::shared_ptr<const Mapping> m;
  bool lent = false;
};

HandleCache& handle_cache() {
  LT_TLS_FAST static thread_local HandleCache c;
  return c;
}

}  // namespace

Status HandleTable::check(LmrHandle h, uint32_t need, uint64_t off, uint64_t len,
                          MappingRef* m) const {
  HandleCache& c = handle_cache();
  // Read before the lookup: an erase after this read makes the next check
  // miss, never the other way round.
  const uint64_t erasures = table_.erasures();
  const Mapping* p = nullptr;
  std::shared_ptr<const Mapping> own;
  if (!c.lent && c.m != nullptr && c.h == h && c.table == this && c.erasures == erasures) {
    p = c.m.get();
  } else {
    std::shared_ptr<Mapping> got;
    LT_RETURN_IF_ERROR(table_.get(h, &got));
    p = got.get();
    if (c.lent) {  // an outer operation of this thread holds the cache
      own = std::move(got);
    } else {
      c.table = this;
      c.erasures = erasures;
      c.h = h;
      c.m = std::move(got);
    }
  }
  // Revoked by its master as it freed the LMR: no message, no RDMA op.
  if (p->revoked.v.load(std::memory_order_acquire)) return Code::kBadHandle;
  if ((p->rights & need) != need) return Code::kPerm;
  if (off > p->size || len > p->size - off) return Code::kOutOfBounds;
  m->p_ = p;
  if (own != nullptr) {
    m->own_ = std::move(own);
  } else {
    c.lent = true;
    m->lent_ = &c.lent;
  }
  return Status::ok();
}

Status HandleTable::add_name(const std::string& name, LmrHandle h, uint32_t max_rights) {
  std::lock_guard<std::mutex> g(names_mu_);
  if (names_.count(name)) return Code::kExists;
  names_[name] = {h, max_rights};
  return Status::ok();
}

void HandleTable::remove_name(const std::string& name) {
  std::lock_guard<std::mutex> g(names_mu_);
  names_.erase(name);
}

std::vector<std::string> HandleTable::remove_names_of(LmrHandle h, std::vector<NodeId>* mappers) {
  std::vector<std::string> out;
  std::lock_guard<std::mutex> g(names_mu_);
  for (auto it = names_.begin(); it != names_.end();) {
    if (it->second.first == h) {
      out.push_back(it->first);
      it = names_.erase(it);
    } else {
      ++it;
    }
  }
  auto m = mappers_.find(h);
  if (m != mappers_.end()) {
    *mappers = std::move(m->second);
    mappers_.erase(m);
  }
  return out;
}

Status HandleTable::lookup_name(const std::string& name, uint32_t rights, NodeId mapper,
                                std::shared_ptr<Mapping>* master) {
  std::lock_guard<std::mutex> g(names_mu_);
  auto it = names_.find(name);
  if (it == names_.end()) return Code::kNotFound;
  if (rights == 0 || (rights & it->second.second) != rights) return Code::kPerm;
  LT_RETURN_IF_ERROR(table_.get(it->second.first, master));
  std::vector<NodeId>& who = mappers_[it->second.first];
  if (std::find(who.begin(), who.end(), mapper) == who.end()) who.push_back(mapper);
  return Status::ok();
}

size_t HandleTable::revoke(NodeId minted_by, NodeId owner, uint64_t key) const {
  size_t n = 0;
  table_.for_each([&](const std::shared_ptr<Mapping>& m) {
    if (m->minted_by != minted_by || m->owner != owner || m->key != key) return;
    m->revoked.v.store(true, std::memory_order_release);
    ++n;
  });
  return n;
}

}  // namespace lt::proto
