// One rank of an mpirun job that forms an ltier cluster through PMIx
// (cluster.backend: pmix), with no ltier-manager: every rank finds the
// others by rank, sends a message around the ring, calls its successor,
// writes and reads memory on it, and meets the others at a job-wide barrier.
// Exit 0 when all of it checked out; the first failure is printed.
//
//   mpirun -np N [--oversubscribe] -x LTIER_CLUSTER_BACKEND=pmix pmix_job N
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "ltier/lt.h"

namespace {

int g_rank = -1;

[[noreturn]] void fail(const char* what, int rc) {
  fprintf(stderr, "pmix_job rank %d: %s: %s\n", g_rank, what, rc ? LT_strerror(rc) : "mismatch");
  exit(1);
}

void check(const char* what, int rc) {
  if (rc != 0) fail(what, rc);
}

int echo(void*, lt_node_t, const void* in, size_t in_len, void* out, size_t out_cap,
         size_t* out_len) {
  if (in_len > out_cap) return -LT_ERR_TRUNCATED;
  memcpy(out, in, in_len);
  *out_len = in_len;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: pmix_job N   (under mpirun -np N, LTIER_CLUSTER_BACKEND=pmix)\n");
    return 2;
  }
  const uint32_t n = static_cast<uint32_t>(atoi(argv[1]));
  lt_join_opts_t opts{};
  lt_engine_t* e = nullptr;
  check("LT_join", LT_join(&opts, &e));
  lt_node_info_t me{};
  check("LT_node_info", LT_node_info(e, LT_node_id(e), &me));
  g_rank = static_cast<int>(me.rank);
  check("LT_regRPC", LT_regRPC(e, 1, echo, nullptr));

  lt_node_t ids[1024];
  size_t count = 0;
  check("LT_nodes", LT_nodes(e, ids, 1024, &count));
  if (count != n) fail("LT_nodes: not one node per rank", 0);
  const uint32_t next_rank = (me.rank + 1) % n, prev_rank = (me.rank + n - 1) % n;
  lt_node_t next = 0, prev = 0;
  check("LT_node_by_rank next", LT_node_by_rank(e, next_rank, 0, &next));
  check("LT_node_by_rank prev", LT_node_by_rank(e, prev_rank, 0, &prev));
  // Everyone has registered its handler before anyone calls.
  check("LT_barrier", LT_barrier(e, "pmix.ready", n, -1));

  std::string hello = "from rank " + std::to_string(me.rank);
  check("LT_send", LT_send(e, next, 7, hello.data(), hello.size()));
  char buf[64] = {};
  lt_node_t src = 0;
  size_t len = 0;
  check("LT_recv", LT_recv(e, 7, buf, sizeof(buf), &src, &len, -1));
  if (src != prev || std::string(buf, len) != "from rank " + std::to_string(prev_rank)) {
    fail("LT_recv: not the predecessor's message", 0);
  }

  char reply[64] = {};
  size_t reply_len = 0;
  check("LT_RPC", LT_RPC(e, next, 1, hello.data(), hello.size(), reply, sizeof(reply), &reply_len));
  if (std::string(reply, reply_len) != hello) fail("LT_RPC: echo", 0);

  lt_lmr_t lmr = 0;
  check("LT_malloc", LT_malloc(e, next, 64, LT_READ | LT_WRITE, &lmr));
  uint64_t word = 0x1000 + me.rank, back = 0;
  check("LT_write", LT_write(e, lmr, 8, &word, sizeof(word)));
  check("LT_read", LT_read(e, lmr, 8, &back, sizeof(back)));
  if (back != word) fail("LT_read: not what was written", 0);
  check("LT_free", LT_free(e, lmr));

  // A name published on rank 0, mapped by everyone: the name directory is
  // the launcher's PMIx publish/lookup.
  lt_lmr_t table = 0;
  if (me.rank == 0) {
    check("LT_malloc table", LT_malloc(e, LT_node_id(e), 64, LT_READ | LT_WRITE, &table));
    check("LT_write table", LT_write(e, table, 0, "pmix", 4));
    check("LT_publish", LT_publish(e, table, "pmix.table", LT_READ));
  }
  check("LT_barrier", LT_barrier(e, "pmix.published", n, -1));
  lt_lmr_t mapped = 0;
  check("LT_map", LT_map(e, "pmix.table", LT_READ, &mapped));
  char four[4] = {};
  check("LT_read table", LT_read(e, mapped, 0, four, 4));
  if (memcmp(four, "pmix", 4) != 0) fail("LT_read table: not what rank 0 wrote", 0);
  check("LT_unmap", LT_unmap(e, mapped));

  // Nobody leaves while another may still call it.
  check("LT_barrier", LT_barrier(e, "pmix.done", n, -1));
  printf("pmix_job rank %u of %u: node %u, ok\n", me.rank, n, LT_node_id(e));
  LT_leave(e);
  return 0;
}
