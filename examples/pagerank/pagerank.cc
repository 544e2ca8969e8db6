// PageRank on ltier in PowerGraph's gather-apply-scatter form (pagerank.h),
// vertices split into one range per rank. Each rank keeps the in-edges of its
// vertices and, in an LMR on its own node, two contribution buffers (used by
// alternate iterations) followed by its vertices' ranks. An iteration:
// scatter into this iteration's buffer, one barrier, then gather by reading
// every other rank's buffer with one-sided reads (no CPU of theirs involved),
// and apply. Alternating buffers make one barrier per iteration enough: no
// rank can write a buffer again before everyone has read it.
//
//   build/tools/ltier-run -n 2 -- build/examples/pagerank/pagerank GRAPH [--iters K] [--check]
//
// --check: rank 0 also runs the single-process algorithm and compares.
#include "pagerank.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ltier/lt.h"

namespace {

int fail(const char* what, int rc) {
  fprintf(stderr, "pagerank: %s failed: %s\n", what, LT_strerror(rc));
  return 1;
}

// Where rank j's parts live in its LMR (sizes in doubles; one slot after each
// buffer holds its dangling mass).
struct Layout {
  uint64_t owned;
  uint64_t buffer(int parity) const { return 8 * static_cast<uint64_t>(parity) * (owned + 1); }
  uint64_t ranks() const { return 8 * 2 * (owned + 1); }
  uint64_t bytes() const { return ranks() + 8 * owned; }
};

// Compares the distributed ranks with the single-process algorithm's.
bool check(const std::string& path, int iters, const std::vector<double>& got) {
  pr::Graph g;
  std::string err;
  if (!g.load(path, 0, 1, &err)) return fprintf(stderr, "pagerank: %s\n", err.c_str()), false;
  std::vector<double> rank(g.vertices, 1.0 / static_cast<double>(g.vertices)), contrib(g.vertices);
  for (int it = 0; it < iters; ++it)
    pr::gather_apply(g, contrib.data(), pr::scatter(g, rank.data(), contrib.data()), rank.data());
  double l1 = 0, rel = 0;
  for (uint64_t v = 0; v < g.vertices; ++v) {
    l1 += std::fabs(got[v] - rank[v]);
    rel = std::max(rel, std::fabs(got[v] - rank[v]) / rank[v]);
  }
  bool ok = l1 <= 1e-6 && rel <= 1e-6;
  printf("pagerank: against the single-process run: L1 %.2e, max relative %.2e: %s\n", l1, rel,
         ok ? "matches" : "DIFFERS");
  return ok;
}

// One rank's run: its graph share, where every rank's LMR parts are, and
// the handles on them.
struct Job {
  pr::Graph g;
  int me = 0, n = 1;
  std::vector<Layout> lay;
  std::vector<uint64_t> lo;  // rank j owns [lo[j], lo[j + 1])
  lt_engine_t* e = nullptr;
  lt_lmr_t mine = 0;
  std::vector<lt_lmr_t> peer;  // every rank's LMR (mine at me)
  double phase[4] = {};        // rank's seconds: scatter, barriers, exchange, gather+apply

  // Allocates and publishes this rank's LMR, maps everyone else's.
  int setup() {
    lay.resize(n);
    lo.resize(n + 1);
    for (int j = 0; j <= n; ++j) lo[j] = pr::range_begin(g.vertices, j, n);
    for (int j = 0; j < n; ++j) lay[j].owned = lo[j + 1] - lo[j];
    std::string name = "pr." + std::to_string(me);
    int rc = LT_malloc(e, LT_node_id(e), lay[me].bytes(), LT_RW, &mine);
    if (rc == 0) rc = LT_publish(e, mine, name.c_str(), LT_READ);
    if (rc == 0) rc = LT_barrier(e, "pr.published", n, -1);
    peer.assign(n, mine);
    for (int j = 0; j < n && rc == 0; ++j)
      if (j != me) rc = LT_map(e, ("pr." + std::to_string(j)).c_str(), LT_READ, &peer[j]);
    return rc;
  }

