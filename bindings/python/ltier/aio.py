"""asyncio for ltier: ``await`` any Request.

    data = await lmr.read_async(0, 8)
    reply = await engine.rpc_async(node, 7, b"ping")

Awaited requests are completed by one thread per engine (started at the first
await), which tests them and sleeps in LT_wait on the oldest when none is
ready; the event loop is woken with ``call_soon_threadsafe``. No thread is
spent per call. Cancelling the awaiting task does not cancel the operation: it
completes (or fails) on its own and its result is dropped.
"""

from __future__ import annotations

import asyncio
from typing import Any


def _settle(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


async def _await(req: Any) -> Any:
    loop = asyncio.get_running_loop()
    fut = loop.create_future()

    def done() -> None:  # on the completion thread, with the GIL
        try:
            loop.call_soon_threadsafe(_settle, fut)
        except RuntimeError:  # the loop is closed: nobody is waiting
            pass

    req._watch(done)
    await fut
    return req.wait(0)


async def gather(*requests: Any) -> list:
    """Awaits several requests at once; results in order (the first error raises)."""
    return list(await asyncio.gather(*(_await(r) for r in requests)))
