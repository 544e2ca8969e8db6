// ltier-info --stats HOST:PORT: a running engine's live QoS, transport and
// per-peer figures, read from its metrics endpoint (metrics.listen) and shown
// as tables, once or every --interval-ms.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <thread>

namespace {

// The body of GET /metrics from host:port, or "" (the reason on stderr).
std::string scrape(const std::string& hostport) {
  const size_t colon = hostport.rfind(':');
  if (colon == std::string::npos) {
    fprintf(stderr, "ltier-info: '%s' is not HOST:PORT\n", hostport.c_str());
    return "";
  }
  const std::string host = hostport.substr(0, colon), port = hostport.substr(colon + 1);
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0 || res == nullptr) {
    fprintf(stderr, "ltier-info: cannot resolve %s\n", hostport.c_str());
    return "";
  }
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  const bool connected = fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0;
  freeaddrinfo(res);
  if (!connected) {
    fprintf(stderr, "ltier-info: cannot connect to %s: %s\n", hostport.c_str(), strerror(errno));
    if (fd >= 0) close(fd);
    return "";
  }
  const std::string req = "GET /metrics HTTP/1.0\r\nHost: " + host + "\r\n\r\n";
  if (send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
    close(fd);
    return "";
  }
  std::string all;
  char buf[8192];
  for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) all.append(buf, static_cast<size_t>(n));
  close(fd);
  const size_t body = all.find("\r\n\r\n");
  if (all.rfind("HTTP/1.", 0) != 0 || all.find(" 200 ") == std::string::npos ||
      body == std::string::npos) {
    fprintf(stderr, "ltier-info: %s did not answer with metrics\n", hostport.c_str());
    return "";
  }
  return all.substr(body + 4);
}

// One sample line: name{k="v",...} value.
struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};
bool parse_line(const std::string& line, Sample* s) {
  if (line.empty() || line[0] == '#') return false;
  const size_t brace = line.find('{'), space = line.rfind(' ');
  if (space == std::string::npos) return false;
  s->name = line.substr(0, std::min(brace, space));
  s->labels.clear();
  if (brace != std::string::npos) {
    std::string inner = line.substr(brace + 1, line.find('}') - brace - 1);
    std::istringstream in(inner);
    std::string kv;
    while (std::getline(in, kv, ',')) {
      const size_t eq = kv.find('=');
      if (eq == std::string::npos) continue;
      std::string v = kv.substr(eq + 1);
      if (v.size() >= 2) v = v.substr(1, v.size() - 2);
      s->labels[kv.substr(0, eq)] = v;
    }
  }
  s->value = std::strtod(line.c_str() + space + 1, nullptr);
  return true;
}

void show(const std::string& text) {
  std::map<std::string, std::map<std::string, double>> classes;  // "tenant/class" -> field
  std::map<std::string, double> node;
  std::map<std::string, std::map<std::string, double>> transports;  // transport -> metric
  std::map<std::string, std::map<std::string, double>> peers;       // "peer transport" -> field
  std::istringstream in(text);
  std::string line;
  Sample s;
  while (std::getline(in, line)) {
    if (!parse_line(line, &s) || s.name.rfind("ltier_", 0) != 0) continue;
    if (s.labels.count("peer")) {
      const std::string key = s.labels["peer"] + " " + s.labels["transport"];
      peers[key][s.name + "_" + s.labels["direction"]] = s.value;
    } else if (s.labels.count("class")) {
      std::string key = s.labels["tenant"] + "/" + s.labels["class"];
      std::string field = s.name;
      if (s.labels.count("quantile")) field += s.labels["quantile"];
      classes[key][field] = s.value;
    } else if (s.labels.count("transport")) {
      transports[s.labels["transport"]][s.name] = s.value;
    } else {
      node[s.name] = s.value;
    }
  }
  printf("%-22s %10s %12s %6s %6s %10s %10s %8s %8s %12s\n", "tenant/class", "ops", "bytes",
         "queue", "flight", "p50_us", "p99_us", "throttle", "delayed", "rate_MB/s");
  for (auto& [k, f] : classes) {
    const double rate = f["ltier_class_rate_bytes_per_second"];
    char r[32];
    if (rate < 0) {
      snprintf(r, sizeof(r), "%s", "unlimited");
    } else {
      snprintf(r, sizeof(r), "%.1f", rate / 1e6);
    }
    printf("%-22s %10.0f %12.0f %6.0f %6.0f %10.1f %10.1f %8.0f %8.0f %12s\n", k.c_str(),
           f["ltier_class_ops_total"], f["ltier_class_bytes_total"], f["ltier_class_queue_depth"],
           f["ltier_class_in_flight"], f["ltier_class_rtt_seconds0.5"] * 1e6,
           f["ltier_class_rtt_seconds0.99"] * 1e6, f["ltier_class_throttles_total"],
           f["ltier_class_delayed_total"], r);
  }
  if (classes.empty()) printf("(no QoS classes configured)\n");
  printf("quota refusals %.0f, posted %.0f, served for peers %.0f; connections:",
         node["ltier_quota_refused_total"], node["ltier_posted_total"], node["ltier_served_total"]);
  for (auto& [t, f] : transports) printf(" %s %.0f", t.c_str(), f["ltier_transport_connections"]);
  printf("\n");
  for (auto& [t, f] : transports) {
    if (f.count("ltier_transport_retransmits_total") == 0) continue;
    printf(
        "%s: %.0f datagrams sent again, %.0f congestion window cuts (%.0f for marks), %.0f "
        "acknowledgements marked, QP reset %.0f times, %.0f of %.0f send slots free\n",
        t.c_str(), f["ltier_transport_retransmits_total"], f["ltier_transport_window_cuts_total"],
        f["ltier_transport_window_mark_cuts_total"], f["ltier_transport_marks_sent_total"],
        f["ltier_transport_qp_resets_total"], f["ltier_transport_send_slots_free"],
        f["ltier_transport_send_slots"]);
  }
  if (!peers.empty()) {
    printf("%-8s %-9s %12s %14s %12s %14s\n", "peer", "transport", "tx_ops", "tx_bytes", "rx_ops",
           "rx_bytes");
  }
  for (auto& [k, f] : peers) {
    const size_t sp = k.find(' ');
    printf("%-8s %-9s %12.0f %14.0f %12.0f %14.0f\n", k.substr(0, sp).c_str(),
           k.substr(sp + 1).c_str(), f["ltier_peer_ops_total_tx"], f["ltier_peer_bytes_total_tx"],
           f["ltier_peer_ops_total_rx"], f["ltier_peer_bytes_total_rx"]);
  }
  fflush(stdout);
}

}  // namespace

// ltier-info --stats HOST:PORT [--interval-ms N] [--count N]
int stats_main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: ltier-info --stats HOST:PORT [--interval-ms N] [--count N]\n");
    return 2;
  }
  long interval = 1000, count = 1;
  for (int i = 3; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--interval-ms") == 0) interval = std::atol(argv[i + 1]);
    if (std::strcmp(argv[i], "--count") == 0) count = std::atol(argv[i + 1]);
  }
  for (long k = 0; k < count; ++k) {
    if (k > 0) std::this_thread::sleep_for(std::chrono::milliseconds(interval));
    std::string text = scrape(argv[2]);
    if (text.empty()) return 1;
    show(text);
  }
  return 0;
}
