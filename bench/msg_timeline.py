#!/usr/bin/env python3
"""Where a message's one-way time goes, from trace points (common/trace_points.h).

Each DIR holds the trace.<pid> files of one run of a message ping-pong built
with -DLTIER_TRACE_POINTS=ON and run with LTIER_TRACE_DIR=DIR:

  LTIER_TRANSPORTS=shm,tcp LTIER_TRACE_DIR=DIR ltier-perf --ops send --sizes 8

Both processes send and receive in turn (the client LT_sends and LT_recvs the
echo; the server's echo loop LT_recvs and LT_sends it back), so each one-way
trip is the same chain of points, on the sender and then on the receiver:

  sender   M -> n      LT_send entered to the endpoint found and the credit taken
  sender   n -> t      the eager message built, down to the shm post
  sender   t -> w      the post's checks, the send lock, the record written and stamped
  sender   w -> u      the post returning: unlock, the barrier, the bell check
  sender w -> receiver d   the stamp seen by the receiver's poll (the line's
                       transfer, plus the rest of the poll pass it landed in)
  receiver d -> v      the poll's completion handed to proto and dispatched
  receiver v -> f      port matching, the credit, the copy, the receive completed
  receiver f -> g      back out of the progress pass to the waiter's spin
  receiver g -> Z      the wait's end: the request collected, LT_recv returning
  receiver Z -> M      the application's turn (the client times its lap here)

Each segment is taken per process from consecutive points (points of other
threads, the progress thread's, are skipped), the first tenth of each run
left out as warm-up, and printed as its median and quartiles per process in
nanoseconds. A point costs a counter read and a locked add (20-30 ns on a
Zen 1 VM), which every segment includes once: the Z -> M row of the server, where almost
nothing runs, shows it.

  bench/msg_timeline.py DIR [DIR ...]
"""
import argparse
import bisect

from trace_records import read_run

SEGMENTS = [
    ("M", "n", "LT_send to endpoint and credit"),
    ("n", "t", "message built, to the shm post"),
    ("t", "w", "post: checks, lock, record stamped"),
    ("w", "u", "post returning (unlock, barrier, bell)"),
    ("d", "v", "poll's completion to arrive()"),
    ("v", "f", "matched, copied, receive completed"),
    ("f", "g", "out of the pass to the waiter"),
    ("g", "Z", "wait's end to LT_recv returning"),
    ("Z", "M", "application's turn"),
]


def load(directory):
    """Per process: its records by time, (ns, tid, letter), warm-up left out."""
    return {pid: recs[len(recs) // 10:] for pid, recs in read_run(directory).items()}


def segments(recs):
    """Durations of each SEGMENTS pair, from consecutive points of one thread."""
    out = {(a, b): [] for a, b, _ in SEGMENTS}
    last = {}
    for ns, tid, letter in recs:
        prev = last.get(tid)
        if prev is not None and (prev[1], letter) in out:
            out[(prev[1], letter)].append(ns - prev[0])
        last[tid] = (ns, letter)
    return out


def transfers(src, dst):
    """w in `src` to the first d in `dst` after it (before src's next w)."""
    ws = [ns for ns, _, letter in src if letter == "w"]
    ds = [ns for ns, _, letter in dst if letter == "d"]
    out = []
    for i, w in enumerate(ws):
        j = bisect.bisect_left(ds, w)
        if j < len(ds) and (i + 1 == len(ws) or ds[j] < ws[i + 1]):
            out.append(ds[j] - w)
    return out


def quartiles(values):
    v = sorted(values)
    n = len(v)
    return (v[n // 4], v[n // 2], v[(3 * n) // 4]) if n else (0, 0, 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="+")
    args = ap.parse_args()
    for d in args.dirs:
        procs = load(d)
        if len(procs) != 2:
            print("%s: expected two processes, found %d" % (d, len(procs)))
            continue
        pids = sorted(procs)  # the client starts first
        segs = {pid: segments(procs[pid]) for pid in pids}
        print("%s: p50 ns (quartiles), per process" % d)
        print("  %-42s %20s %20s" % ("segment", "client", "server"))
        total = {pid: 0 for pid in pids}
        for a, b, what in SEGMENTS:
            cells = []
            for pid in pids:
                q1, med, q3 = quartiles(segs[pid][(a, b)])
                if (a, b) != ("w", "u"):
                    total[pid] += med
                cells.append("%6d (%d-%d)" % (med, q1, q3))
            print("  %-42s %20s %20s" % ("%s -> %s %s" % (a, b, what), cells[0], cells[1]))
            if (a, b) == ("w", "u"):
                cells = []
                for src, dst in ((pids[1], pids[0]), (pids[0], pids[1])):
                    q1, med, q3 = quartiles(transfers(procs[src], procs[dst]))
                    total[dst] += med
                    cells.append("%6d (%d-%d)" % (med, q1, q3))
                print("  %-42s %20s %20s" % ("peer's w -> d: stamp seen by the poll", *cells))
        print("  %-42s %20s %20s" % ("sum of the medians but w -> u",
                                     "%6d" % total[pids[0]], "%6d" % total[pids[1]]))
        print("  (w -> u runs beside the transfer, off the critical path; the two")
        print("  sums add up to about a round trip, the points' own cost included)")


if __name__ == "__main__":
    main()
