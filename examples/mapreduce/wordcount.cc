// Word count in LITE-MapReduce's style on ltier: every rank maps a
// line-aligned share of the corpus and combines its counts; it partitions
// them by word hash into one LMR on its own node and publishes it; every rank
// then reduces its partition, pulling its slice of every mapper's LMR with
// one-sided reads (no mapper CPU involved); the reducers add their digests
// into rank 0's result words with atomics. Rank 0 prints the result and,
// with --check, compares it with a single-process count of the same file.
//
//   build/tools/ltier-run -n 3 -- build/examples/mapreduce/wordcount CORPUS [--check]
//
// Every rank reads CORPUS from its own file system (one host here; on
// several hosts, a shared or copied file).
#include "wordcount.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ltier/lt.h"
#include "mapped_file.h"

namespace {

int fail(const char* what, int rc) {
  fprintf(stderr, "wordcount: %s failed: %s\n", what, LT_strerror(rc));
  return 1;
}

double secs_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Map and combine this rank's share; lay out its partitions for the
// reducers: n + 1 offsets (u64), then partition j at [off[j], off[j + 1]).
std::vector<char> map_share(const MappedFile& f, int rank, int n) {
  uint64_t b, e;
  wc::share(f.data(), f.size(), rank, n, &b, &e);
  wc::Counts counts(1 << 18);
  wc::count_words(f.data() + b, f.data() + e, &counts);
  std::vector<std::vector<char>> parts(static_cast<size_t>(n));
  counts.each([&](std::string_view w, uint64_t h, uint64_t c) {
    wc::put_record(parts[h % static_cast<uint64_t>(n)], w, c);
  });
  std::vector<uint64_t> off(static_cast<size_t>(n) + 1);
  off[0] = 8 * off.size();
  for (int j = 0; j < n; ++j) off[j + 1] = off[j] + parts[j].size();
  std::vector<char> out(off[n]);
  std::memcpy(out.data(), off.data(), 8 * off.size());
  for (int j = 0; j < n; ++j) std::memcpy(out.data() + off[j], parts[j].data(), parts[j].size());
  return out;
}

// Pulls this rank's partition from every mapper's published LMR: the
// offsets first, then the slices, each round as async reads in flight at once.
int pull_partitions(lt_engine_t* e, int rank, int n, std::vector<std::vector<char>>* slices) {
  std::vector<lt_lmr_t> h(n);
  std::vector<uint64_t> range(2 * static_cast<size_t>(n));
  std::vector<lt_req_t> req(n);
  for (int i = 0; i < n; ++i) {
    std::string name = "wc.map." + std::to_string(i);
    if (int rc = LT_map(e, name.c_str(), LT_READ, &h[i])) return fail("map", rc);
    if (int rc =
            LT_read_async(e, h[i], 8 * static_cast<uint64_t>(rank), &range[2 * i], 16, &req[i]))
      return fail("read offsets", rc);
  }
  for (int i = 0; i < n; ++i)
    if (int rc = LT_wait(e, req[i], -1)) return fail("read offsets", rc);
  slices->resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    uint64_t len = range[2 * i + 1] - range[2 * i];
    (*slices)[i].resize(len);
    if (int rc = LT_read_async(e, h[i], range[2 * i], (*slices)[i].data(), len, &req[i]))
      return fail("read partition", rc);
  }
  for (int i = 0; i < n; ++i) {
    if (int rc = LT_wait(e, req[i], -1)) return fail("read partition", rc);
    (void)LT_unmap(e, h[i]);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const char* r = getenv("LTIER_RANK");
  const char* np = getenv("LTIER_NPROCS");
  if (argc < 2 || r == nullptr || np == nullptr) {
    fprintf(stderr, "usage: ltier-run -n N -- wordcount CORPUS [--check]\n");
    return 2;
  }
  int rank = atoi(r), n = atoi(np);
  bool check = argc > 2 && std::strcmp(argv[2], "--check") == 0;
  MappedFile f(argv[1]);
  if (!f.ok()) return fprintf(stderr, "wordcount: cannot read %s\n", argv[1]), 1;

  lt_engine_t* e;
  if (int rc = LT_join(nullptr, &e)) return fail("join", rc);
  lt_lmr_t result = 0, mine = 0;
  int rc = 0;
  if (rank == 0) {  // distinct, total, digest sum: added into by every reducer
    rc = LT_malloc(e, LT_node_id(e), 24, LT_RW | LT_ATOMIC, &result);
    if (rc == 0) rc = LT_publish(e, result, "wc.result", LT_RW | LT_ATOMIC);
  }
  if (rc == 0) rc = LT_barrier(e, "wc.start", n, -1);
  if (rc != 0) return fail("setup", rc);
  auto t0 = std::chrono::steady_clock::now();

  std::vector<char> staged = map_share(f, rank, n);
  rc = LT_malloc(e, LT_node_id(e), staged.size(), LT_RW, &mine);
  if (rc == 0) rc = LT_write(e, mine, 0, staged.data(), staged.size());
  std::string name = "wc.map." + std::to_string(rank);
  if (rc == 0) rc = LT_publish(e, mine, name.c_str(), LT_READ);
  if (rc == 0) rc = LT_barrier(e, "wc.mapped", n, -1);
  if (rc != 0) return fail("map", rc);
  double map_s = secs_since(t0);

  std::vector<std::vector<char>> slices;
  if (pull_partitions(e, rank, n, &slices) != 0) return 1;
  wc::Counts counts(1 << 18);
  for (auto& s : slices)
    wc::each_record(s.data(), s.data() + s.size(),
                    [&](std::string_view w, uint64_t c) { counts.add(w, c); });
  wc::Digest d;
  counts.each([&](std::string_view, uint64_t h, uint64_t c) { d.add(h, c); });
  lt_lmr_t res = result;
  if (rank != 0 && (rc = LT_map(e, "wc.result", LT_RW | LT_ATOMIC, &res)) != 0)
    return fail("map", rc);
  uint64_t old;
  for (int k = 0; k < 3 && rc == 0; ++k)
    rc = LT_fetch_add(e, res, 8 * k, k == 0 ? d.distinct : k == 1 ? d.total : d.sum, &old);
  if (rc == 0) rc = LT_barrier(e, "wc.reduced", n, -1);
  if (rc != 0) return fail("reduce", rc);
  int status = 0;
  if (rank == 0) {
    double total_s = secs_since(t0);
    uint64_t got[3];
    if ((rc = LT_read(e, result, 0, got, sizeof got)) != 0) return fail("read result", rc);
    printf(
        "wordcount: %d ranks, %.1f MB, %llu words, %llu distinct: %.3f s (map %.3f s), %.0f MB/s\n",
        n, f.size() / 1e6, static_cast<unsigned long long>(got[1]),
        static_cast<unsigned long long>(got[0]), total_s, map_s, f.size() / 1e6 / total_s);
    if (check) {
      wc::Counts all(1 << 18);
      wc::Digest ref = wc::count_all(f.data(), f.size(), &all);
      wc::Digest dist{got[0], got[1], got[2]};
      printf("wordcount: %s the single-process count\n", dist == ref ? "matches" : "DIFFERS FROM");
      status = dist == ref ? 0 : 1;
    }
  } else {
    (void)LT_unmap(e, res);
  }
  rc = LT_barrier(e, "wc.done", n, -1);  // nobody reads mine any more
  (void)LT_free(e, mine);
  if (rank == 0) (void)LT_free(e, result);
  LT_leave(e);
  return rc != 0 ? fail("finish", rc) : status;
}
