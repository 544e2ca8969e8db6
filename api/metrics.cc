#include "api/metrics.h"

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>

#include <exception>

#include "common/config.h"
#include "proto/engine.h"

namespace lt::api {

namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

MetricFamily family(const char* name, const char* help, MetricType type) {
  MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = type;
  return f;
}

void add(MetricFamily* f, std::vector<ClientMetric::Label> labels, double v) {
  ClientMetric m;
  m.label = std::move(labels);
  if (f->type == MetricType::Counter) {
    m.counter.value = v;
  } else {
    m.gauge.value = v;
  }
  f->metric.push_back(std::move(m));
}

// Operations and bytes per live peer and transport, each way: "tx" for work
// requests this node posted to the peer, "rx" for messages it took in.
void add_peer_traffic(const std::string& node,
                      const std::vector<std::pair<std::string, transport::TransportStats>>& names,
                      const std::vector<proto::PeerTraffic>& traffic,
                      std::vector<MetricFamily>* out) {
  auto ops = family("ltier_peer_ops_total",
                    "operations with a peer: work requests posted (tx), messages taken in (rx)",
                    MetricType::Counter);
  auto bytes = family("ltier_peer_bytes_total", "bytes of those operations, headers included",
                      MetricType::Counter);
  for (const auto& t : traffic) {
    if (t.transport >= names.size()) continue;
    std::vector<ClientMetric::Label> l = {{"node", node},
                                          {"peer", std::to_string(t.node)},
                                          {"transport", names[t.transport].first},
                                          {"direction", "tx"}};
    add(&ops, l, static_cast<double>(t.tx_ops));
    add(&bytes, l, static_cast<double>(t.tx_bytes));
    l.back().value = "rx";
    add(&ops, l, static_cast<double>(t.rx_ops));
    add(&bytes, l, static_cast<double>(t.rx_bytes));
  }
  if (ops.metric.empty()) return;
  out->push_back(std::move(ops));
  out->push_back(std::move(bytes));
}

// Reads the engine at each scrape (the exposer's thread).
class EngineCollector final : public prometheus::Collectable {
 public:
  explicit EngineCollector(const proto::Engine& e) : e_(e) {}

