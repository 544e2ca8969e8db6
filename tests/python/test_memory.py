"""LMRs from Python: every buffer kind in and out, memset, memcpy, atomics,
publish/map with rights, and the async forms."""

import array

import numpy as np
import pytest

import ltier


@pytest.fixture
def remote(eng, peer):
    """An LMR this test's engine masters, living on the peer's node."""
    with eng.malloc(peer.node, 1 << 16, ltier.ALL) as lmr:
        yield lmr


def test_every_buffer_kind_round_trips(remote):
    payloads = [b"bytes!", bytearray(b"a bytearray"), memoryview(b"a memoryview"),
                array.array("i", [1, -2, 3]), np.arange(16, dtype=np.float64)]
    for i, data in enumerate(payloads):
        off = 4096 * i
        remote.write(off, data)
        raw = bytes(memoryview(data).cast("B"))
        assert remote.read(off, len(raw)) == raw


def test_read_into_caller_buffers(remote):
    src = np.arange(1000, dtype=np.int32)
    remote.write(128, src)
    dst = np.zeros_like(src)
    assert remote.read(128, into=dst) is dst
    np.testing.assert_array_equal(dst, src)
    ba = bytearray(8)
    remote.read(128, 4, into=ba)
    assert ba[:4] == src[:1].tobytes() and ba[4:] == bytes(4)
    with pytest.raises(ltier.InvalidArgumentError):
        remote.read(0, 9, into=ba)
    with pytest.raises(BufferError):
        remote.read(0, into=b"immutable")
    with pytest.raises((BufferError, ValueError)):  # numpy says ValueError
        remote.read(0, into=np.zeros((4, 4))[:, 1])  # not contiguous


def test_fresh_memory_is_zeroed_and_memset(remote):
    assert remote.read(0, 64) == bytes(64)
    remote.memset(10, 0xAB, 20)
    assert remote.read(0, 40) == bytes(10) + b"\xab" * 20 + bytes(10)
    assert remote.size == 1 << 16


def test_memcpy_between_nodes(eng, remote):
    with eng.malloc(eng.node_id, 4096) as local:
        local.write(0, b"copied across nodes")
        remote.memcpy(100, local, 0, 19)
        assert remote.read(100, 19) == b"copied across nodes"
        local.memcpy(1000, remote, 100, 6)
        assert local.read(1000, 6) == b"copied"


def test_atomics(remote):
    assert remote.fetch_add(0, 5) == 0
    assert remote.fetch_add(0, -2) == 5
    assert remote.read(0, 8) == (3).to_bytes(8, "little")
    assert remote.compare_swap(0, 7, 9) == 3  # no swap
    assert remote.compare_swap(0, 3, 2**64 - 1) == 3
    assert remote.fetch_add(0, 1) == 2**64 - 1
    assert remote.fetch_add(0, 0) == 0


def test_map_published_memory_with_rights(eng, peer):
    with eng.map("peer-lmr", ltier.ALL) as shared:
        assert not shared.is_master
        shared.write(0, b"through a mapped handle")
        assert shared.read(0, 23) == b"through a mapped handle"
    ro = eng.map("peer-ro", ltier.READ)
    assert ro.read(0, 9) == b"read-only"
    with pytest.raises(ltier.PermissionDeniedError):
        ro.write(0, b"no")
    with pytest.raises(ltier.PermissionDeniedError):
        eng.map("peer-ro", ltier.RW)
    with pytest.raises(ltier.PermissionDeniedError):
        ro.free()  # only the master frees
    ro.unmap()


def test_publish_and_map_in_one_process(eng):
    lmr = eng.malloc(eng.node_id, 64)
    lmr.publish("pytest-own", ltier.READ)
    with pytest.raises(ltier.ExistsError):
        lmr.publish("pytest-own", ltier.READ)
    m = eng.map("pytest-own", ltier.READ)
    lmr.write(0, b"mine")
    assert m.read(0, 4) == b"mine"
    m.unmap()
    lmr.free()


def test_async_forms(eng, remote):
    data = np.arange(512, dtype=np.uint8)
    w = remote.write_async(0, data)
    del data  # the request keeps the buffer alive
    assert w.wait() is None
    reqs = [remote.read_async(64 * i, 64) for i in range(8)]
    for i, r in enumerate(reqs):
        assert r.wait() == bytes(k % 256 for k in range(64 * i, 64 * i + 64))
    into = bytearray(16)
    r = remote.read_async(0, into=into)
    assert r.wait() is into and into == bytes(range(16))
    assert remote.memset_async(0, 1, 8).wait() is None
    assert remote.fetch_add_async(0, 1).wait() == 0x0101010101010101
    assert remote.compare_swap_async(0, 0x0101010101010102, 7).wait() == 0x0101010101010102
    with eng.malloc(eng.node_id, 64) as local:
        assert local.memcpy_async(0, remote, 0, 8).wait() is None
        assert local.read(0, 8) == (7).to_bytes(8, "little")
    r = remote.read_async(0, 8)
    while not r.test():
        pass
    assert r.done and r.wait() == (7).to_bytes(8, "little")
