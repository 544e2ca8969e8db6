"""asyncio: awaiting requests without a thread per call."""

import asyncio
import threading

import pytest

import ltier

ECHO, RAISES, SLEEPS = 1, 2, 4


def test_await_many_operations(eng, peer):
    lmr = eng.malloc(peer.node, 4096, ltier.ALL)

    async def main():
        await lmr.write_async(0, b"async data")
        got = await lmr.read_async(0, 10)
        replies = await ltier.aio.gather(*(eng.rpc_async(peer.node, ECHO, bytes([i]))
                                          for i in range(40)))
        old = await lmr.fetch_add_async(16, 5)
        assert await eng.send_async(peer.node, 77, b"eager") is None  # complete at the call
        return got, replies, old

    before = threading.active_count()
    got, replies, old = asyncio.run(main())
    assert got == b"async data"
    assert replies == [bytes([i]) for i in range(40)]
    assert old == 0
    assert threading.active_count() <= before + 1  # at most the one completion thread


def test_await_raises_the_error(eng, peer):
    async def main():
        with pytest.raises(ltier.InternalError):
            await eng.rpc_async(peer.node, RAISES, b"")
        with pytest.raises(ltier.OutOfBoundsError):
            lmr = eng.malloc(peer.node, 16)
            await lmr.read_async(8, 16)

    asyncio.run(main())


def test_event_loop_stays_free_while_waiting(eng, peer):
    async def ticker(n):
        for _ in range(n):
            await asyncio.sleep(0.001)
        return n

    async def main():
        slow = eng.rpc_async(peer.node, SLEEPS, b"0.2")
        ticks, reply = await asyncio.gather(ticker(50), slow)
        return ticks, reply

    assert asyncio.run(main()) == (50, b"slept")


def test_a_request_cannot_be_awaited_and_waited(eng, peer):
    async def main():
        r = eng.rpc_async(peer.node, SLEEPS, b"0.1")
        task = asyncio.ensure_future(r)
        await asyncio.sleep(0.01)
        with pytest.raises(ltier.InvalidArgumentError):
            r.wait(0)
        assert await task == b"slept"

    asyncio.run(main())
