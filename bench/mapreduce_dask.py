#!/usr/bin/python3
"""The word-count peer for examples/mapreduce: the same count with Dask on a
local cluster of N single-threaded worker processes (dask.distributed), over
the same file, split on whitespace as wordcount's tokenizer does.

    /usr/bin/python3 bench/mapreduce_dask.py CORPUS [--workers 3] [--blocksize BYTES]

(default blocksize: one block per worker, as wordcount gives each rank one share).
Each block is counted with collections.Counter (map_partitions, the combiner)
and the per-block counters are summed in a tree (Bag.reduction): faster here
than Bag.frequencies, which the --frequencies flag picks instead.

Prints the time from submitting the graph to having every count at the client
(the cluster is started before the clock starts, as ltier's ranks are joined
before wordcount's clock starts), the total and distinct words. Needs Debian's
python3-dask and python3-distributed.
"""

import argparse
import time


def count_block(lines):
    from collections import Counter

    c = Counter()
    for line in lines:
        c.update(line.split())
    return c


def sum_counters(counters):
    from collections import Counter

    total = Counter()
    for c in counters:
        total.update(c)
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus")
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--blocksize", type=int, default=0)
    ap.add_argument("--frequencies", action="store_true")
    a = ap.parse_args()
    import os

    import dask.bag as db
    from dask.distributed import Client, LocalCluster

    with LocalCluster(n_workers=a.workers, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        client.wait_for_workers(a.workers)
        block = a.blocksize or -(-os.path.getsize(a.corpus) // a.workers)
        lines = db.read_text(a.corpus, blocksize=block)
        t0 = time.perf_counter()
        if a.frequencies:
            counts = dict(lines.str.split().flatten().frequencies().compute())
        else:
            counts = lines.reduction(count_block, sum_counters, split_every=a.workers).compute()
        secs = time.perf_counter() - t0
    total = sum(counts.values())
    print(f"dask: {a.workers} workers, {total} words, {len(counts)} distinct: {secs:.3f} s")


if __name__ == "__main__":
    main()
