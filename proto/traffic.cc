#include "proto/traffic.h"

#include <algorithm>
#include <map>
#include <new>
#include <utility>

namespace lt::proto {

namespace {
std::atomic<uint64_t> next_serial{1};
}  // namespace

LT_TLS_FAST constinit thread_local Traffic::TlsEntry Traffic::tls_[4];
LT_TLS_FAST constinit thread_local uint32_t Traffic::tls_next_ = 0;
LT_TLS_FAST constinit thread_local Traffic::LastCell Traffic::last_;

Traffic::Traffic() : serial_(next_serial.fetch_add(1, std::memory_order_relaxed)) {}

Traffic::~Traffic() = default;

Traffic::Block::~Block() {
  for (auto& c : chunks) delete c.load(std::memory_order_relaxed);
}

__attribute__((noinline)) Traffic::Cell* Traffic::find_cell(NodeId node, uint32_t transport) {
  if (transport >= kMaxTransports || node == transport::kNoNode) return nullptr;
  Block* b = mine();
  if (b == nullptr) return nullptr;
  const uint32_t slot = transport::node_slot(node);
  Chunk* ch = b->chunks[slot / kSlotsPerChunk].load(std::memory_order_relaxed);
  if (ch == nullptr) ch = add_chunk(b, slot / kSlotsPerChunk);
  if (ch == nullptr) return nullptr;
  SlotCells& s = ch->slots[slot % kSlotsPerChunk];
  if (s.id.load(std::memory_order_relaxed) != node) reset(s, node);
  last_ = {serial_, node, transport, &s.by_transport[transport]};
  return last_.cell;
}

// A few engines per thread stay cached; ids are never reused, so a cached
// entry of an engine gone names no live one.
Traffic::Block* Traffic::mine() {
  for (auto& e : tls_) {
    if (e.serial == serial_) return e.block;
  }
  return mine_slow();
}

// The calling thread's block, made at its first count (or taken over from an
// ended thread of the same id), and cached for the next calls.
Traffic::Block* Traffic::mine_slow() {
  Block* b = nullptr;
  {
    std::lock_guard<std::mutex> g(mu_);
    std::unique_ptr<Block>& slot = blocks_[std::this_thread::get_id()];
    if (!slot) slot.reset(new (std::nothrow) Block);
    b = slot.get();
  }
  if (b == nullptr) return nullptr;
  TlsEntry& e = tls_[tls_next_++ % 4];
  e.serial = serial_;
  e.block = b;
  return b;
}

// Readers load chunk pointers with acquire: the chunk's zeroed cells are
// seen before it.
Traffic::Chunk* Traffic::add_chunk(Block* b, uint32_t i) {
  auto* ch = new (std::nothrow) Chunk;
  if (ch != nullptr) b->chunks[i].store(ch, std::memory_order_release);
  return ch;
}

// A node new in the slot: its cells start from zero. A reader that sees the
// id change under it skips the slot for that read.
void Traffic::reset(SlotCells& s, NodeId node) {
  s.id.store(0, std::memory_order_release);
  for (Cell& c : s.by_transport) {
    c.tx_ops.store(0, std::memory_order_relaxed);
    c.tx_bytes.store(0, std::memory_order_relaxed);
    c.rx_ops.store(0, std::memory_order_relaxed);
    c.rx_bytes.store(0, std::memory_order_relaxed);
  }
  s.id.store(node, std::memory_order_release);
}

std::vector<PeerTraffic> Traffic::snapshot() const {
  std::map<std::pair<NodeId, uint32_t>, PeerTraffic> sum;
  std::lock_guard<std::mutex> g(mu_);
  for (const auto& [tid, b] : blocks_) {
    for (const auto& chp : b->chunks) {
      const Chunk* ch = chp.load(std::memory_order_acquire);
      if (ch == nullptr) continue;
      for (const SlotCells& s : ch->slots) {
        const NodeId id = s.id.load(std::memory_order_acquire);
        if (id == 0) continue;
        PeerTraffic got[kMaxTransports];
        for (uint32_t t = 0; t < kMaxTransports; ++t) {
          const Cell& c = s.by_transport[t];
          got[t] = {id,
                    t,
                    c.tx_ops.load(std::memory_order_relaxed),
                    c.tx_bytes.load(std::memory_order_relaxed),
                    c.rx_ops.load(std::memory_order_relaxed),
                    c.rx_bytes.load(std::memory_order_relaxed)};
        }
        if (s.id.load(std::memory_order_acquire) != id) continue;  // reset meanwhile
        for (const PeerTraffic& p : got) {
          if (p.tx_ops == 0 && p.rx_ops == 0) continue;
          PeerTraffic& o = sum[{id, p.transport}];
          o.node = id;
          o.transport = p.transport;
          o.tx_ops += p.tx_ops;
          o.tx_bytes += p.tx_bytes;
          o.rx_ops += p.rx_ops;
          o.rx_bytes += p.rx_bytes;
        }
      }
    }
  }
  std::vector<PeerTraffic> out;
  out.reserve(sum.size());
  for (auto& [k, v] : sum) out.push_back(v);
  return out;
}

}  // namespace lt::proto
