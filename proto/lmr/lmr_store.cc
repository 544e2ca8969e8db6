#include "proto/lmr/lmr_store.h"

#include <vector>

#include "common/log.h"

namespace lt::proto {

Result<std::shared_ptr<LocalLmr>> LmrStore::create(uint64_t size, NodeId master,
                                                   transport::Transport* t,
                                                   transport::Transport* exporter) {
  if (size == 0) return Code::kInvalidArg;
  auto region = t->alloc_memory(alive_offset(size) + sizeof(uint64_t), transport::kRemoteAll);
  if (!region) {
    return region.status().code() == Code::kInvalidArg ? Code::kInvalidArg : Code::kNoMemory;
  }
  auto l = std::make_shared<LocalLmr>();
  l->region = *region;
  l->from = t;
  if (exporter != nullptr) {
    auto x = exporter->export_memory(std::span<std::byte>(region->addr, region->len),
                                     transport::kRemoteAll);
    if (x) {
      l->exported = *x;
      l->exporter = exporter;
    } else {
      LT_WARN("%s: LMR of %llu bytes not exported (%s): its peers there go by messages",
              exporter->name(), static_cast<unsigned long long>(size), x.status().name());
    }
  }
  l->mem = region->addr;
  l->size = size;
  l->secret = {random_u64(), random_u64()};
  l->master = master;
  auto key = table_.insert(l);
  if (!key) return key.status();
  l->key = *key;
  std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(l->mem + alive_offset(size)))
      .store(*key, std::memory_order_release);
  return l;
}

size_t LmrStore::erase_master(NodeId master) {
  // Destroyed here, outside the table's lock (freeing memory is a system call).
  std::vector<std::shared_ptr<LocalLmr>> orphans;
  table_.erase_if([master](const std::shared_ptr<LocalLmr>& l) { return l && l->master == master; },
                  &orphans);
  return orphans.size();
}

}  // namespace lt::proto
