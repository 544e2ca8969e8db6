"""Every LT_ERR_* status has its ltier.Error subclass, and the calls that
fail raise the right one."""

import pytest

import ltier
from conftest import SECRET

NAMES = {
    1: "InvalidArgumentError", 2: "BadHandleError", 3: "OutOfBoundsError",
    4: "PermissionDeniedError", 5: "PeerDownError", 6: "TimedOutError", 7: "AgainError",
    8: "QuotaError", 9: "UnsupportedError", 10: "MalformedError", 11: "NotFoundError",
    12: "ExistsError", 13: "AuthError", 14: "NoMemoryError", 15: "NotJoinedError",
    16: "AlignError", 17: "NoHandlerError", 18: "TruncatedError", 19: "ClosedError",
    20: "InternalError", 21: "SystemCallError",
}


def test_every_status_has_its_class():
    for code, name in NAMES.items():
        cls = getattr(ltier, name)
        assert issubclass(cls, ltier.Error)
        assert cls.code == code
        assert cls.name == ltier.errname(-code)
        err = ltier.errors._from_call(code, "msg", 0)
        assert type(err) is cls and err.code == code and str(err) == "msg"
    assert len(ltier.errors._BY_CODE) == len(NAMES)
    assert issubclass(ltier.TimedOutError, TimeoutError)
    assert issubclass(ltier.PeerDownError, ConnectionError)
    assert issubclass(ltier.InvalidArgumentError, ValueError)


def test_caller_mistakes(eng, peer):
    lmr = eng.malloc(peer.node, 4096, ltier.ALL)
    with pytest.raises(ltier.OutOfBoundsError) as err:
        lmr.read(4000, 100)
    assert "read" in str(err.value) and err.value.code == 3
    with pytest.raises(ltier.OutOfBoundsError):
        lmr.write(4095, b"12")
    with pytest.raises(ltier.AlignError):
        lmr.fetch_add(3, 1)
    with pytest.raises(ltier.NotFoundError):
        eng.map("no-such-lmr")
    with pytest.raises(ltier.NotFoundError):
        eng.node_by_name("no-such-node", timeout=0)
    lmr.free()
    with pytest.raises(ltier.BadHandleError):
        lmr.read(0, 8)
    with pytest.raises(ltier.InvalidArgumentError):
        eng.malloc(peer.node, 0)
    with pytest.raises(ltier.PeerDownError):
        eng.malloc(999999, 64)
    with pytest.raises(TypeError):
        lmr.write(0, "text is not a buffer")


def test_wrong_secret_is_refused(manager):
    with pytest.raises(ltier.AuthError):
        ltier.join(manager=manager, secret="not-" + SECRET)


def test_no_manager_is_peer_down():
    with pytest.raises(ltier.PeerDownError):
        ltier.join(manager="127.0.0.1:1", secret=SECRET)


def test_handler_raising_each_error_reaches_the_caller(eng):
    def handler(src, data):
        raise getattr(ltier, data.decode())("from the handler")

    eng.register_rpc(90, handler)
    for name in ["QuotaError", "NotFoundError", "OutOfBoundsError", "AgainError"]:
        with pytest.raises(getattr(ltier, name)):
            eng.rpc(eng.node_id, 90, name.encode())
