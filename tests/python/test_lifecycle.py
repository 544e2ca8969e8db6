"""Leaving, requests cut off by leaving, dead peers and signals: errors, no hangs."""

import os
import signal
import threading
import time

import pytest

import ltier
from conftest import SECRET


def test_leave_is_idempotent_and_final(manager):
    eng = ltier.join(manager=manager, secret=SECRET)
    node = eng.node_id
    lmr = eng.malloc(node, 64)
    pending = eng.recv_async(5, max_bytes=64)
    with eng:
        assert repr(eng) == f"<ltier.Engine node {node}>"
    assert eng.closed
    eng.leave()
    with pytest.raises(ltier.NotJoinedError):
        eng.nodes()
    with pytest.raises(ltier.NotJoinedError):
        lmr.read(0, 8)
    with pytest.raises(ltier.ClosedError):
        pending.wait(1)


def test_killed_peer_gives_peer_down_without_hanging(eng, new_peer):
    victim = new_peer()
    lmr = eng.malloc(victim.node, 4096)
    lmr.write(0, b"alive")
    assert eng.rpc(victim.node, 1, b"x") == b"x"
    slow = eng.rpc_async(victim.node, 4, b"30")  # the handler sleeps 30 s
    victim.kill()
    t0 = time.monotonic()
    with pytest.raises(ltier.PeerDownError):
        slow.wait(20)
    while True:  # wait for the manager to declare it down (1 s here)
        ev = eng.member_event(timeout=10)
        if ev.kind == "down" and ev.node == victim.node:
            break
    with pytest.raises(ltier.PeerDownError):
        lmr.read(0, 5)
    with pytest.raises(ltier.PeerDownError):
        eng.rpc(victim.node, 1, b"x")
    assert time.monotonic() - t0 < 15


def test_membership_and_info(eng, peer):
    assert eng.node_id in eng.nodes() and peer.node in eng.nodes()
    info = eng.node_info(peer.node)
    assert info["id"] == peer.node and isinstance(info["name"], str)
    assert eng.node_by_name(info["name"], timeout=1) == peer.node
    name, why = eng.peer_transport(peer.node)
    assert name in ("shm", "tcp") and why
    assert ":" in eng.address
    st = eng.stats()
    assert {"served", "malformed", "transports"} <= set(st)
    with eng.malloc(peer.node, 4096, ltier.ALL) as lmr:
        for _ in range(3):
            lmr.write(0, b"x" * 1000)
    mine = [p for p in eng.peer_stats() if p["node"] == peer.node]
    assert len(mine) == 1 and mine[0]["transport"] == name
    assert mine[0]["tx_ops"] >= 4 and mine[0]["tx_bytes"] >= 3000
    assert mine[0]["rx_ops"] >= 1  # the allocation's answer
    assert eng.metrics_address is None
    with pytest.raises(ltier.UnsupportedError):
        eng.class_stats()


def test_leave_ends_a_blocked_receive_at_once(manager):
    eng = ltier.join(manager=manager, secret=SECRET)
    got = []

    def blocked():
        try:
            eng.recv(42, timeout=None)  # the op timeout is 10 s
        except ltier.Error as e:
            got.append(type(e))

    events = []

    def watching():
        try:
            while True:
                eng.member_event(timeout=None)
        except ltier.Error as e:
            events.append(type(e))

    threads = [threading.Thread(target=blocked), threading.Thread(target=watching)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    t0 = time.monotonic()
    eng.leave()
    for t in threads:
        t.join(5)
    assert got == [ltier.ClosedError]
    assert events in ([ltier.ClosedError], [ltier.NotJoinedError])
    assert time.monotonic() - t0 < 2


class Interrupted(Exception):
    pass


def test_a_signal_interrupts_a_blocked_call(eng):
    def handler(signum, frame):
        raise Interrupted()

    old = signal.signal(signal.SIGUSR1, handler)
    try:
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGUSR1)).start()
        t0 = time.monotonic()
        with pytest.raises(Interrupted):
            eng.recv(43, timeout=20)
        assert time.monotonic() - t0 < 2
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGUSR1)).start()
        req = eng.recv_async(43, None, 64)
        with pytest.raises(Interrupted):
            req.wait(20)
        assert not req.done  # still in flight: a wait may go on
        eng.send(eng.node_id, 43, b"late")
        assert req.wait(5) == (eng.node_id, b"late")
    finally:
        signal.signal(signal.SIGUSR1, old)
