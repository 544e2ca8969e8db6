// How much shared memory the shm transport maps when every pair of N nodes
// on one host has talked: an SPMD program for ltier-run. Every rank sends
// one message to every other rank and receives theirs, so every pair has
// its shm connection, then reports what its process maps for those
// connections (the "ltier-shm-conn" memfds in /proc/self/smaps): bytes
// mapped and bytes resident, after the first messages and again after
// traffic (traffic() below). Each connection's segment is mapped by both
// ends, so the host's total is half the sum over ranks (bench/shm_scale.sh
// adds them up).
//
//   build/tools/ltier-run -n 32 -- build/bench/shm_scale
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "ltier/lt.h"

namespace {

int env_int(const char* name) {
  const char* v = getenv(name);
  return v ? atoi(v) : -1;
}

// Sums Size and Rss (kB) of the mappings whose name holds `tag`.
void mapped_bytes(const char* tag, unsigned long long* size_kb, unsigned long long* rss_kb) {
  std::ifstream in("/proc/self/smaps");
  std::string line;
  bool ours = false;
  *size_kb = *rss_kb = 0;
  while (std::getline(in, line)) {
    unsigned long long v = 0;
    if (!line.empty() && line.find(':') != std::string::npos &&
        line.find('-') < line.find(' ')) {  // a mapping's first line: "start-end perms ..."
      ours = line.find(tag) != std::string::npos;
    } else if (ours && sscanf(line.c_str(), "Size: %llu kB", &v) == 1) {
      *size_kb += v;
    } else if (ours && sscanf(line.c_str(), "Rss: %llu kB", &v) == 1) {
      *rss_kb += v;
    }
  }
}

int fail(const char* what, int rc) {
  fprintf(stderr, "shm_scale: %s: %s\n", what, LT_strerror(rc));
  return 1;
}

size_t env_size(const char* name, size_t dflt) {
  const char* v = getenv(name);
  return v ? strtoull(v, nullptr, 0) : dflt;
}

// Every rank sends SHM_SCALE_BYTES (default 4 MiB, one default ring) to
// every other in SHM_SCALE_MSG-byte messages (default 16 KiB), taking turns
// among its peers, while a second thread receives what the others send it:
// traffic that cycles through the rings as a busy cluster's would.
int traffic(lt_engine_t* e, int rank, const lt_node_t* ids, size_t count) {
  const size_t msg = env_size("SHM_SCALE_MSG", 16u << 10);
  const size_t per_peer = env_size("SHM_SCALE_BYTES", 4u << 20) / msg;
  const int64_t kTimeout = 120'000'000;
  size_t peers = 0;
  for (size_t i = 0; i < count; ++i) peers += ids[i] != LT_node_id(e);
  int recv_rc = 0;
  std::thread rx([&] {
    std::vector<char> buf(msg);
    for (size_t k = 0; k < peers * per_peer && recv_rc == 0; ++k) {
      lt_node_t src = 0;
      size_t len = 0;
      recv_rc = LT_recv(e, 8, buf.data(), buf.size(), &src, &len, kTimeout);
    }
  });
  std::vector<char> out(msg, static_cast<char>(rank));
  int rc = 0;
  for (size_t k = 0; k < per_peer && rc == 0; ++k) {
    for (size_t i = 0; i < count && rc == 0; ++i) {
      if (ids[i] != LT_node_id(e)) rc = LT_send(e, ids[i], 8, out.data(), out.size());
    }
  }
  rx.join();
  if (rc != 0) return fail("traffic send", rc);
  return recv_rc != 0 ? fail("traffic recv", recv_rc) : 0;
}

}  // namespace

int main() {
  const int rank = env_int("LTIER_RANK"), n = env_int("LTIER_NPROCS");
  if (rank < 0 || n < 2) {
    fprintf(stderr, "shm_scale: run me under ltier-run -n N, N >= 2\n");
    return 2;
  }
  lt_engine_t* e;
  if (int rc = LT_join(nullptr, &e); rc != 0) return fail("join", rc);
  const int64_t kTimeout = 120'000'000;  // µs: 32 processes on 2 cores start slowly
  if (int rc = LT_barrier(e, "shm_scale.joined", static_cast<uint32_t>(n), kTimeout); rc != 0) {
    return fail("barrier", rc);
  }
  std::vector<lt_node_t> ids(static_cast<size_t>(n) + 8);
  size_t got = 0;
  if (int rc = LT_nodes(e, ids.data(), ids.size(), &got); rc != 0) return fail("LT_nodes", rc);
  const uint64_t hello = static_cast<uint64_t>(rank);
  for (size_t i = 0; i < got && i < ids.size(); ++i) {
    if (ids[i] == LT_node_id(e)) continue;
    if (int rc = LT_send(e, ids[i], 7, &hello, sizeof(hello)); rc != 0) return fail("send", rc);
  }
  for (int k = 0; k + 1 < n; ++k) {
    uint64_t m = 0;
    lt_node_t src = 0;
    size_t len = 0;
    if (int rc = LT_recv(e, 7, &m, sizeof(m), &src, &len, kTimeout); rc != 0) {
      return fail("recv", rc);
    }
  }
  if (int rc = LT_barrier(e, "shm_scale.talked", static_cast<uint32_t>(n), kTimeout); rc != 0) {
    return fail("barrier", rc);
  }
  // Where both ends of a pair dialed at once, the redundant connection is
  // closed and its endpoint freed once no caller can hold it: give that a
  // moment, so what is counted is what stays.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  unsigned long long size_kb = 0, rss_kb = 0, busy_size_kb = 0, busy_rss_kb = 0;
  mapped_bytes("ltier-shm-conn", &size_kb, &rss_kb);
  if (int rc = traffic(e, rank, ids.data(), got); rc != 0) return rc;
  if (int rc = LT_barrier(e, "shm_scale.traffic", static_cast<uint32_t>(n), kTimeout); rc != 0) {
    return fail("barrier", rc);
  }
  mapped_bytes("ltier-shm-conn", &busy_size_kb, &busy_rss_kb);
  // A connection narrowed to its share of shm.ring_budget_bytes frees the
  // pages beyond it at a sweep (once a second) after a quiet one: look again
  // once that has had time.
  std::this_thread::sleep_for(std::chrono::milliseconds(3000));
  unsigned long long settled_size_kb = 0, settled_rss_kb = 0;
  mapped_bytes("ltier-shm-conn", &settled_size_kb, &settled_rss_kb);
  printf(
      "shm_scale rank=%d nodes=%d conn_mapped_kb=%llu conn_resident_kb=%llu "
      "traffic_resident_kb=%llu settled_resident_kb=%llu\n",
      rank, n, size_kb, rss_kb, busy_rss_kb, settled_rss_kb);
  fflush(stdout);
  // Nobody leaves (and closes connections) before everyone has looked.
  (void)LT_barrier(e, "shm_scale.looked", static_cast<uint32_t>(n), kTimeout);
  LT_leave(e);
  return 0;
}
