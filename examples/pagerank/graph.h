// The PageRank example's graph: the edge file gen_graph writes (a header,
// then src/dst pairs of u32), and the in-edge CSR of a range of destination
// vertices that one rank gathers over.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace pr {

struct EdgeFileHeader {
  char magic[8];  // "ltiergr1"
  uint64_t vertices;
  uint64_t edges;
};

struct Edge {
  uint32_t src, dst;
};

/// Vertices [begin(r), begin(r + 1)) belong to rank r of n.
inline uint64_t range_begin(uint64_t vertices, int r, int n) {
  return vertices * static_cast<uint64_t>(r) / static_cast<uint64_t>(n);
}

/// The in-edges of destinations [lo, hi), grouped by destination, plus every
/// vertex's out-degree (the whole graph's: a gather divides by it).
struct Graph {
  uint64_t vertices = 0, edges = 0;
  uint64_t lo = 0, hi = 0;
  std::vector<uint64_t> offset;  // hi - lo + 1 entries into src
  std::vector<uint32_t> src;     // sources of the in-edges of lo, lo + 1, ...
  std::vector<uint32_t> out_degree;

  /// Reads `path` and keeps the in-edges of [lo, hi) (hi 0: every vertex).
  /// The edge order within a destination is the file's, whoever reads it, so
  /// every rank sums a vertex's contributions in the reference's order.
  bool load(const std::string& path, int rank, int nranks, std::string* err) {
    FILE* f = fopen(path.c_str(), "rb");
    if (f == nullptr) return *err = "cannot open " + path, false;
    EdgeFileHeader h;
    if (fread(&h, sizeof h, 1, f) != 1 || std::string(h.magic, 8) != "ltiergr1") {
      fclose(f);
      return *err = path + " is not a gen_graph edge file", false;
    }
    vertices = h.vertices;
    edges = h.edges;
    lo = range_begin(vertices, rank, nranks);
    hi = range_begin(vertices, rank + 1, nranks);
    out_degree.assign(vertices, 0);
    std::vector<uint32_t> in_count(hi - lo, 0);
    std::vector<Edge> mine;
    std::vector<Edge> chunk(1 << 20);
    for (uint64_t left = edges; left > 0;) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(left, chunk.size()));
      if (fread(chunk.data(), sizeof(Edge), n, f) != n) {
        fclose(f);
        return *err = path + " is truncated", false;
      }
      for (size_t i = 0; i < n; ++i) {
        const Edge& e = chunk[i];
        ++out_degree[e.src];
        if (e.dst >= lo && e.dst < hi) {
          ++in_count[e.dst - lo];
          mine.push_back(e);
        }
      }
      left -= n;
    }
    fclose(f);
    offset.assign(hi - lo + 1, 0);
    for (uint64_t v = 0; v < hi - lo; ++v) offset[v + 1] = offset[v] + in_count[v];
    src.resize(mine.size());
    std::vector<uint64_t> at(offset.begin(), offset.end() - 1);
    for (const Edge& e : mine) src[at[e.dst - lo]++] = e.src;
    return true;
  }
};

}  // namespace pr
