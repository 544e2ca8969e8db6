"""send, recv, rpc, Lmr.read and Lmr.write have two ways in: plain positional
calls take a vectorcall entry, anything else (keywords, int subclasses, wrong
types) goes through pybind11. Both must give the same results and errors."""

import enum

import numpy as np
import pytest

import ltier

ECHO_PORT, ECHO_REPLY_PORT = 1, 2
ECHO, NO_SUCH_FUNC = 1, 77


class Port(enum.IntEnum):
    ECHO = ECHO_PORT
    REPLY = ECHO_REPLY_PORT


@pytest.fixture
def remote(eng, peer):
    with eng.malloc(peer.node, 4096, ltier.ALL) as lmr:
        yield lmr


def test_send_and_recv_in_every_form(eng, peer):
    buf = bytearray(16)
    eng.send(peer.node, ECHO_PORT, b"one")
    assert eng.recv(ECHO_REPLY_PORT) == (peer.node, b"one")
    eng.send(node=peer.node, port=ECHO_PORT, data=b"two")
    assert eng.recv(ECHO_REPLY_PORT, 10) == (peer.node, b"two")
    eng.send(np.uint32(peer.node), Port.ECHO, bytearray(b"three"))
    assert eng.recv(Port.REPLY, 10, buf) == (peer.node, 5) and buf[:5] == b"three"
    eng.send(peer.node, ECHO_PORT, b"four")
    assert eng.recv(ECHO_REPLY_PORT, 10, None, 16) == (peer.node, b"four")
    eng.send(peer.node, ECHO_PORT, b"five")
    assert eng.recv(port=ECHO_REPLY_PORT, timeout=10, into=buf) == (peer.node, 4)


def test_read_and_write_in_every_form(remote):
    remote.write(0, b"abcdefgh")
    remote.write(offset=8, data=np.arange(2, dtype=np.int32))
    assert remote.read(0, 8) == b"abcdefgh"
    assert remote.read(offset=8, length=8) == np.arange(2, dtype=np.int32).tobytes()
    buf = bytearray(4)
    assert remote.read(0, None, buf) is buf and buf == b"abcd"
    assert remote.read(4, 2, buf) is buf and buf == b"efcd"
    assert remote.read(np.uint64(2), into=buf) is buf and buf == b"cdef"


def test_rpc_in_every_form(eng, peer):
    out = bytearray(8)
    assert eng.rpc(peer.node, ECHO, b"ping") == b"ping"
    assert eng.rpc(peer.node, ECHO, b"into", out) == 4 and out[:4] == b"into"
    assert eng.rpc(peer.node, ECHO) == b""
    assert eng.rpc(node=peer.node, func_id=ECHO, data=b"kw") == b"kw"
    with pytest.raises(ltier.TruncatedError) as err:
        eng.rpc(peer.node, ECHO, b"123456789", out)
    assert err.value.needed == 9


@pytest.mark.parametrize("call", [
    lambda e, n, r: e.send("1", ECHO_PORT, b""),
    lambda e, n, r: e.send(-1, ECHO_PORT, b""),
    lambda e, n, r: e.send(n, 2**40, b""),
    lambda e, n, r: e.send(n, ECHO_PORT),
    lambda e, n, r: e.send(n, ECHO_PORT, "text is not a buffer"),
    lambda e, n, r: e.recv(),
    lambda e, n, r: e.recv(-5),
    lambda e, n, r: e.recv(ECHO_REPLY_PORT, "soon"),
    lambda e, n, r: e.recv(ECHO_REPLY_PORT, 0, None, "big"),
    lambda e, n, r: e.rpc(n, ECHO, 12),
    lambda e, n, r: e.rpc(n, ECHO, b"", None, "big"),
    lambda e, n, r: e.rpc(n, -ECHO, b""),
    lambda e, n, r: r.read(-1, 4),
    lambda e, n, r: r.read(0, "4"),
    lambda e, n, r: r.read(0, 4, b"read-only"),
    lambda e, n, r: r.write(0),
    lambda e, n, r: r.write(2**64, b"x"),
])
def test_wrong_arguments_raise_type_errors(eng, peer, remote, call):
    with pytest.raises((TypeError, BufferError)):
        call(eng, peer.node, remote)


def test_errors_from_positional_calls(eng, peer):
    remote = eng.malloc(peer.node, 4096, ltier.ALL)
    with pytest.raises(ltier.OutOfBoundsError):
        remote.read(4096, 8)
    with pytest.raises(ltier.OutOfBoundsError):
        remote.write(4095, b"12")
    with pytest.raises(ltier.InvalidArgumentError):
        remote.read(0, 8, bytearray(4))
    with pytest.raises(ltier.TimedOutError):
        eng.recv(99, 0)
    with pytest.raises(ltier.InvalidArgumentError):
        eng.recv(99, -1.0)
    with pytest.raises(ltier.NoHandlerError):
        eng.rpc(peer.node, NO_SUCH_FUNC, b"")
    with pytest.raises(ltier.PeerDownError):
        eng.send(999999, ECHO_PORT, b"x")
    eng.leave()
    with pytest.raises(ltier.NotJoinedError):
        eng.send(peer.node, ECHO_PORT, b"x")
    with pytest.raises(ltier.NotJoinedError):
        eng.recv(ECHO_REPLY_PORT, 0)
    with pytest.raises(ltier.NotJoinedError):
        remote.read(0, 8)
