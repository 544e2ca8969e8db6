// A short tour of what works today, run by the README's first command on a
// live cluster (ltier-manager plus at least two other nodes):
//   1. write on one node, read on another (a fresh process maps it by name);
//   2. memcpy between LMRs on two different nodes;
//   3. errors a user meets: out of bounds, wrong rights, forged handle;
//   4. a small latency table for LT_read/LT_write.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "ltier/lt.h"

namespace {

using Clock = std::chrono::steady_clock;

bool check(const char* what, int rc) {
  if (rc != 0) fprintf(stderr, "tour: %s: %s\n", what, LT_strerror(rc));
  return rc == 0;
}

uint64_t checksum(const std::vector<unsigned char>& b) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : b) h = (h ^ c) * 1099511628211ull;
  return h;
}

// The reader's side, run as a separate process ("tour --reader SIZE"): join,
// map the LMR by name, read it, print the checksum and this node's id.
int reader_main(uint64_t size) {
  lt_engine_t* e;
  if (LT_join(nullptr, &e) != 0) return 1;
  lt_lmr_t h;
  std::vector<unsigned char> buf(size);
  int rc = LT_map(e, "tour.data", LT_READ, &h);
  if (rc == 0) rc = LT_read(e, h, 0, buf.data(), size);
  if (rc == 0) {
    printf("%llu %u\n", static_cast<unsigned long long>(checksum(buf)), LT_node_id(e));
    LT_unmap(e, h);
  }
  LT_leave(e);
  return rc == 0 ? 0 : 1;
}

// A different node: this program started again as a fresh process (not a
// fork: this process has threads), reading the LMR by name.
bool read_from_another_node(uint64_t size, uint64_t* sum, lt_node_t* reader) {
  std::string cmd = "/proc/" + std::to_string(getpid()) + "/exe --reader " + std::to_string(size);
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return false;
  unsigned long long s = 0;
  unsigned node = 0;
  bool ok = fscanf(f, "%llu %u", &s, &node) == 2;
  ok = pclose(f) == 0 && ok;
  *sum = s;
  *reader = node;
  return ok;
}

double pct(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p / 100.0 * static_cast<double>(v.size() - 1))];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--reader") return reader_main(std::stoull(argv[2]));
  lt_engine_t* e;
  if (!check("join", LT_join(nullptr, &e))) return 1;
  lt_node_t me = LT_node_id(e), ids[64];
  size_t n = 0;
  LT_nodes(e, ids, 64, &n);
  std::vector<lt_node_t> others;
  for (size_t i = 0; i < n && i < 64; ++i) {
    if (ids[i] != me) others.push_back(ids[i]);
  }
  if (others.size() < 2) {
    fprintf(stderr, "tour: needs two other nodes in the cluster, found %zu\n", others.size());
    LT_leave(e);
    return 1;
  }
  lt_node_t a = others[0], b = others[1];
  int failures = 0;
  printf("tour: I am node %u; cluster nodes:", me);
  for (size_t i = 0; i < n && i < 64; ++i) printf(" %u", ids[i]);
  printf("\n");

  // 1. Write on one node, read on another.
  const uint64_t size = 1 << 20;
  std::vector<unsigned char> data(size);
  for (uint64_t i = 0; i < size; ++i) data[i] = static_cast<unsigned char>(i * 131 + 7);
  lt_lmr_t la, lb;
  if (!check("malloc", LT_malloc(e, a, size, LT_RW, &la)) ||
      !check("malloc", LT_malloc(e, b, size, LT_RW, &lb)) ||
      !check("write", LT_write(e, la, 0, data.data(), size)) ||
      !check("publish", LT_publish(e, la, "tour.data", LT_READ))) {
    LT_leave(e);
    return 1;
  }
  uint64_t seen = 0;
  lt_node_t reader = 0;
  bool ok = read_from_another_node(size, &seen, &reader);
  ok = ok && seen == checksum(data);
  failures += !ok;
  printf(
      "[1] node %u wrote 1 MiB into memory on node %u; node %u mapped 'tour.data' and read it: "
      "%s\n",
      me, a, reader, ok ? "identical" : "MISMATCH");

  // 2. memcpy between LMRs on two different nodes.
  std::vector<unsigned char> back(size);
  ok = check("memcpy", LT_memcpy(e, lb, 0, la, 0, size)) &&
       check("read", LT_read(e, lb, 0, back.data(), size)) && back == data;
  failures += !ok;
  printf("[2] LT_memcpy 1 MiB from node %u to node %u, read back from node %u: %s\n", a, b, b,
         ok ? "identical" : "MISMATCH");
  ok = check("memset", LT_memset(e, lb, 4096, 0, 4096)) &&
       check("read", LT_read(e, lb, 0, back.data(), size));
  for (uint64_t i = 0; ok && i < size; ++i) {
    unsigned char want = i >= 4096 && i < 8192 ? 0 : data[i];
    ok = back[i] == want;
  }
  failures += !ok;
  printf("[2] LT_memset 4 KiB at offset 4096 on node %u: %s\n", b, ok ? "ok" : "WRONG");

  // 3. Errors are explicit and touch nothing.
  char byte = 0;
  lt_lmr_t ro;
  int rc1 = LT_read(e, la, size, &byte, 1);
  int rc2 = LT_map(e, "tour.data", LT_RW, &ro);
  int rc3 = LT_write(e, la ^ (1ull << 40), 0, &byte, 1);
  printf("[3] read past the end: %s; map read-only LMR for writing: %s; forged handle: %s\n",
         LT_errname(rc1), LT_errname(rc2), LT_errname(rc3));
  failures += rc1 != -LT_ERR_OUT_OF_BOUNDS || rc2 != -LT_ERR_PERM || rc3 != -LT_ERR_BAD_HANDLE;

  // 4. Latency: round trip of one blocking op (median and p99 of 2000).
  printf("[4] latency on node %u (round trip, us):\n", a);
  printf("    %-8s %10s %10s %10s %10s\n", "size", "read p50", "read p99", "write p50",
         "write p99");
  for (uint64_t sz : {8ull, 4096ull, 65536ull}) {
    std::vector<double> r, w;
    for (int i = 0; i < 2200; ++i) {
      auto t0 = Clock::now();
      if (LT_read(e, la, 0, back.data(), sz) != 0) ++failures;
      auto t1 = Clock::now();
      if (LT_write(e, lb, 0, data.data(), sz) != 0) ++failures;
      auto t2 = Clock::now();
      if (i >= 200) {
        r.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        w.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count());
      }
    }
    printf("    %-8llu %10.1f %10.1f %10.1f %10.1f\n", static_cast<unsigned long long>(sz),
           pct(r, 50), pct(r, 99), pct(w, 50), pct(w, 99));
  }
  LT_free(e, la);
  LT_free(e, lb);
  LT_leave(e);
  printf("tour: %s\n", failures ? "FAILED" : "all steps ok");
  return failures ? 1 : 0;
}
