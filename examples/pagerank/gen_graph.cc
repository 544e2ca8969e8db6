// A power-law directed graph by R-MAT (Chakrabarti et al.; Graph500's
// parameters a=0.57, b=0.19, c=0.19): 2^SCALE vertices and EDGE_FACTOR x
// 2^SCALE edges, each placed by descending SCALE levels of the adjacency
// matrix's quadrants; self-loops are drawn again, duplicates kept (a
// multigraph, as Graph500's). Vertex ids are then relabelled by a seeded
// permutation so the heavy vertices are not all at low ids. Same arguments,
// same file.
//
//   gen_graph [--seed N] [--edge-factor K] OUT SCALE
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "graph.h"

namespace {

// splitmix64: a fast, well-mixed stream from one seed.
struct Rng {
  uint64_t s;
  uint64_t operator()() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
};

pr::Edge rmat_edge(Rng& rng, int scale) {
  // Quadrant thresholds on a 32-bit draw: a | b | c | d.
  constexpr uint64_t kA = 2448131358ull;    // 0.57 * 2^32
  constexpr uint64_t kAB = 3264175145ull;   // 0.76
  constexpr uint64_t kABC = 4080218931ull;  // 0.95
  for (;;) {
    uint32_t src = 0, dst = 0;
    for (int level = 0; level < scale; level += 2) {
      uint64_t x = rng();
      for (int k = 0; k < 2 && level + k < scale; ++k) {
        uint64_t q = (x >> (32 * k)) & 0xffffffffu;
        src = src << 1 | (q >= kAB);
        dst = dst << 1 | ((q >= kA && q < kAB) || q >= kABC);
      }
    }
    if (src != dst) return {src, dst};
  }
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t seed = 1, edge_factor = 16;
  int i = 1;
  for (; i + 1 < argc && argv[i][0] == '-'; i += 2) {
    if (!std::strcmp(argv[i], "--seed"))
      seed = std::strtoull(argv[i + 1], nullptr, 10);
    else if (!std::strcmp(argv[i], "--edge-factor"))
      edge_factor = std::strtoull(argv[i + 1], nullptr, 10);
    else
      break;
  }
  if (argc - i != 2)
    return fprintf(stderr, "usage: gen_graph [--seed N] [--edge-factor K] OUT SCALE\n"), 2;
  int scale = atoi(argv[i + 1]);
  if (scale < 2 || scale > 31) return fprintf(stderr, "gen_graph: SCALE must be 2..31\n"), 2;
  uint64_t n = 1ull << scale, m = edge_factor * n;
  std::vector<uint32_t> label(n);
  std::iota(label.begin(), label.end(), 0u);
  std::shuffle(label.begin(), label.end(), std::mt19937_64(seed));
  FILE* out = fopen(argv[i], "wb");
  if (out == nullptr) return perror(argv[i]), 1;
  pr::EdgeFileHeader h{};
  std::memcpy(h.magic, "ltiergr1", 8);
  h.vertices = n;
  h.edges = m;
  fwrite(&h, sizeof h, 1, out);
  Rng rng{seed * 0x2545f4914f6cdd1dull + 1};
  std::vector<pr::Edge> chunk;
  chunk.reserve(1 << 20);
  for (uint64_t k = 0; k < m; ++k) {
    pr::Edge e = rmat_edge(rng, scale);
    chunk.push_back({label[e.src], label[e.dst]});
    if (chunk.size() == chunk.capacity() || k + 1 == m) {
      fwrite(chunk.data(), sizeof(pr::Edge), chunk.size(), out);
      chunk.clear();
    }
  }
  if (fclose(out) != 0) return perror(argv[i]), 1;
  printf("gen_graph: %s, %llu vertices, %llu edges (R-MAT scale %d, seed %llu)\n", argv[i],
         static_cast<unsigned long long>(n), static_cast<unsigned long long>(m), scale,
         static_cast<unsigned long long>(seed));
  return 0;
}
