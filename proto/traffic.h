// Traffic per peer and transport: work requests this node posted to each
// peer and their bytes, and messages it took in from each peer.
//
// Every thread counts in a block of its own, so a count is two plain stores
// to a line no other thread writes: no locked instruction and no shared
// cache line per operation (a shared counter cost both on every send). A
// reader (LT_peer_stats, a metrics scrape) sums the blocks. Blocks live as
// long as the engine; a thread that ends leaves its counts in its block,
// and a thread of the same id later takes the block over.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/tls.h"
#include "transport/transport.h"

namespace lt::proto {

using transport::NodeId;

/// One peer's traffic over one transport (by its index in the engine's list).
struct PeerTraffic {
  NodeId node = 0;
  uint32_t transport = 0;
  uint64_t tx_ops = 0, tx_bytes = 0;  // work requests posted to the peer, bytes they carry
  uint64_t rx_ops = 0, rx_bytes = 0;  // messages from the peer taken in, their bytes
};

class Traffic {
 public:
  static constexpr uint32_t kMaxTransports = 4;

  Traffic();
  Traffic(const Traffic&) = delete;
  Traffic& operator=(const Traffic&) = delete;
  ~Traffic();

  /// `ops` work requests carrying `bytes` (headers included) posted to `node`.
  void tx(NodeId node, uint32_t transport, uint64_t ops, uint64_t bytes) {
    if (Cell* c = cell(node, transport)) {
      bump(c->tx_ops, ops);
      bump(c->tx_bytes, bytes);
    }
  }
  /// One message of `bytes` taken in from `node`.
  void rx(NodeId node, uint32_t transport, uint64_t bytes) {
    if (Cell* c = cell(node, transport)) {
      bump(c->rx_ops, 1);
      bump(c->rx_bytes, bytes);
    }
  }

  /// Every (node, transport) with traffic, summed over the threads' blocks,
  /// sorted by node then transport.
  std::vector<PeerTraffic> snapshot() const;

 private:
  struct Cell {
    std::atomic<uint64_t> tx_ops{0}, tx_bytes{0}, rx_ops{0}, rx_bytes{0};
  };
  // One node slot's cells in one thread's block. `id` is the node they count
  // for: 0 while the owner resets them for a node newly in the slot.
  struct SlotCells {
    std::atomic<NodeId> id{0};
    Cell by_transport[kMaxTransports];
  };
  static constexpr uint32_t kSlotsPerChunk = 64;
  static constexpr uint32_t kChunks = transport::kNodeSlots / kSlotsPerChunk;
  struct Chunk {
    SlotCells slots[kSlotsPerChunk];
  };
  // A thread's block: chunks made at its first count for a node in them, so
  // a thread that talks to few peers holds little.
  struct Block {
    std::atomic<Chunk*> chunks[kChunks] = {};
    ~Block();
  };

  // The owner is the only writer: a load and a store, not a locked add.
  static void bump(std::atomic<uint64_t>& v, uint64_t by) {
    v.store(v.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
  }
  // The hit is a leaf: the lookup stays out of line, so a count pays no
  // saved registers for it.
  Cell* cell(NodeId node, uint32_t transport) {
    const LastCell& l = last_;
    if (l.serial == serial_ && l.node == node && l.transport == transport) [[likely]] {
      return l.cell;
    }
    return find_cell(node, transport);
  }
  // The full lookup: the thread's block, its chunk, the slot (three
  // dependent loads), reset for a node new in the slot; remembered in last_.
  Cell* find_cell(NodeId node, uint32_t transport);
  Block* mine();
  Block* mine_slow();
  static Chunk* add_chunk(Block* b, uint32_t i);
  static void reset(SlotCells& s, NodeId node);

  struct TlsEntry {
    uint64_t serial = 0;
    Block* block = nullptr;
  };
  // constinit: no dynamic initialization, so a use needs no TLS wrapper call.
  LT_TLS_FAST static constinit thread_local TlsEntry tls_[4];
  LT_TLS_FAST static constinit thread_local uint32_t tls_next_;
  // The cell this thread counted in last, in whichever engine: a thread
  // mostly talks to one peer over one transport at a time. It stays right
  // while the key matches: only this thread resets a slot of its block (in
  // find_cell, which then takes last_ over), a block outlives its thread's
  // use of it, and engine serials are never reused.
  struct LastCell {
    uint64_t serial = 0;
    NodeId node = 0;
    uint32_t transport = 0;
    Cell* cell = nullptr;
  };
  LT_TLS_FAST static constinit thread_local LastCell last_;

  const uint64_t serial_;
  mutable std::mutex mu_;  // blocks_: a thread's first count, and readers
  std::unordered_map<std::thread::id, std::unique_ptr<Block>> blocks_;
};

}  // namespace lt::proto
