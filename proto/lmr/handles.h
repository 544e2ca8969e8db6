// The LMR handles this process holds, and the names it published (LITE's
// master role: a master publishes an LMR by name, the cluster's mappers ask
// it for a handle). A handle is opaque and unforgeable (SlotTable): a stale,
// forged or garbage one is kBadHandle and touches nothing.
//
// Per-process state: a node daemon hosting many processes keeps one table
// per process. Thread-safe: the slot table has its own lock; names_mu_
// guards the names, and is never held across a call to the manager.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "proto/lmr/lmr.h"
#include "proto/slot_table.h"

namespace lt::proto {

using LmrHandle = uint64_t;

/// A checked mapping, valid while the MappingRef lives. It borrows the
/// calling thread's cached lookup (HandleTable::check), or owns a reference
/// when the cache is already lent to an outer operation of the thread (an
/// RPC handler run inside a wait) or holds another handle.
class MappingRef {
 public:
  MappingRef() = default;
  MappingRef(const MappingRef&) = delete;
  MappingRef& operator=(const MappingRef&) = delete;
  ~MappingRef() {
    if (lent_ != nullptr) *lent_ = false;
  }
  const Mapping& operator*() const { return *p_; }
  const Mapping* operator->() const { return p_; }

 private:
  friend class HandleTable;
  const Mapping* p_ = nullptr;
  std::shared_ptr<const Mapping> own_;
  bool* lent_ = nullptr;  // the thread cache's flag, cleared when this goes
};

class HandleTable {
 public:
  explicit HandleTable(uint32_t capacity) : table_(capacity) {}

  Result<LmrHandle> insert(std::shared_ptr<Mapping> m) { return table_.insert(std::move(m)); }
  Status get(LmrHandle h, std::shared_ptr<Mapping>* out) const { return table_.get(h, out); }
  Status erase(LmrHandle h) { return table_.erase(h, nullptr); }

  /// The handle's mapping once `need` rights and [off, off + len) check
  /// out: kBadHandle (also for a handle its master revoked), kPerm,
  /// kOutOfBounds. `m` must be empty. A handle looked up again by the same
  /// thread, with no handle erased from the table since, comes from the
  /// thread's cache: no lock and no reference count, so an 8-byte LT_read
  /// pays no locked instruction for its handle.
  Status check(LmrHandle h, uint32_t need, uint64_t off, uint64_t len, MappingRef* m) const;

  /// Remembers `name` -> (h, max_rights); kExists if the name is taken here.
  Status add_name(const std::string& name, LmrHandle h, uint32_t max_rights);
  void remove_name(const std::string& name);
  /// Forgets every name of `h` and returns them (to unregister), and moves
  /// the nodes that mapped `h` by name into `mappers` (to revoke).
  std::vector<std::string> remove_names_of(LmrHandle h, std::vector<NodeId>* mappers);
  /// The master mapping published as `name` when `rights` is within what it
  /// grants: kNotFound, kPerm (rights 0 or more than granted), kBadHandle.
  /// On success `mapper` is remembered as a node holding a handle minted
  /// from it, until remove_names_of(): both under one lock, so a node either
  /// is revoked when the master frees the LMR or was refused the name.
  Status lookup_name(const std::string& name, uint32_t rights, NodeId mapper,
                     std::shared_ptr<Mapping>* master);

  /// Marks every handle that `minted_by` minted for LMR (owner, key) as
  /// revoked (Mapping::revoked); returns how many. A scan of the table: it
  /// runs when a master frees an LMR this node mapped, not per operation.
  size_t revoke(NodeId minted_by, NodeId owner, uint64_t key) const;

 private:
  SlotTable<std::shared_ptr<Mapping>> table_;
  mutable std::mutex names_mu_;
  std::map<std::string, std::pair<LmrHandle, uint32_t>> names_;  // name -> handle, rights
  std::map<LmrHandle, std::vector<NodeId>> mappers_;  // published handle -> who mapped it
};

}  // namespace lt::proto
