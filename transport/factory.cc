#include "transport/factory.h"

namespace lt::transport {

namespace {
Result<std::unique_ptr<Transport>> make_shm(const Config& c) { return make_shm_transport(c.shm); }
Result<std::unique_ptr<Transport>> make_tcp(const Config& c) { return make_tcp_transport(c.tcp); }

// shm first: on the same host it beats every network path. tcp works
// everywhere and is the fallback of last resort.
constexpr TransportEntry kEntries[] = {
    {"shm", &make_shm, true, 10},
    {"tcp", &make_tcp, false, 100},
};
}  // namespace

std::span<const TransportEntry> transport_entries() { return kEntries; }

const TransportEntry* find_transport(std::string_view name) {
  for (const TransportEntry& e : kEntries) {
    if (name == e.name) return &e;
  }
  return nullptr;
}

}  // namespace lt::transport
