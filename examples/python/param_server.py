#!/usr/bin/python3
"""A parameter server in ltier's Python API: every rank adds numpy updates
into one shared parameter vector held in remote memory.

Rank 0 allocates the parameters (float64) in an LMR and publishes it; every
rank, rank 0 included, maps it, and at each step reads the current parameters
straight into a numpy array, computes its update, and adds it under a
cluster-wide lock (read, add, write back). A barrier closes each step. The
updates depend only on (rank, step), so the result does not depend on the
order the ranks took the lock in: rank 0 checks it against the same sums done
locally (a lost update would be off by a whole update).

    PYTHONPATH=build/bindings/python \\
      build/tools/ltier-run -n 3 -- /usr/bin/python3 examples/python/param_server.py [DIM] [STEPS]
"""

import os
import sys

import numpy as np

import ltier


def update(dim, rank, step):
    """This rank's contribution at this step (a stand-in for a gradient)."""
    return 0.001 * (rank + 1) * np.cos(np.arange(dim) * 1e-3 + step)


def main():
    dim = int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 16
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    rank, nprocs = int(os.environ["LTIER_RANK"]), int(os.environ["LTIER_NPROCS"])
    start = np.linspace(0.0, 1.0, dim)
    with ltier.join() as eng:                                   # ltier call
        if rank == 0:
            owner = eng.malloc(eng.node_id, dim * 8)            # ltier call
            owner.write(0, start)                               # ltier call
            owner.publish("params")                             # ltier call
        eng.barrier("published", nprocs)                        # ltier call
        params = eng.map("params")                              # ltier call
        view = np.empty(dim)
        for step in range(steps):
            params.read(0, None, view)                          # ltier call: the model now
            delta = update(dim, rank, step)
            with eng.lock("params"):                            # ltier call
                params.read(0, None, view)                      # ltier call
                params.write(0, view + delta)                   # ltier call
            eng.barrier(f"step-{step}", nprocs)                 # ltier call
        if rank == 0:
            params.read(0, None, view)                          # ltier call
            expect = start + sum(update(dim, r, s) for s in range(steps) for r in range(nprocs))
            ok = np.allclose(view, expect, rtol=1e-12, atol=1e-12)
            print(f"{nprocs} ranks x {steps} steps on {dim} parameters: "
                  f"{'sum matches' if ok else 'WRONG SUM'} (mean {view.mean():.6f})")
        params.unmap()                                          # ltier call
        eng.barrier("done", nprocs)                             # ltier call
        if rank == 0:
            owner.free()                                        # ltier call
            if not ok:
                sys.exit(1)


if __name__ == "__main__":
    main()
