// PageRank in the gather-apply-scatter form of PowerGraph, the part every
// rank and the single-process reference share. Each iteration:
//   scatter  contrib[u] = rank[u] / out_degree[u] for the vertices a rank owns
//            (what its out-edges carry), and the rank mass of its dangling
//            vertices (no out-edges), which is spread over every vertex;
//   gather   for each owned vertex v, the sum of contrib[u] over its in-edges;
//   apply    rank[v] = (1 - d) / N + d * (gathered + dangling / N).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "graph.h"

namespace pr {

constexpr double kDamping = 0.85;

/// Scatter for owned vertices [g.lo, g.hi): fills contrib[0, hi - lo) and
/// returns the owned dangling mass.
inline double scatter(const Graph& g, const double* rank, double* contrib) {
  double dangling = 0;
  for (uint64_t v = g.lo; v < g.hi; ++v) {
    uint32_t deg = g.out_degree[v];
    double r = rank[v - g.lo];
    if (deg == 0) {
      dangling += r;
      contrib[v - g.lo] = 0;
    } else {
      contrib[v - g.lo] = r / deg;
    }
  }
  return dangling;
}

/// Gather and apply for owned vertices, from every vertex's contribution
/// (all_contrib indexed by global vertex id); returns the L1 change.
inline double gather_apply(const Graph& g, const double* all_contrib, double dangling,
                           double* rank) {
  double n = static_cast<double>(g.vertices);
  double base = (1.0 - kDamping) / n + kDamping * dangling / n;
  double change = 0;
  for (uint64_t v = g.lo; v < g.hi; ++v) {
    uint64_t b = g.offset[v - g.lo], e = g.offset[v - g.lo + 1];
    double sum = 0;
    for (uint64_t i = b; i < e; ++i) sum += all_contrib[g.src[i]];
    double r = base + kDamping * sum;
    change += std::fabs(r - rank[v - g.lo]);
    rank[v - g.lo] = r;
  }
  return change;
}

}  // namespace pr
