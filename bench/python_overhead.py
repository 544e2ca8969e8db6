#!/usr/bin/python3
"""What the Python module adds per call, and Python messaging against mpi4py.

Rounds alternate, in one run:
  C++     ltier-perf --ops read,rpc,send --sizes 8: 8 B LT_read, LT_RPC echo and
          LT_send + LT_recv of the echo, round trips, against its own server node;
  Python  the same three from Python (lmr.read, eng.rpc, eng.send + eng.recv) against
          the same server code (ltier-perf --serve-node: C++ handlers and echo), landing
          in a reused buffer as the C++ loops do (`into`), and returning new bytes;
  py-py   8 B send + recv round trip between two Python processes (an ltier echo
          written in Python), the like-for-like peer of mpi4py below; and an 8 B rpc to
          a handler written in Python;
  mpi4py  comm.Send + comm.Recv of 8 B numpy buffers between two Python ranks
          (mpirun -np 2; Open MPI picks its shared-memory transport on one host).
Every figure is the median of per-iteration round trips (one clock read per
iteration, as ltier-perf and ucx_perftest take them); the summary gives the
median over rounds and the ratios.

    /usr/bin/python3 bench/python_overhead.py [--build build] [--rounds 5] [--iters 20000]
"""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECRET = "bench-python"


def median_lap_us(fn, iters, warmup):
    """Median time per call of fn, in microseconds."""
    clock = time.perf_counter_ns
    for _ in range(warmup):
        fn()
    laps = [0] * iters
    prev = clock()
    for i in range(iters):
        fn()
        now = clock()
        laps[i] = now - prev
        prev = now
    return statistics.median(laps) / 1000.0


def start_manager(build):
    port_file = tempfile.mktemp(prefix="ltier-bench-py-")
    proc = subprocess.Popen([os.path.join(build, "tools", "ltier-manager"), "--listen",
                             "127.0.0.1:0", "--secret", SECRET, "--port-file", port_file],
                            stderr=subprocess.DEVNULL)
    for _ in range(500):
        if os.path.exists(port_file) and os.path.getsize(port_file) > 0:
            break
        time.sleep(0.01)
    with open(port_file) as f:
        address = f.read().strip()
    os.unlink(port_file)
    return proc, address


def wait_for(eng, count):
    for _ in range(1000):
        if len(eng.nodes()) >= count:
            return [n for n in eng.nodes() if n != eng.node_id]
        time.sleep(0.01)
    raise SystemExit("the peer node did not join")


def cpp_round(build, iters):
    out = subprocess.run([os.path.join(build, "tools", "ltier-perf"), "--ops", "read,rpc,send",
                          "--sizes", "8", "--iters", str(iters)], capture_output=True, text=True,
                         check=True).stdout
    got = {}
    for op in ("read", "rpc", "send"):
        m = re.search(rf"lat op={op} size=8 .*p50_us=([0-9.]+)", out)
        got[op] = float(m.group(1))
    return got


