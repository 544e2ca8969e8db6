// One tenant's workload for the QoS demo: `qos_tenants latency SECONDS` reads
// 64 bytes from another node every 100 us; `qos_tenants bulk SECONDS` writes
// 1 MiB to it flat out. The tenant, its classes and the QoS policy come from
// the environment (LTIER_TENANT, LTIER_CONFIG=examples/qos.yaml); with
// LTIER_METRICS_LISTEN set it serves its live figures for ltier-info --stats.
// At the end it prints its classes' figures (LT_class_stats).
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ltier/lt.h"

static double now_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

int main(int argc, char** argv) {
  if (argc != 3 || (std::strcmp(argv[1], "latency") != 0 && std::strcmp(argv[1], "bulk") != 0)) {
    fprintf(stderr, "usage: qos_tenants latency|bulk SECONDS\n");
    return 2;
  }
  const bool latency = std::strcmp(argv[1], "latency") == 0;
  const double seconds = std::atof(argv[2]);
  lt_engine_t* e;
  int rc = LT_join(nullptr, &e);
  if (rc != 0) {
    fprintf(stderr, "qos_tenants: join: %s\n", LT_strerror(rc));
    return 1;
  }
  char metrics[64] = "";
  if (LT_metrics_address(e, metrics, sizeof(metrics)) == 0) {
    printf("qos_tenants %s: node %u, metrics at %s\n", argv[1], LT_node_id(e), metrics);
    fflush(stdout);
  }
  // The target: the lowest-numbered other node (the demo's first server).
  lt_node_t ids[64], target = 0;
  size_t n = 0;
  LT_nodes(e, ids, 64, &n);
  for (size_t i = 0; i < n && i < 64; ++i) {
    if (ids[i] != LT_node_id(e) && (target == 0 || ids[i] < target)) target = ids[i];
  }
  const size_t size = latency ? 64 : 1 << 20;
  lt_lmr_t lmr;
  if (target == 0 || (rc = LT_malloc(e, target, size, LT_RW, &lmr)) != 0) {
    fprintf(stderr, "qos_tenants: no memory on another node: %s\n", LT_strerror(rc));
    LT_leave(e);
    return 1;
  }
  std::vector<char> buf(size, 1);
  uint64_t ops = 0;
  for (double end = now_s() + seconds; now_s() < end && rc == 0; ++ops) {
    if (latency) {
      rc = LT_read(e, lmr, 0, buf.data(), size);
      timespec pause{0, 100000};
      nanosleep(&pause, nullptr);
    } else {
      rc = LT_write(e, lmr, 0, buf.data(), size);
    }
  }
  if (rc != 0) fprintf(stderr, "qos_tenants: %s\n", LT_strerror(rc));
  lt_class_stats_t cs[8];
  size_t nc = 0;
  if (LT_class_stats(e, cs, 8, &nc) == 0) {
    for (size_t i = 0; i < nc && i < 8; ++i) {
      if (cs[i].ops == 0) continue;
      printf(
          "qos_tenants %s: class %s: %llu ops, %.1f MB, RTT p50 %.1f us p99 %.1f us, "
          "throttled %llu times, %llu calls delayed\n",
          argv[1], cs[i].name, static_cast<unsigned long long>(cs[i].ops), cs[i].bytes / 1e6,
          cs[i].rtt_p50_ns / 1e3, cs[i].rtt_p99_ns / 1e3,
          static_cast<unsigned long long>(cs[i].throttles),
          static_cast<unsigned long long>(cs[i].delayed));
    }
  }
  LT_free(e, lmr);
  LT_leave(e);
  return rc == 0 ? 0 : 1;
}
