#include "transport/factory.h"

#include "transport/share.h"

namespace lt::transport {

TransportShare::TransportShare() : held_(std::make_unique<Held>()) {}
TransportShare::~TransportShare() = default;

namespace {
Result<std::unique_ptr<Transport>> make_shm(const Config& c, TransportShare&) {
  return make_shm_transport(c.shm);
}
Result<std::unique_ptr<Transport>> make_tcp(const Config& c, TransportShare&) {
  return make_tcp_transport(c.tcp);
}
Result<std::unique_ptr<Transport>> make_rc(const Config& c, TransportShare& s) {
  return make_rc_transport(c, &s);
}
Result<std::unique_ptr<Transport>> make_ud(const Config& c, TransportShare& s) {
  return make_ud_transport(c, &s);
}

// shm first: on the same host it beats every network path. rc next, where
// both ends have an RDMA device; ud where rc cannot serve a peer (its QP
// budget is spent, or its connection cannot be made). tcp works everywhere
// and is the fallback of last resort.
constexpr TransportEntry kEntries[] = {
    {"shm", &make_shm, true, 10, true},
    {"rc", &make_rc, false, 50, true},
    {"ud", &make_ud, false, 70, false},
    {"tcp", &make_tcp, false, 100, false},
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
