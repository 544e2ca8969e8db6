// ltier-info: what this build of ltier offers and how it is configured.
//
//   ltier-info                 transports and build facts
//   ltier-info --config [FILE] every configuration key: YAML path, environment
//                              variable, effective value, help
//   ltier-info --peers [--manager H:P] [--secret S] [--config FILE]
//                              joins the cluster briefly and prints, for every
//                              node, the transport this process picks and why
//   ltier-info --devices [--config FILE]
//                              RDMA devices and ports (state, MTU, GIDs, limits)
//                              and the device, port and GID ltier would use
//   ltier-info --stats HOST:PORT [--interval-ms N] [--count N]
//                              a running engine's QoS classes and transports,
//                              read from its metrics.listen endpoint
#include <cstdio>
#include <cstring>
#include <string>

#include "ltier/lt.h"

namespace {
void print_key(void*, const char* key, const char* env, const char* value, const char* help) {
  if (std::strcmp(key, "cluster.secret") == 0) value = "(hidden)";
  printf("%-26s %-30s %-18s %s\n", key, env, value[0] ? value : "\"\"", help);
}
int devices(int argc, char** argv) {
  const char* config = argc >= 4 && std::strcmp(argv[2], "--config") == 0 ? argv[3] : nullptr;
  lt_device_port_t ports[16];
  uint32_t n = 0;
  char why[1024];
  int rc = LT_devices(config, ports, 16, &n, why, sizeof(why));
  if (rc != 0) {
    fprintf(stderr, "ltier-info: %s%s%s\n", LT_strerror(rc), why[0] ? ": " : "", why);
    return 1;
  }
  for (uint32_t i = 0; i < n && i < 16; ++i) {
    const lt_device_port_t& p = ports[i];
    printf("%s port %u%s\n", p.device, p.port, p.chosen ? "  <- ltier uses this port" : "");
    printf("  state %s, link layer %s, active MTU %u, NUMA node %d%s\n", p.state, p.link_layer,
           p.active_mtu, p.numa_node, p.near ? " (near this process)" : "");
    printf(
        "  max_qp %u, max_qp_wr %u, max_sge %u, max_cqe %u, max_mr %u, max_srq %u, "
        "max_qp_rd_atom %u, max_mr_size %llu, atomics %s\n",
        p.max_qp, p.max_qp_wr, p.max_sge, p.max_cqe, p.max_mr, p.max_srq, p.max_qp_rd_atom,
        static_cast<unsigned long long>(p.max_mr_size),
        p.atomics == 2   ? "yes, with the CPU's (GLOB)"
        : p.atomics == 1 ? "yes, among the device's own (HCA)"
                         : "no");
    for (uint32_t g = 0; g < p.num_gids; ++g) {
      printf("  GID[%2u] %-40s %s%s\n", p.gids[g].index, p.gids[g].gid, p.gids[g].type,
             p.chosen && p.chosen_gid == p.gids[g].index ? "  <- ltier uses this GID" : "");
    }
  }
  if (why[0]) printf("no usable RDMA port: %s\n", why);
  return 0;
}

}  // namespace

int peers(int argc, char** argv) {
  lt_join_opts_t o{};
  for (int i = 2; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--manager") == 0) {
      o.manager = argv[i + 1];
    } else if (std::strcmp(argv[i], "--secret") == 0) {
      o.secret = argv[i + 1];
    } else if (std::strcmp(argv[i], "--config") == 0) {
      o.config_path = argv[i + 1];
    } else {
      fprintf(stderr, "ltier-info: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  lt_engine_t* e = nullptr;
  int rc = LT_join(&o, &e);
  if (rc != 0) {
    fprintf(stderr, "ltier-info: join failed: %s\n", LT_strerror(rc));
    return 1;
  }
  lt_node_t ids[1024];
  size_t n = 0;
  (void)LT_nodes(e, ids, 1024, &n);
  printf("%-6s %-6s %s\n", "node", "via", "why");
  for (size_t i = 0; i < n && i < 1024; ++i) {
    char name[16], why[128];
    rc = LT_peer_transport(e, ids[i], name, sizeof(name), why, sizeof(why));
    if (rc != 0) {
      printf("%-6u %-6s %s\n", ids[i], "-", LT_strerror(rc));
    } else {
      printf("%-6u %-6s %s%s\n", ids[i], name, why, ids[i] == LT_node_id(e) ? " (ltier-info)" : "");
    }
  }
  LT_leave(e);
  return 0;
}

int stats_main(int argc, char** argv);  // ltier_info_stats.cc

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "--peers") == 0) return peers(argc, argv);
  if (argc >= 2 && std::strcmp(argv[1], "--stats") == 0) return stats_main(argc, argv);
  if (argc >= 2 && std::strcmp(argv[1], "--devices") == 0) return devices(argc, argv);
  if (argc >= 2 && std::strcmp(argv[1], "--config") == 0) {
    printf("%-26s %-30s %-18s %s\n", "key", "environment", "value", "meaning");
    int rc = LT_config_keys(argc >= 3 ? argv[2] : nullptr, print_key, nullptr);
    if (rc != 0) {
      fprintf(stderr, "ltier-info: %s\n", LT_strerror(rc));
      return 1;
    }
    return 0;
  }
  if (argc >= 2) {
    fprintf(stderr,
            "usage: ltier-info [--config [FILE]] [--peers [--manager H:P] [--secret S]] "
            "[--devices [--config FILE]] [--stats HOST:PORT [--interval-ms N] [--count N]]\n");
    return 2;
  }
  printf("ltier transports:\n");
  printf("  tcp    available  (epoll, framed, one connection per peer)\n");
  printf("  shm    available  (same-host peers: memfd rings, native one-sided ops)\n");
  printf(
      "  rc     available  (RDMA RC QPs shared by threads, where both nodes have a device; "
      "ltier-info --devices lists them; UD fallback planned)\n");
  printf("select with LTIER_TRANSPORTS or the 'transports' key; see ltier-info --config\n");
  return 0;
}
