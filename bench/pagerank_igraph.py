#!/usr/bin/python3
"""igraph's PageRank (PRPACK) on a gen_graph edge file: the peer of
examples/pagerank. Prints the time of Graph.pagerank alone (the graph is
built first, as the ltier ranks load theirs before their clock starts) and,
given the single-process reference's ranks (pagerank_ref --out), the L1
distance between the two (the reference iterates a fixed number of times;
PRPACK solves the system).

    /usr/bin/python3 bench/pagerank_igraph.py GRAPH [RANKS]

Needs Debian's python3-igraph and python3-numpy.
"""

import sys
import time

import numpy as np


def main():
    import igraph as ig

    path = sys.argv[1]
    with open(path, "rb") as f:
        magic = f.read(8)
        if magic != b"ltiergr1":
            raise SystemExit(f"{path} is not a gen_graph edge file")
        n, m = np.frombuffer(f.read(16), dtype=np.uint64)
        edges = np.fromfile(f, dtype=np.uint32, count=2 * int(m)).reshape(-1, 2)
    t0 = time.perf_counter()
    g = ig.Graph(n=int(n), edges=edges, directed=True)
    built = time.perf_counter() - t0
    t0 = time.perf_counter()
    ranks = np.asarray(g.pagerank(damping=0.85, directed=True))
    secs = time.perf_counter() - t0
    line = (f"igraph: {int(n)} vertices, {int(m)} edges: pagerank {secs:.3f} s "
            f"(graph built in {built:.1f} s)")
    if len(sys.argv) > 2:
        ref = np.fromfile(sys.argv[2], dtype=np.float64)
        line += f"; L1 distance to the reference's ranks {np.abs(ref - ranks).sum():.2e}"
    print(line)


if __name__ == "__main__":
    main()
