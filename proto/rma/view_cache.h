// ViewCache: per thread, the peer regions mapped here (transport's
// MappedRegion, Caps::views) that this thread's native ops used last, so an
// op on a same-host peer's LMR is a check of its liveness word and a copy or
// an atomic instruction, with no post (rma/native.cc).
//
// An entry is found by (engine, owner node, rkey) and used only while its
// view is live(): the transport retires a view when it lets go of the
// region (evicted from its connection's cache, the connection closed or
// broken, the transport gone), and the entry is replaced at its next use.
// An entry keeps its region mapped until it is replaced or its thread exits:
// at most kEntries regions per thread.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

#include "transport/mapped_region.h"

namespace lt::proto {

class ViewCache {
 public:
  static constexpr int kEntries = 4;

  /// The live view cached for the key, else null. Valid until this
  /// thread's next put().
  const transport::MappedRegion* find(const void* engine, transport::NodeId owner,
                                      uint64_t rkey) const {
    for (const Entry& e : entries_) {
      if (e.rkey == rkey && e.owner == owner && e.engine == engine) {
        return e.view->live() ? e.view.get() : nullptr;
      }
    }
    return nullptr;
  }

  /// Caches `view` for the key, in place of the key's retired view or else
  /// of the entry filled longest ago; returns it.
  const transport::MappedRegion* put(const void* engine, transport::NodeId owner, uint64_t rkey,
                                     std::shared_ptr<const transport::MappedRegion> view) {
    Entry* slot = nullptr;
    for (Entry& e : entries_) {
      if (e.rkey == rkey && e.owner == owner && e.engine == engine) slot = &e;
    }
    if (slot == nullptr) {
      slot = &entries_[next_];
      next_ = (next_ + 1) % kEntries;
    }
    *slot = Entry{engine, owner, rkey, std::move(view)};
    return slot->view.get();
  }

 private:
  struct Entry {
    const void* engine = nullptr;
    transport::NodeId owner = 0;
    uint64_t rkey = 0;  // 0 never names a region: an empty entry matches no key
    std::shared_ptr<const transport::MappedRegion> view;
  };
  Entry entries_[kEntries];
  unsigned next_ = 0;
};

}  // namespace lt::proto
