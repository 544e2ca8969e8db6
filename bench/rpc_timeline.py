#!/usr/bin/env python3
"""Where an RPC round trip's time goes, from trace points (common/trace_points.h).

Each DIR holds the trace.<pid> files of one run of a two-process ping-pong
built with -DLTIER_TRACE_POINTS=ON and run with LTIER_TRACE_DIR=DIR: ltier-perf
--ops rpc (client and server node), or bench/rc_imm_lat (the raw-verbs floor).
The client is the process with round-trip points (B, E); the other is the
server. For each round trip whose points are all there (the first tenth left
out as warm-up) it takes, in order:

  client B -> p       the call, up to the request's post
  client p -> q       the request's post (on Soft-RoCE the whole send runs in it)
  client p -> server r  the request's post to the server's poll finding it
  server r -> p       the server: the request found to its reply posted
  server p -> client r  the reply's post to the client's poll finding it
  client r -> E       the reply found to the call's return

and prints the median and quartiles of each, in microseconds.

  bench/rpc_timeline.py [--show N] DIR [DIR ...]
"""
import argparse
import sys

from trace_records import read_run

PHASES = [
    ("client: call to request post", "B", "Cp"),
    ("client: request post (syscall)", "Cp", "Cq"),
    ("request post to server poll finds it", "Cp", "Sr"),
    ("server: request found to reply post", "Sr", "Sp"),
    ("reply post to client poll finds it", "Sp", "Cr"),
    ("client: reply found to return", "Cr", "E"),
    ("round trip", "B", "E"),
]


def load(directory):
    """All records of a run, by time: (ns, pid, tid, letter)."""
    return sorted((ns, pid, tid, letter) for pid, recs in read_run(directory).items()
                  for ns, tid, letter in recs)


def round_trips(records):
    """Lists of (ns, side, letter) from each client B to its E."""
    clients = {pid for _, pid, _, letter in records if letter == "B"}
    if len(clients) != 1:
        sys.exit("expected one client process (with B points), found %d" % len(clients))
    client = clients.pop()
    trips, cur = [], None
    for ns, pid, _, letter in records:
        side = "C" if pid == client else "S"
        if side == "C" and letter == "B":
            cur = [(ns, "C", "B")]
        elif cur is not None:
            cur.append((ns, side, letter))
            if side == "C" and letter == "E":
                trips.append(cur)
                cur = None
    return trips[len(trips) // 10:]


def marks(trip):
    """Each point's time along the causal chain, or None if one is missing.

    The server's reply post returns after the client has its reply (inside
    the next round trip), so it is not used.
    """
    found = {"B": trip[0][0], "E": trip[-1][0]}
    after = found["B"]
    for key in ["Cp", "Sr", "Sp", "Cr"]:
        after = next((ns for ns, side, letter in trip if side + letter == key and ns >= after), None)
        if after is None:
            return None
        found[key] = after
    found["Cq"] = next((ns for ns, side, letter in trip if side + letter == "Cq"), None)
    return found if found["Cq"] is not None else None


def quartiles(values):
    v = sorted(values)
    n = len(v)
    return v[n // 4] / 1000, v[n // 2] / 1000, v[(3 * n) // 4] / 1000


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--show", type=int, default=0, help="print N round trips' points")
    ap.add_argument("dirs", nargs="+")
    args = ap.parse_args()
    for d in args.dirs:
        trips = round_trips(load(d))
        found = [m for m in (marks(t) for t in trips) if m is not None]
        print("%s: %d round trips, %d with every point" % (d, len(trips), len(found)))
        if not found:
            continue
        for name, a, b in PHASES:
            q1, med, q3 = quartiles([m[b] - m[a] for m in found])
            print("  %-40s p50 %7.2f us  (quartiles %.2f-%.2f)" % (name, med, q1, q3))
        for t in trips[len(trips) // 2:len(trips) // 2 + args.show]:
            t0 = t[0][0]
            print("   " + " ".join("%s%s@%.1f" % (s, l, (ns - t0) / 1000) for ns, s, l in t
                               if l != "e"))


if __name__ == "__main__":
    main()
