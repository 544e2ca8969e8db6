// LT_stats: the engine's counters and what each transport holds, for tools
// (ltier-node's stats command) and tests that check resource use;
// LT_peer_stats: traffic per peer and transport.
#include <cstdio>
#include <cstring>
#include <string>

#include "api/internal.h"
#include "ltier/lt.h"

int LT_metrics_address(const lt_engine_t* e, char* buf, size_t cap) {
  if (e == nullptr || buf == nullptr) return -LT_ERR_INVAL;
  if (!e->metrics) return -LT_ERR_UNSUPPORTED;
  const std::string a = e->metrics->address();
  if (a.size() + 1 > cap) return -LT_ERR_TRUNCATED;
  std::memcpy(buf, a.c_str(), a.size() + 1);
  return 0;
}

int LT_peer_stats(lt_engine_t* e, lt_peer_stats_t* out, size_t cap, size_t* n) {
  if (e == nullptr || n == nullptr || (out == nullptr && cap != 0)) return -LT_ERR_INVAL;
  const auto names = e->core.transport_stats();
  size_t k = 0;
  for (const lt::proto::PeerTraffic& t : e->core.peer_traffic()) {
    if (t.transport >= names.size()) continue;
    if (k < cap) {
      lt_peer_stats_t& o = out[k];
      std::memset(&o, 0, sizeof(o));
      o.node = t.node;
      std::snprintf(o.transport, sizeof(o.transport), "%s", names[t.transport].first.c_str());
      o.tx_ops = t.tx_ops;
      o.tx_bytes = t.tx_bytes;
      o.rx_ops = t.rx_ops;
      o.rx_bytes = t.rx_bytes;
    }
    ++k;
  }
  *n = k;
  return 0;
}

int LT_stats(lt_engine_t* e, lt_stats_t* out) {
  if (e == nullptr || out == nullptr) return -LT_ERR_INVAL;
  std::memset(out, 0, sizeof(*out));
  const lt::proto::EngineStats s = e->core.stats();
  out->served = s.served;
  out->malformed = s.malformed;
  out->late_replies = s.late_replies;
  out->ring_calls = s.ring_calls;
  out->ring_replies = s.ring_replies;
  out->split_recvs = s.split_recvs;
  for (const auto& [name, t] : e->core.transport_stats()) {
    if (out->num_transports == LT_MAX_TRANSPORTS) break;
    lt_transport_stats_t& o = out->transports[out->num_transports++];
    std::snprintf(o.name, sizeof(o.name), "%s", name.c_str());
    o.connections = t.connections;
    o.queue_pairs = t.queue_pairs;
    o.spare_queue_pairs = t.spare_queue_pairs;
    o.registrations = t.registrations;
    o.retransmits = t.retransmits;
    o.window_cuts = t.window_cuts;
    o.qp_resets = t.qp_resets;
  }
  return 0;
}
