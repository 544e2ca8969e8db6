"""send/recv from Python to a peer process and back."""

import numpy as np
import pytest

import ltier

ECHO_PORT, ECHO_REPLY_PORT = 1, 2


def test_send_recv_every_buffer_kind(eng, peer):
    for data in [b"x", bytearray(b"bytearray"), memoryview(b"view"),
                 np.arange(100, dtype=np.int16), b"y" * (1 << 20)]:
        eng.send(peer.node, ECHO_PORT, data)
        src, got = eng.recv(ECHO_REPLY_PORT, timeout=10)
        assert src == peer.node
        assert got == bytes(memoryview(data).cast("B"))


def test_recv_into_and_truncation(eng, peer):
    eng.send(peer.node, ECHO_PORT, b"0123456789")
    buf = bytearray(32)
    src, n = eng.recv(ECHO_REPLY_PORT, timeout=10, into=buf)
    assert (src, n, bytes(buf[:n])) == (peer.node, 10, b"0123456789")
    eng.send(peer.node, ECHO_PORT, b"a longer message")
    with pytest.raises(ltier.TruncatedError) as err:
        eng.recv(ECHO_REPLY_PORT, timeout=10, max_bytes=4)
    assert err.value.needed == 16
    with pytest.raises(ltier.TimedOutError):  # it was consumed
        eng.recv(ECHO_REPLY_PORT, timeout=0.05)


def test_messages_from_the_peer_and_order(eng, peer):
    for i in range(20):
        assert peer.cmd(f"send {eng.node_id} 7 {i:04x}") == "ok"
    got = [eng.recv(7, timeout=10) for _ in range(20)]
    assert [d for _, d in got] == [bytes.fromhex(f"{i:04x}") for i in range(20)]


def test_async_send_and_recv(eng, peer):
    r = eng.recv_async(ECHO_REPLY_PORT, max_bytes=64)
    assert not r.test()
    s = eng.send_async(peer.node, ECHO_PORT, bytearray(b"async"))
    assert s.done  # an eager message is complete at the call
    assert s.wait() is None and s.wait() is None
    assert r.wait(10) == (peer.node, b"async")
    buf = np.zeros(8, dtype=np.uint8)
    r = eng.recv_async(ECHO_REPLY_PORT, into=buf)
    eng.send(peer.node, ECHO_PORT, b"\x01\x02")
    assert r.wait(10) == (peer.node, 2)
    assert list(buf[:2]) == [1, 2]


def test_recv_async_of_a_waiting_message_is_done_at_the_call(eng, peer):
    for i in range(3):
        assert peer.cmd(f"send {eng.node_id} 8 {i:02x}") == "ok"
    assert peer.cmd(f"send {eng.node_id} 9 ff") == "ok"
    assert eng.recv(9, timeout=10) == (peer.node, b"\xff")  # port 8's three wait now
    r = eng.recv_async(8, max_bytes=8)
    assert r.done
    assert r.wait() == (peer.node, b"\x00")
    buf = bytearray(4)
    r = eng.recv_async(8, into=buf)
    assert r.done and r.wait() == (peer.node, 1) and buf[0] == 1
    assert eng.recv(8, timeout=10) == (peer.node, b"\x02")
    pending = eng.recv_async(8, max_bytes=8)
    assert not pending.done  # nothing waits: it is a request
    with pytest.raises(ltier.TimedOutError):
        pending.wait(0.01)


def test_recv_timeout(eng):
    with pytest.raises(ltier.TimedOutError):
        eng.recv(99, timeout=0.01)
    with pytest.raises(ltier.TimedOutError):
        eng.recv(99, timeout=0)
    with pytest.raises(ltier.InvalidArgumentError):
        eng.recv(99, timeout=-1)
