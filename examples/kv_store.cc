// A key-value store over ltier RPC: every rank serves one shard (PUT and GET
// handlers on its progress thread); a key lives on shard hash(key) % ranks.
// A small load generator: each rank PUTs its own keys, then GETs keys of
// every rank and checks the values.
//
//   build/tools/ltier-run -n 3 -- build/examples/kv_store [KEYS_PER_RANK]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "ltier/lt.h"

namespace {

constexpr uint32_t kPut = 10, kGet = 11;

struct Shard {
  std::mutex mu;  // handlers run on the progress thread, local calls on ours
  std::unordered_map<std::string, std::string> map;
};

// PUT request: u32 key length, key, value. Reply: empty.
int put(void* ctx, lt_node_t, const void* in, size_t len, void*, size_t, size_t* out_len) {
  uint32_t klen;
  if (len < 4) return -LT_ERR_MALFORMED;
  std::memcpy(&klen, in, 4);
  if (klen > len - 4) return -LT_ERR_MALFORMED;
  const char* p = static_cast<const char*>(in) + 4;
  auto* s = static_cast<Shard*>(ctx);
  std::lock_guard<std::mutex> g(s->mu);
  s->map[std::string(p, klen)] = std::string(p + klen, len - 4 - klen);
  *out_len = 0;
  return 0;
}

// GET request: the key. Reply: the value; LT_ERR_NOT_FOUND if absent.
int get(void* ctx, lt_node_t, const void* in, size_t len, void* out, size_t cap, size_t* out_len) {
  auto* s = static_cast<Shard*>(ctx);
  std::lock_guard<std::mutex> g(s->mu);
  auto it = s->map.find(std::string(static_cast<const char*>(in), len));
  if (it == s->map.end()) return -LT_ERR_NOT_FOUND;
  if (it->second.size() > cap) return -LT_ERR_TRUNCATED;
  std::memcpy(out, it->second.data(), it->second.size());
  *out_len = it->second.size();
  return 0;
}

int fail(const char* what, int rc) {
  fprintf(stderr, "kv_store: %s FAILED: %s\n", what, LT_strerror(rc));
  return 1;
}

std::string value_of(const std::string& key) { return "value-of-" + key; }

}  // namespace

int main(int argc, char** argv) {
  const char* r = getenv("LTIER_RANK");
  const char* n = getenv("LTIER_NPROCS");
  if (r == nullptr || n == nullptr) {
    fprintf(stderr, "kv_store: run me under ltier-run\n");
    return 2;
  }
  int rank = atoi(r), nprocs = atoi(n);
  int keys = argc > 1 ? atoi(argv[1]) : 300;
  lt_engine_t* e;
  if (int rc = LT_join(nullptr, &e)) return fail("join", rc);
  Shard shard;
  int rc = LT_regRPC(e, kPut, put, &shard);
  if (rc == 0) rc = LT_regRPC(e, kGet, get, &shard);
  if (rc != 0) return fail("LT_regRPC", rc);

  // Shard i lives on rank i: its node, waiting for ranks that join later.
  std::vector<lt_node_t> node_of(nprocs);
  for (int i = 0; i < nprocs && rc == 0; ++i) rc = LT_node_by_rank(e, i, -1, &node_of[i]);
  if (rc != 0) return fail("LT_node_by_rank", rc);
  // Every shard's handlers are registered before anyone calls.
  if (int b = LT_barrier(e, "kv.ready", nprocs, -1)) return fail("LT_barrier", b);
  auto shard_node = [&](const std::string& k) {
    return node_of[std::hash<std::string>{}(k) % nprocs];
  };

  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < keys; ++i) {
    std::string k = "r" + std::to_string(rank) + "-k" + std::to_string(i), v = value_of(k);
    std::vector<char> req(4 + k.size() + v.size());
    uint32_t klen = static_cast<uint32_t>(k.size());
    std::memcpy(req.data(), &klen, 4);
    std::memcpy(req.data() + 4, k.data(), k.size());
    std::memcpy(req.data() + 4 + k.size(), v.data(), v.size());
    size_t out = 0;
    if ((rc = LT_RPC(e, shard_node(k), kPut, req.data(), req.size(), nullptr, 0, &out))) {
      return fail("PUT", rc);
    }
  }
  double put_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if ((rc = LT_barrier(e, "kv.loaded", nprocs, -1))) return fail("barrier", rc);

  // GET every rank's keys (and one that does not exist).
  t0 = std::chrono::steady_clock::now();
  int bad = 0, gets = 0;
  char val[256];
  for (int other = 0; other < nprocs; ++other) {
    for (int i = 0; i < keys; ++i) {
      std::string k = "r" + std::to_string(other) + "-k" + std::to_string(i);
      size_t len = 0;
      rc = LT_RPC(e, shard_node(k), kGet, k.data(), k.size(), val, sizeof(val), &len);
      ++gets;
      if (rc == 0 && std::string(val, len) == value_of(k)) continue;
      if (bad++ == 0) {
        fprintf(stderr, "kv_store: GET %s FAILED: %s, %zu B\n", k.c_str(), LT_errname(rc), len);
      }
    }
  }
  double get_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  size_t len = 0;
  std::string missing = "no-such-key";
  int miss =
      LT_RPC(e, shard_node(missing), kGet, missing.data(), missing.size(), val, sizeof(val), &len);
  printf("rank %d: %d PUTs (%.0f/s), %d GETs (%.0f/s), %d wrong, missing key: %s\n", rank, keys,
         keys / put_s, gets, gets / get_s, bad, LT_errname(miss));
  fflush(stdout);
  if (miss != -LT_ERR_NOT_FOUND) fprintf(stderr, "kv_store: GET of a missing key FAILED\n");
  // Shards must outlive every reader.
  (void)LT_barrier(e, "kv.exit", nprocs, -1);
  LT_leave(e);
  return bad == 0 && miss == -LT_ERR_NOT_FOUND ? 0 : 1;
}