def python_round(build, iters):
    import ltier

    mgr, address = start_manager(build)
    server = subprocess.Popen([os.path.join(build, "tools", "ltier-perf"), "--serve-node", address,
                               SECRET], stdin=subprocess.PIPE)
    echo = None
    try:
        with ltier.join(manager=address, secret=SECRET, listen="127.0.0.1:0") as eng:
            srv = wait_for(eng, 2)[0]
            lmr = eng.malloc(srv, 4096)
            msg, buf = b"12345678", bytearray(64)
            warm = iters // 10 + 1
            # Like for like with ltier-perf's C++ loops, which land in a buffer they
            # reuse: `into` given (positionally); then the forms returning new bytes.
            got = {
                "read": median_lap_us(lambda: lmr.read(0, 8, buf), iters, warm),
                "rpc": median_lap_us(lambda: eng.rpc(srv, 1, msg, buf), iters, warm),
                "send": median_lap_us(lambda: (eng.send(srv, 1, msg), eng.recv(2, None, buf)),
                                      iters, warm),
                "read bytes": median_lap_us(lambda: lmr.read(0, 8), iters, warm),
                "rpc bytes": median_lap_us(lambda: eng.rpc(srv, 1, msg), iters, warm),
                "send bytes": median_lap_us(lambda: (eng.send(srv, 1, msg), eng.recv(2)), iters,
                                            warm),
            }
            lmr.free()
            # The Python peer joins only now: its idle waits would share the two
            # cores with the rows above.
            echo = subprocess.Popen([sys.executable, __file__, "--echo-peer", address])
            py = next(n for n in wait_for(eng, 3) if n != srv)
            got["py-py"] = median_lap_us(lambda: (eng.send(py, 1, msg), eng.recv(2, None, buf)),
                                         iters, warm)
            got["py handler"] = median_lap_us(lambda: eng.rpc(py, 1, msg, buf), iters // 4, warm)
            eng.send(py, 9, b"")  # stops the echo peer
    finally:
        server.stdin.close()
        server.wait(30)
        if echo is not None:
            echo.wait(30)
        mgr.terminate()
        mgr.wait(10)
    return got


def echo_peer(address):
    """Port 1 echoes to the sender's port 2, RPC 1 is a Python echo handler;
    anything on port 9 stops it."""
    import ltier

    os.environ["LTIER_NODE_NAME"] = "py-echo"
    with ltier.join(manager=address, secret=SECRET, listen="127.0.0.1:0") as eng:
        eng.register_rpc(1, lambda src, data: data)
        buf = bytearray(8)  # the size the driver sends, as the mpi4py echo's buffer
        whole = memoryview(buf)
        stop = eng.recv_async(9, None, 8)
        while True:
            try:
                src, n = eng.recv(1, 0.1, buf)
            except ltier.TimedOutError:
                if stop.test():
                    return
                continue
            eng.send(src, 2, buf if n == len(buf) else whole[:n])


def mpi_child(iters):
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    buf = np.zeros(8, dtype=np.uint8)
    if comm.rank == 0:
        def once():
            comm.Send(buf, dest=1, tag=1)
            comm.Recv(buf, source=1, tag=2)

        print(f"mpi4py {median_lap_us(once, iters, iters // 10 + 1):.3f}", flush=True)
        comm.Send(np.ones(8, dtype=np.uint8), dest=1, tag=3)
    else:
        status = MPI.Status()
        while True:
            comm.Recv(buf, source=0, tag=MPI.ANY_TAG, status=status)
            if status.Get_tag() == 3:
                break
            comm.Send(buf, dest=0, tag=2)


def mpi_round(iters):
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        return None
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return None
    out = subprocess.run([mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2",
                          sys.executable, __file__, "--mpi-child", str(iters)],
                         capture_output=True, text=True, timeout=300)
    m = re.search(r"mpi4py ([0-9.]+)", out.stdout)
    if not m:
        print(out.stdout, out.stderr, file=sys.stderr)
        return None
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--echo-peer")
    ap.add_argument("--mpi-child", type=int)
    a = ap.parse_args()
    if a.echo_peer:
        return echo_peer(a.echo_peer)
    if a.mpi_child:
        return mpi_child(a.mpi_child)
    for v in [k for k in os.environ if k.startswith("LTIER_")]:
        del os.environ[v]
    # This process and the peers it starts (echo peer, mpirun's ranks) import ltier from the build.
    pypath = os.path.join(a.build, "bindings", "python")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [pypath, os.environ.get("PYTHONPATH")]))
    sys.path.insert(0, pypath)
    rows = {k: [] for k in ("cpp read", "py read", "cpp rpc", "py rpc", "cpp send", "py send",
                            "py read bytes", "py rpc bytes", "py send bytes", "py-py send",
                            "mpi4py", "py-py rpc")}
    for r in range(a.rounds):
        c = cpp_round(a.build, a.iters)
        p = python_round(a.build, a.iters)
        m = mpi_round(a.iters)
        for op in ("read", "rpc", "send"):
            rows[f"cpp {op}"].append(c[op])
            rows[f"py {op}"].append(p[op])
            rows[f"py {op} bytes"].append(p[f"{op} bytes"])
        rows["py-py send"].append(p["py-py"])
        rows["py-py rpc"].append(p["py handler"])
        if m is not None:
            rows["mpi4py"].append(m)
        print(f"round {r + 1}: " + "  ".join(f"{k}={v[-1]:.2f}" for k, v in rows.items() if v),
              flush=True)
    med = {k: statistics.median(v) for k, v in rows.items() if v}
    print("\nmedian round trip over rounds (us), 8 B:")
    for op in ("read", "rpc", "send"):
        print(f"  {op:5s} C++ {med[f'cpp {op}']:7.2f}  Python {med[f'py {op}']:7.2f}  "
              f"added {med[f'py {op}'] - med[f'cpp {op}']:+.2f} us  (returning new bytes: "
              f"{med[f'py {op} bytes']:.2f}, added {med[f'py {op} bytes'] - med[f'cpp {op}']:+.2f})")
    print(f"  rpc to a Python handler (Python caller): {med['py-py rpc']:.2f}")
    if "mpi4py" in med:
        print(f"  send/recv Python<->Python: ltier {med['py-py send']:.2f}  mpi4py "
              f"{med['mpi4py']:.2f}  ratio {med['py-py send'] / med['mpi4py']:.2f}x")
    else:
        print(f"  send/recv Python<->Python: ltier {med['py-py send']:.2f} (no mpi4py here)")


if __name__ == "__main__":
    main()