  std::vector<MetricFamily> Collect() const override {
    const qos::Scheduler& sched = e_.scheduler();
    const std::string tenant = sched.tenant();
    const std::string node = std::to_string(e_.self());
    std::vector<MetricFamily> out;
    auto ops =
        family("ltier_class_ops_total", "operations admitted, by QoS class", MetricType::Counter);
    auto bytes = family("ltier_class_bytes_total", "payload bytes admitted, by QoS class",
                        MetricType::Counter);
    auto depth = family("ltier_class_queue_depth", "calls waiting for the class's tokens now",
                        MetricType::Gauge);
    auto in_flight = family("ltier_class_in_flight", "operations admitted, not yet completed",
                            MetricType::Gauge);
    auto rtt = family("ltier_class_rtt_seconds", "RTT of completed operations (quantile)",
                      MetricType::Gauge);
    auto throttles = family("ltier_class_throttles_total", "times throttling of the class started",
                            MetricType::Counter);
    auto delayed =
        family("ltier_class_delayed_total", "calls that waited for tokens", MetricType::Counter);
    auto rate = family("ltier_class_rate_bytes_per_second",
                       "bytes/s the class may send now (-1: not throttled)", MetricType::Gauge);
    auto peer_rate =
        family("ltier_class_peer_rate_bytes_per_second",
               "bytes/s the class may send to a peer it is throttled towards", MetricType::Gauge);
    for (const auto& c : sched.class_stats()) {
      const std::vector<ClientMetric::Label> l = {
          {"node", node}, {"tenant", tenant}, {"class", c.name}};
      add(&ops, l, static_cast<double>(c.ops));
      add(&bytes, l, static_cast<double>(c.bytes));
      add(&depth, l, static_cast<double>(c.waiting));
      add(&in_flight, l, static_cast<double>(c.in_flight));
      auto q = l;
      q.push_back({"quantile", "0.5"});
      add(&rtt, q, static_cast<double>(c.rtt_p50_ns) / 1e9);
      q.back().value = "0.99";
      add(&rtt, q, static_cast<double>(c.rtt_p99_ns) / 1e9);
      add(&throttles, l, static_cast<double>(c.throttles));
      add(&delayed, l, static_cast<double>(c.delayed));
      add(&rate, l, c.rate == qos::RateControl::kUnlimited ? -1.0 : static_cast<double>(c.rate));
      for (const auto& [peer, r] : c.peer_rates) {
        auto p = l;
        p.push_back({"peer", std::to_string(peer)});
        add(&peer_rate, p, static_cast<double>(r));
      }
    }
    for (auto* f :
         {&ops, &bytes, &depth, &in_flight, &rtt, &throttles, &delayed, &rate, &peer_rate}) {
      if (!f->metric.empty()) out.push_back(std::move(*f));
    }
    const qos::SchedulerStats ss = sched.stats();
    auto quota =
        family("ltier_quota_refused_total", "calls refused by a tenant quota", MetricType::Counter);
    add(&quota, {{"node", node}, {"tenant", tenant}}, static_cast<double>(ss.quota_refused));
    out.push_back(std::move(quota));
    auto posted =
        family("ltier_posted_total", "work requests posted to transports", MetricType::Counter);
    const std::vector<proto::PeerTraffic> traffic = e_.peer_traffic();
    uint64_t n_posted = 0;
    for (const auto& t : traffic) n_posted += t.tx_ops;
    add(&posted, {{"node", node}, {"tenant", tenant}}, static_cast<double>(n_posted));
    out.push_back(std::move(posted));
    const proto::EngineStats es = e_.stats();
    auto served = family("ltier_served_total", "requests from peers this node's CPU served",
                         MetricType::Counter);
    add(&served, {{"node", node}}, static_cast<double>(es.served));
    out.push_back(std::move(served));
    auto conns = family("ltier_transport_connections", "live connections to peers, by transport",
                        MetricType::Gauge);
    const auto transports = e_.transport_stats();
    for (const auto& [name, t] : transports) {
      add(&conns, {{"node", node}, {"transport", name}}, static_cast<double>(t.connections));
    }
    out.push_back(std::move(conns));
    auto rexmit =
        family("ltier_transport_retransmits_total",
               "ud: datagrams sent again (timeouts, reported holes)", MetricType::Counter);
    auto cuts = family("ltier_transport_window_cuts_total",
                       "ud: congestion window cuts (marks, losses, timeouts)", MetricType::Counter);
    auto mark_cuts =
        family("ltier_transport_window_mark_cuts_total",
               "ud: congestion window cuts that answered a receiver's mark", MetricType::Counter);
    auto marks = family("ltier_transport_marks_sent_total",
                        "ud: acknowledgements this node marked, short of receive buffers",
                        MetricType::Counter);
    auto resets =
        family("ltier_transport_qp_resets_total",
               "ud: times its QP was found in error and put back in service", MetricType::Counter);
    auto slots = family("ltier_transport_send_slots",
                        "ud: registered send slots, shared by all peers", MetricType::Gauge);
    auto slots_free =
        family("ltier_transport_send_slots_free",
               "ud: send slots neither held by a sender nor in the device", MetricType::Gauge);
    for (const auto& [name, t] : transports) {
      if (name != "ud") continue;
      const std::vector<ClientMetric::Label> l{{"node", node}, {"transport", name}};
      add(&rexmit, l, static_cast<double>(t.retransmits));
      add(&cuts, l, static_cast<double>(t.window_cuts));
      add(&mark_cuts, l, static_cast<double>(t.mark_cuts));
      add(&marks, l, static_cast<double>(t.marks_sent));
      add(&resets, l, static_cast<double>(t.qp_resets));
      add(&slots, l, static_cast<double>(t.send_slots));
      add(&slots_free, l, static_cast<double>(t.send_slots_free));
    }
    for (auto* f : {&rexmit, &cuts, &mark_cuts, &marks, &resets, &slots, &slots_free}) {
      if (!f->metric.empty()) out.push_back(std::move(*f));
    }
    add_peer_traffic(node, transports, traffic, &out);
    return out;
  }

 private:
  const proto::Engine& e_;
};

class PrometheusServer final : public MetricsServer {
 public:
  PrometheusServer(const proto::Engine& e, const std::string& listen)
      : collector_(std::make_shared<EngineCollector>(e)), exposer_(listen, 1) {
    exposer_.RegisterCollectable(collector_);
    host_ = listen.substr(0, listen.rfind(':'));
  }
  std::string address() const override {
    auto ports = exposer_.GetListeningPorts();
    return host_ + ":" + (ports.empty() ? std::string("0") : std::to_string(ports.front()));
  }

 private:
  std::shared_ptr<EngineCollector> collector_;
  prometheus::Exposer exposer_;
  std::string host_;
};

}  // namespace

Result<std::unique_ptr<MetricsServer>> serve_metrics(const proto::Engine& e,
                                                     const std::string& listen,
                                                     std::string* error) {
  std::string host;
  uint16_t port = 0;
  if (!parse_host_port(listen, &host, &port).is_ok()) {
    if (error) *error = "metrics.listen '" + listen + "' is not HOST:PORT";
    return Code::kInvalidArg;
  }
  try {
    return std::unique_ptr<MetricsServer>(new PrometheusServer(e, listen));
  } catch (const std::exception& ex) {  // civetweb could not listen there
    if (error) *error = "metrics.listen '" + listen + "': " + ex.what();
    return Code::kInvalidArg;
  }
}

}  // namespace lt::api
