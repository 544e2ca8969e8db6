"""ltier: remote memory, messaging, RPC and atomics over a cluster.

    import ltier
    with ltier.join(manager="127.0.0.1:7000", secret="s") as eng:
        node = [n for n in eng.nodes() if n != eng.node_id][0]
        with eng.malloc(node, 4096) as lmr:
            lmr.write(0, b"hello")
            print(lmr.read(0, 5))

See bindings/python/README.md and docs/API.md.
"""

import atexit as _atexit

from . import aio
from ._ltier import (ALL, ATOMIC, READ, RW, WRITE, Call, Engine, Event, LockGuard, Lmr, Request,
                     RpcQueue, errname, join, strerror)
from ._ltier import _leave_all
from .errors import *  # noqa: F401,F403
from .errors import __all__ as _errors_all

__version__ = "0.1.0"

# Engines still joined when the interpreter exits leave the cluster then,
# while their handler threads can still take the GIL.
_atexit.register(_leave_all)

__all__ = ["join", "Engine", "Lmr", "Request", "Event", "LockGuard", "Call", "RpcQueue",
           "READ", "WRITE", "ATOMIC", "RW", "ALL", "strerror", "errname", "aio"] + _errors_all
