"""RPC with Python handlers: in the peer process and in this one."""

import threading

import numpy as np
import pytest

import ltier

ECHO, RAISES, QUOTA, SLEEPS, SIZED, LOOP = 1, 2, 3, 4, 5, 10


def test_python_handler_round_trips(eng, peer):
    assert eng.rpc(peer.node, ECHO, b"ping") == b"ping"
    assert eng.rpc(peer.node, ECHO) == b""
    arr = np.arange(10, dtype=np.float32)
    assert eng.rpc(peer.node, ECHO, arr) == arr.tobytes()
    out = bytearray(64)
    assert eng.rpc(peer.node, ECHO, b"into", into=out) == 4 and out[:4] == b"into"
    assert eng.rpc(peer.node, SIZED, b"100000") == b"x" * 100000


def test_reply_larger_than_the_buffer(eng, peer):
    with pytest.raises(ltier.TruncatedError) as err:
        eng.rpc(peer.node, SIZED, b"100", max_reply=10)
    assert err.value.needed == 100
    with pytest.raises(ltier.TruncatedError):
        eng.rpc(peer.node, SIZED, b"100", into=bytearray(99))


def test_a_raising_handler_is_an_error_not_a_crash(eng, peer):
    with pytest.raises(ltier.InternalError):
        eng.rpc(peer.node, RAISES, b"")
    with pytest.raises(ltier.QuotaError):  # an ltier.Error keeps its status
        eng.rpc(peer.node, QUOTA, b"")
    assert eng.rpc(peer.node, ECHO, b"still serving") == b"still serving"


def test_no_handler(eng, peer):
    with pytest.raises(ltier.NoHandlerError):
        eng.rpc(peer.node, 4242, b"")


def test_server_loop_form(eng, peer):
    assert eng.rpc(peer.node, LOOP, b"shout") == b"SHOUT"
    with pytest.raises(ltier.ExistsError):
        eng.rpc(peer.node, LOOP, b"fail")


def test_handlers_in_this_process(eng, peer):
    seen = []

    def handler(src, data):
        seen.append((src, threading.current_thread() is threading.main_thread()))
        return data[::-1]

    eng.register_rpc(77, handler)
    with pytest.raises(ltier.ExistsError):
        eng.register_rpc(77, handler)
    assert peer.cmd(f"call {eng.node_id} 77 {b'abc'.hex()}") == "ok " + b"cba".hex()
    assert seen == [(peer.node, False)]

    q = eng.rpc_queue(78)
    result = []
    t = threading.Thread(target=lambda: result.append(peer.cmd(f"call {eng.node_id} 78 00")))
    t.start()
    call = q.recv(timeout=10)
    assert (call.src, call.data) == (peer.node, b"\x00")
    call.reply(np.array([42], dtype=np.uint8))
    with pytest.raises(ltier.BadHandleError):
        call.reply(b"twice")
    t.join(30)
    assert result == ["ok 2a"]
    with pytest.raises(ltier.TimedOutError):
        q.recv(timeout=0.01)


def test_rpc_async_many_outstanding(eng, peer):
    reqs = [eng.rpc_async(peer.node, ECHO, i.to_bytes(4, "little")) for i in range(50)]
    assert [r.wait(10) for r in reqs] == [i.to_bytes(4, "little") for i in range(50)]
    r = eng.rpc_async(peer.node, RAISES, b"")
    with pytest.raises(ltier.InternalError):
        r.wait(10)
    out = bytearray(8)
    assert eng.rpc_async(peer.node, ECHO, b"12", into=out).wait(10) == 2


def test_leave_from_a_handler_is_refused(eng, peer):
    def handler(src, data):
        try:
            eng.leave()
        except ltier.InvalidArgumentError:
            return b"refused"
        return b"left"

    eng.register_rpc(91, handler)
    assert peer.cmd(f"call {eng.node_id} 91") == "ok " + b"refused".hex()
    assert not eng.closed


def test_server_loop_on_its_own_node(eng):
    queue = eng.rpc_queue(LOOP + 1)

    def serve():
        for _ in range(2):
            call = queue.recv(timeout=10)
            call.reply(bytes(reversed(call.data)))

    server = threading.Thread(target=serve)
    server.start()
    assert eng.rpc(eng.node_id, LOOP + 1, b"abc") == b"cba"
    assert eng.rpc(eng.node_id, LOOP + 1, b"", bytearray(4)) == 0
    server.join(10)
    assert not server.is_alive()
