#!/usr/bin/python3
"""The README's Python quick start: join, allocate 4 KiB on another node,
write, read back. Needs a running cluster (LTIER_MANAGER, LTIER_SECRET) with
at least one other node, and PYTHONPATH=build/bindings/python."""

import ltier

with ltier.join() as eng:
    lmr = eng.malloc(min(n for n in eng.nodes() if n != eng.node_id), 4096)
    lmr.write(0, b"hello, remote memory")
    print(lmr.read(0, 20))
