// An SPMD program for ltier-run: every rank hosts a small LMR, publishes it
// as "ring.<rank>", writes its rank into the next rank's LMR, and checks that
// the previous rank wrote into its own.
//
//   build/tools/ltier-run -n 4 -- build/examples/spmd_ring
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "ltier/lt.h"

namespace {
int env_int(const char* name) {
  const char* v = getenv(name);
  return v ? atoi(v) : -1;
}
}  // namespace

int main() {
  int rank = env_int("LTIER_RANK"), n = env_int("LTIER_NPROCS");
  if (rank < 0 || n < 1) {
    fprintf(stderr, "spmd_ring: run me under ltier-run (LTIER_RANK/LTIER_NPROCS unset)\n");
    return 2;
  }
  lt_engine_t* e;
  int rc = LT_join(nullptr, &e);
  if (rc != 0) {
    fprintf(stderr, "join: %s\n", LT_strerror(rc));
    return 1;
  }
  lt_lmr_t mine, next;
  uint64_t mark = UINT64_MAX;
  rc = LT_malloc(e, LT_node_id(e), sizeof(mark), LT_RW, &mine);
  if (rc == 0) rc = LT_write(e, mine, 0, &mark, sizeof(mark));
  if (rc == 0) rc = LT_publish(e, mine, ("ring." + std::to_string(rank)).c_str(), LT_WRITE);
  // The next rank may not have published yet: retry for a while.
  std::string next_name = "ring." + std::to_string((rank + 1) % n);
  auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (rc == 0 && (rc = LT_map(e, next_name.c_str(), LT_WRITE, &next)) == -LT_ERR_NOT_FOUND &&
         std::chrono::steady_clock::now() < give_up) {
    rc = 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  uint64_t me = static_cast<uint64_t>(rank);
  if (rc == 0) rc = LT_write(e, next, 0, &me, sizeof(me));
  // Wait until the previous rank has written into our LMR.
  while (rc == 0 && mark == UINT64_MAX && std::chrono::steady_clock::now() < give_up) {
    rc = LT_read(e, mine, 0, &mark, sizeof(mark));
    if (mark == UINT64_MAX) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  uint64_t want = static_cast<uint64_t>((rank + n - 1) % n);
  bool ok = rc == 0 && mark == want;
  printf("rank %d (node %u): got %llu from the previous rank: %s\n", rank, LT_node_id(e),
         static_cast<unsigned long long>(mark), ok ? "ok" : (rc ? LT_strerror(rc) : "WRONG"));
  fflush(stdout);
  // Stay until the next rank has read what we wrote: it leaves after its check,
  // and our LMR must outlive the previous rank's write, which we have seen.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  LT_leave(e);
  return ok ? 0 : 1;
}
