// LITE's promise: remote memory in three lines. Join the cluster, allocate a
// region on another node, memset it; then read it back to check.
//
// Needs a running cluster (ltier-manager and at least one other node); see
// the README's first command, which starts one.
#include <cstdio>
#include <vector>

#include "ltier/lt.h"

int main() {
  lt_engine_t* e;
  int rc = LT_join(nullptr, &e);  // 1: join (manager and secret from LTIER_* / config)
  if (rc != 0) {
    fprintf(stderr, "remote_memset: join: %s\n", LT_strerror(rc));
    return 1;
  }
  lt_node_t ids[64];
  size_t n = 0;
  LT_nodes(e, ids, 64, &n);
  lt_node_t target = 0;
  for (size_t i = 0; i < n && i < 64; ++i) {
    if (ids[i] != LT_node_id(e)) target = ids[i];
  }
  if (target == 0) {
    fprintf(stderr, "remote_memset: no other node in the cluster\n");
    LT_leave(e);
    return 1;
  }

  const uint64_t size = 4096;
  lt_lmr_t lmr;
  rc = LT_malloc(e, target, size, LT_RW, &lmr);        // 2: memory on another node
  if (rc == 0) rc = LT_memset(e, lmr, 0, 0x5a, size);  // 3: remote memset

  std::vector<unsigned char> back(size);
  if (rc == 0) rc = LT_read(e, lmr, 0, back.data(), size);
  size_t good = 0;
  for (unsigned char c : back) good += c == 0x5a;
  printf("remote_memset: node %u set %llu bytes on node %u to 0x5a; read back %zu/%llu ok%s\n",
         LT_node_id(e), static_cast<unsigned long long>(size), target, good,
         static_cast<unsigned long long>(size), rc ? "" : "");
  if (rc != 0) fprintf(stderr, "remote_memset: %s\n", LT_strerror(rc));
  if (rc == 0) LT_free(e, lmr);
  LT_leave(e);
  return rc == 0 && good == size ? 0 : 1;
}
