// Single-process PageRank, the same algorithm and iteration count as the
// distributed one (pagerank.h): the reference it is checked and timed against.
//
//   pagerank_ref GRAPH [--iters K] [--out RANKS]   (RANKS: the ranks as raw doubles)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "pagerank.h"

int main(int argc, char** argv) {
  if (argc < 2) return fprintf(stderr, "usage: pagerank_ref GRAPH [--iters K] [--out RANKS]\n"), 2;
  int iters = 30;
  const char* out = nullptr;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--iters"))
      iters = atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--out"))
      out = argv[i + 1];
  }
  pr::Graph g;
  std::string err;
  if (!g.load(argv[1], 0, 1, &err)) return fprintf(stderr, "pagerank_ref: %s\n", err.c_str()), 1;
  std::vector<double> rank(g.vertices, 1.0 / static_cast<double>(g.vertices)), contrib(g.vertices);
  auto t0 = std::chrono::steady_clock::now();
  double change = 0;
  for (int it = 0; it < iters; ++it) {
    double dangling = pr::scatter(g, rank.data(), contrib.data());
    change = pr::gather_apply(g, contrib.data(), dangling, rank.data());
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  printf("pagerank_ref: %llu vertices, %llu edges, %d iterations: %.3f s (last L1 change %.2e)\n",
         static_cast<unsigned long long>(g.vertices), static_cast<unsigned long long>(g.edges),
         iters, s, change);
  if (out != nullptr) {
    FILE* f = fopen(out, "wb");
    if (f == nullptr || fwrite(rank.data(), 8, rank.size(), f) != rank.size() || fclose(f) != 0)
      return perror(out), 1;
  }
  return 0;
}
