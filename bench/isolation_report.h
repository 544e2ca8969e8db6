// The isolation benchmark's report: its children's output lines read back
// (the latency tenant's percentiles and span, each bulk thread's bytes per
// millisecond) and the case lines it prints from them.
#pragma once

#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace bench {

struct Result {
  double p50 = 0, p99 = 0, p999 = 0, bulk_gbps = 0, after_gbps = 0;
  std::vector<double> peer_gbps;  // bulk_gbps per server, in the client's order
  std::vector<std::string> bins;  // per server: MiB per ms around the latency tenant's stop
  bool has_lat = false, has_bulk = false;
};

// One bulk thread's output: when it started, and bytes per millisecond.
struct Bins {
  unsigned long long start = 0;
  std::vector<double> bytes;
  // Throughput in [from, to) (ns, CLOCK_MONOTONIC), in GB/s.
  double rate(uint64_t from, uint64_t to) const {
    size_t a = from > start ? (from - start) / 1'000'000 : 0;
    size_t b = to > start ? (to - start) / 1'000'000 : 0;
    double sum = 0;
    for (size_t k = a; k < b && k < bytes.size(); ++k) sum += bytes[k];
    return b > a ? sum / ((b - a) * 1e-3) / 1e9 : 0.0;
  }
};

// Reads the lat and bulk lines of the children's output.
inline Result parse(const std::string& out) {
  Result r;
  unsigned long long lstart = 0, lstop = 0;
  std::vector<Bins> peers;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("lat ", 0) == 0) {
      size_t n;
      sscanf(line.c_str(), "lat p50=%lf p99=%lf p999=%lf n=%zu start=%llu stop=%llu", &r.p50,
             &r.p99, &r.p999, &n, &lstart, &lstop);
      r.has_lat = true;
    } else if (line.rfind("bulk ", 0) == 0) {
      int peer = 0;
      Bins b;
      sscanf(line.c_str(), "bulk peer=%d start=%llu", &peer, &b.start);
      std::istringstream ls(line.substr(line.find("bins=") + 5));
      std::string v;
      while (std::getline(ls, v, ',')) b.bytes.push_back(std::stod(v));
      if (peer < 0 || peer > 8) continue;
      if (peers.size() <= static_cast<size_t>(peer)) peers.resize(peer + 1);
      peers[peer] = std::move(b);
      r.has_bulk = true;
    }
  }
  for (const Bins& b : peers) {
    double during, after = 0;
    if (r.has_lat) {
      during = b.rate(lstart + 100'000'000, lstop);
      after = b.rate(lstop, lstop + 10'000'000);
    } else {
      const size_t end = b.bytes.size() > 40 ? b.bytes.size() - 40 : 0;
      during = b.rate(b.start + 100'000'000, b.start + end * 1'000'000);
    }
    r.peer_gbps.push_back(during);
    if (r.has_lat) {
      std::string line;
      for (uint64_t t = lstop - 10'000'000; t < lstop + 40'000'000; t += 1'000'000) {
        char v[16];
        snprintf(v, sizeof(v), "%s%.1f", line.empty() ? "" : ",",
                 b.rate(t, t + 1'000'000) * 1e9 / 1e3 / (1 << 20));
        line += v;
      }
      r.bins.push_back(line);
    }
    r.bulk_gbps += during;
    r.after_gbps += after;
  }
  return r;
}

inline void print(const char* name, const Result& r, bool bins) {
  printf("case=%s", name);
  if (r.has_lat) printf(" lat_p50_us=%.2f lat_p99_us=%.2f lat_p999_us=%.2f", r.p50, r.p99, r.p999);
  if (r.has_bulk) printf(" bulk_gbps=%.3f", r.bulk_gbps);
  if (r.peer_gbps.size() == 2) {
    printf(" bulk_shared_gbps=%.3f bulk_other_gbps=%.3f", r.peer_gbps[0], r.peer_gbps[1]);
  }
  if (r.has_bulk && r.has_lat) printf(" bulk_after_gbps=%.3f", r.after_gbps);
  printf("\n");
  for (size_t i = 0; bins && i < r.bins.size(); ++i) {
    printf("bins case=%s peer=%zu mib_per_ms_from_stop_minus_10ms=%s\n", name, i,
           r.bins[i].c_str());
  }
  fflush(stdout);
}

// The QoS-on case against the solo ones, as the isolation targets read
// them: latency p99 at most 1.5x and p99.9 at most 2x solo, bulk at least
// 0.8x solo while the latency tenant runs and 0.95x in the 10 ms after it
// stops. Printed only when all three cases ran.
inline void print_targets(const std::vector<std::pair<std::string, Result>>& results) {
  const Result *lat = nullptr, *bulk = nullptr, *on = nullptr;
  for (const auto& [name, r] : results) {
    if (name == "latency_alone") lat = &r;
    if (name == "bulk_alone") bulk = &r;
    if (name == "both_qos_on") on = &r;
  }
  if (lat == nullptr || bulk == nullptr || on == nullptr || lat->p99 <= 0 || lat->p999 <= 0 ||
      bulk->bulk_gbps <= 0) {
    return;
  }
  const double p99 = on->p99 / lat->p99, p999 = on->p999 / lat->p999;
  const double during = on->bulk_gbps / bulk->bulk_gbps, after = on->after_gbps / bulk->bulk_gbps;
  const int met = (p99 <= 1.5) + (p999 <= 2.0) + (during >= 0.8) + (after >= 0.95);
  printf(
      "targets p99_x_solo=%.2f p999_x_solo=%.2f bulk_during_x_solo=%.2f "
      "bulk_after_x_solo=%.2f met=%d/4\n",
      p99, p999, during, after, met);
  fflush(stdout);
}

}  // namespace bench
