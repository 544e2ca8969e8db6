// The engine's request slots. A slot is claimed for an operation and put
// back when its waiter collects the status; ids carry the slot's generation
// so a stale id (or a late reply to a cancelled request) finds nothing.
//
// Slots come in chunks made on first need: a fresh engine touches (and
// page-faults) only what it uses. Chunks are never freed before the table,
// so a Request* stays valid; lookups check idx < size(). The free list is a
// lock-free stack with an ABA tag; growing takes grow_mu_ (cold path).
//
// Each thread also parks the last slot it freed, for its next claim: a
// thread that waits for a request and starts the next one (a streaming
// receiver, a caller making RPCs one after the other) then takes and frees
// slots with no locked instruction, where the stack costs one each way. A
// thread parks one slot of one table at a time; a parked slot goes back to
// its table's stack when the thread exits (if the table is still there).
// Another thread cannot see it: at most one slot per thread may look taken
// when the table runs out.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>

#include "proto/request.h"

namespace lt::proto {

class RequestTable {
 public:
  static constexpr uint32_t kChunk = 64;

  /// Room for `max_requests` (rounded up to whole chunks, at least one).
  explicit RequestTable(uint32_t max_requests);
  RequestTable(const RequestTable&) = delete;
  RequestTable& operator=(const RequestTable&) = delete;

  /// A free slot, now PENDING for `kind` towards `peer` (0: none), and its
  /// id. kNoResource when every slot is in use.
  Result<Request*> claim(ReqKind kind, NodeId peer, ReqId* id) {
    Request* r = unpark();
    if (r == nullptr) {
      auto p = pop();
      if (!p) return p;
      r = *p;
    }
    uint32_t gen = word_gen(r->word.load());
    r->kind = kind;
    r->status = Code::kOk;
    r->out = nullptr;
    r->out_len = 0;
    r->spin_extra_us.store(0, std::memory_order_relaxed);
    // Published by the word's release store below, as the fields above are:
    // a seq_cst store here cost a locked exchange per request.
    r->peer.store(peer, std::memory_order_relaxed);
    r->word.store(req_word(gen, kStPending), std::memory_order_release);
    *id = make_req_id(gen, r->idx);
    return r;
  }

  /// Frees a slot (its waiter is done with it): the next generation, back
  /// on the free stack. The caller has dropped what the request held.
  void put_back(Request* r) {
    uint32_t gen = word_gen(r->word.load()) + 1;
    if (gen == 0) gen = 1;  // generation 0 is never handed out
    r->word.store(req_word(gen, kStFree), std::memory_order_release);
    if (!park(r)) push(r);
  }

  /// The live request `id` names (not free, not cancelled, same
  /// generation), or null.
  Request* lookup(ReqId id) const {
    Request* r = slot(id);
    if (r == nullptr) return nullptr;
    uint64_t w = r->word.load(std::memory_order_acquire);
    if (word_gen(w) != req_gen(id) || word_state(w) == kStFree || word_state(w) == kStCancelled) {
      return nullptr;
    }
    return r;
  }

  /// The slot `id` points at, whatever its state (a completer then claims
  /// it with the id's generation); null for an index never handed out.
  Request* slot(ReqId id) const {
    uint32_t idx = req_index(id);
    return idx < size() ? at(idx) : nullptr;
  }

  ~RequestTable();

  /// The most slots the table will make (max_requests rounded up).
  uint32_t capacity() const { return max_; }
  /// Unique over the process's life (tables are numbered as they are made).
  uint64_t id() const { return id_; }
  /// Slots made so far; every index below is valid.
  uint32_t size() const { return num_.load(std::memory_order_acquire); }
  Request* at(uint32_t idx) const { return &chunks_[idx / kChunk][idx % kChunk]; }

 private:
  friend struct ParkedReturn;
  // The calling thread's parked slot back to its table, if that still
  // exists (the thread is exiting).
  static void return_parked();

  // The free stack.
  Result<Request*> pop() {
    uint64_t head = free_head_.load(std::memory_order_acquire);
    for (;;) {
      uint32_t top = static_cast<uint32_t>(head);
      if (top == 0) {
        LT_RETURN_IF_ERROR(grow());
        head = free_head_.load(std::memory_order_acquire);
        continue;
      }
      uint64_t next =
          ((head >> 32) + 1) << 32 | at(top - 1)->free_next.load(std::memory_order_relaxed);
      if (free_head_.compare_exchange_weak(head, next, std::memory_order_acq_rel)) {
        return at(top - 1);
      }
    }
  }
  void push(Request* r) {
    uint64_t head = free_head_.load(std::memory_order_acquire);
    for (;;) {
      r->free_next.store(static_cast<uint32_t>(head), std::memory_order_relaxed);
      uint64_t next = ((head >> 32) + 1) << 32 | (r->idx + 1);
      if (free_head_.compare_exchange_weak(head, next, std::memory_order_acq_rel)) break;
    }
  }
  // The calling thread's parked slot (request_table.cc).
  Request* unpark();      // this table's, taken; else null
  bool park(Request* r);  // false: the thread holds another table's slot
  Status grow();

  const uint64_t id_;  // never reused, so a parked slot names its table safely

  std::unique_ptr<std::unique_ptr<Request[]>[]> chunks_;
  uint32_t max_ = 0;
  std::atomic<uint32_t> num_{0};
  std::mutex grow_mu_;
  std::atomic<uint64_t> free_head_{0};  // [aba tag:32][index+1:32]
};

}  // namespace lt::proto
