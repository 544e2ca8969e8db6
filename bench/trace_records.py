"""Reads the trace.<pid> files of one run (common/trace_points.h).

Each file holds 16-byte records (ticks, letter, thread), zeros after the
last; the first record, letter '#', gives the ticks per second that process
measured (the time-stamp counter's rate, or 1e9 where the ticks are ns).
"""
import glob
import os
import struct


def read_run(directory):
    """{pid: [(ns, tid, letter), ...] by time} for every file of the run.

    One rate converts every process's ticks: the counter is the machine's,
    and each process's own measurement of its rate differs a little, which,
    over the counter's whole value, would shift the processes apart by
    seconds.
    """
    raw, rates = {}, []
    for path in glob.glob(os.path.join(directory, "trace.*")):
        pid = int(path.rsplit(".", 1)[1])
        with open(path, "rb") as f:
            data = f.read()
        recs = []
        for off in range(0, len(data), 16):
            ticks, letter, tid = struct.unpack_from("<QII", data, off)
            if ticks == 0:
                break
            if chr(letter) == "#":
                rates.append(ticks)
                continue
            recs.append((ticks, tid, chr(letter)))
        raw[pid] = recs
    per_ns = sorted(rates)[len(rates) // 2] / 1e9 if rates else 1.0
    return {pid: sorted((int(t / per_ns), tid, letter) for t, tid, letter in recs)
            for pid, recs in raw.items()}