  // `iters` iterations; this rank's ranks end in its LMR.
  int iterate(int iters) {
    uint64_t owned = lay[me].owned;
    std::vector<double> rank(owned, 1.0 / static_cast<double>(g.vertices));
    std::vector<double> all(g.vertices);  // every vertex's contribution
    std::vector<double> dangling_of(n), scratch(owned + 1);
    std::vector<lt_req_t> req(2 * n);
    auto lap = [clock = std::chrono::steady_clock::now()](double* into) mutable {
      auto now = std::chrono::steady_clock::now();
      *into += std::chrono::duration<double>(now - clock).count();
      clock = now;
    };
    int rc = 0;
    for (int it = 0; it < iters && rc == 0; ++it) {
      int parity = it & 1;
      scratch[owned] = pr::scatter(g, rank.data(), scratch.data());
      rc = LT_write(e, mine, lay[me].buffer(parity), scratch.data(), 8 * (owned + 1));
      lap(&phase[0]);
      std::string bar = "pr.it." + std::to_string(it);
      if (rc == 0) rc = LT_barrier(e, bar.c_str(), n, -1);
      lap(&phase[1]);
      for (int j = 0; j < n && rc == 0; ++j) {  // gather: every buffer, reads in flight at once
        uint64_t at = lay[j].buffer(parity);
        rc = LT_read_async(e, peer[j], at, &all[lo[j]], 8 * lay[j].owned, &req[2 * j]);
        if (rc == 0)
          rc =
              LT_read_async(e, peer[j], at + 8 * lay[j].owned, &dangling_of[j], 8, &req[2 * j + 1]);
      }
      for (int k = 0; k < 2 * n && rc == 0; ++k) rc = LT_wait(e, req[k], -1);
      lap(&phase[2]);
      double dangling = 0;
      for (int j = 0; j < n; ++j) dangling += dangling_of[j];
      if (rc == 0) pr::gather_apply(g, all.data(), dangling, rank.data());
      lap(&phase[3]);
    }
    if (rc == 0) rc = LT_write(e, mine, lay[me].ranks(), rank.data(), 8 * owned);
    return rc;
  }

  // Rank 0: every rank's ranks, printed (and checked with --check).
  int report(const char* path, int iters, double secs, bool want_check) {
    std::vector<double> got(g.vertices);
    for (int j = 0; j < n; ++j)
      if (int rc = LT_read(e, peer[j], lay[j].ranks(), &got[lo[j]], 8 * lay[j].owned))
        return fail("collect", rc);
    auto top = std::max_element(got.begin(), got.end());
    double sum = 0;
    for (double x : got) sum += x;
    printf(
        "pagerank: %d ranks, %llu vertices, %llu edges, %d iterations: %.3f s "
        "(top vertex %lld, rank %.3e; sum %.6f)\n",
        n, static_cast<unsigned long long>(g.vertices), static_cast<unsigned long long>(g.edges),
        iters, secs, static_cast<long long>(top - got.begin()), *top, sum);
    printf(
        "pagerank: rank 0's time: scatter %.3f s, barriers %.3f s, exchange %.3f s, "
        "gather+apply %.3f s\n",
        phase[0], phase[1], phase[2], phase[3]);
    return want_check && !check(path, iters, got) ? 1 : 0;
  }
};

}  // namespace

int main(int argc, char** argv) {
  const char* r = getenv("LTIER_RANK");
  const char* np = getenv("LTIER_NPROCS");
  if (argc < 2 || r == nullptr || np == nullptr)
    return fprintf(stderr, "usage: ltier-run -n N -- pagerank GRAPH [--iters K] [--check]\n"), 2;
  Job job;
  job.me = atoi(r);
  job.n = atoi(np);
  int iters = 30;
  bool want_check = false;
  for (int i = 2; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--iters") && i + 1 < argc)
      iters = atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--check"))
      want_check = true;
  }
  std::string err;
  if (!job.g.load(argv[1], job.me, job.n, &err))
    return fprintf(stderr, "pagerank: %s\n", err.c_str()), 1;
  if (int rc = LT_join(nullptr, &job.e)) return fail("join", rc);
  int rc = job.setup();
  if (rc == 0) rc = LT_barrier(job.e, "pr.start", job.n, -1);
  if (rc != 0) return fail("setup", rc);
  auto t0 = std::chrono::steady_clock::now();
  rc = job.iterate(iters);
  if (rc == 0) rc = LT_barrier(job.e, "pr.done", job.n, -1);
  if (rc != 0) return fail("iterate", rc);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int status = job.me == 0 ? job.report(argv[1], iters, secs, want_check) : 0;
  rc = LT_barrier(job.e, "pr.collected", job.n, -1);  // nobody reads mine any more
  for (int j = 0; j < job.n; ++j)
    if (j != job.me) (void)LT_unmap(job.e, job.peer[j]);
  (void)LT_free(job.e, job.mine);
  LT_leave(job.e);
  return rc != 0 ? fail("finish", rc) : status;
}
