"""ltier's errors: one ltier.Error subclass per LT_ERR_* status.

Every failed call raises the subclass named after its status; the instance
carries ``code`` (the positive LT_ERR_* value), ``name`` ("LT_ERR_PEER_DOWN")
and the message. An RPC handler may raise one to answer its caller with that
status.
"""

from __future__ import annotations


class Error(Exception):
    """Base of every ltier error."""

    code: int = 0
    name: str = "LT_ERR"

    def __init__(self, message: str = "", needed: int = 0) -> None:
        super().__init__(message or self.name)
        self.message = message or self.name
        #: For TruncatedError: the size the message or reply needed.
        self.needed = needed


def _error(name: str, code: int, doc: str, *bases: type) -> type:
    cls = type(name, (Error, *bases), {"code": code, "name": f"LT_ERR_{doc.split(':')[0]}",
                                        "__doc__": doc.split(": ", 1)[1],
                                        "__module__": __name__})
    return cls


InvalidArgumentError = _error("InvalidArgumentError", 1, "INVAL: invalid argument.", ValueError)
BadHandleError = _error("BadHandleError", 2, "BAD_HANDLE: invalid, forged or stale handle.")
OutOfBoundsError = _error("OutOfBoundsError", 3, "OUT_OF_BOUNDS: offset/length outside the LMR.")
PermissionDeniedError = _error("PermissionDeniedError", 4,
                               "PERM: the handle lacks the right for this operation.")
PeerDownError = _error("PeerDownError", 5, "PEER_DOWN: the peer node is down or unreachable.",
                       ConnectionError)
TimedOutError = _error("TimedOutError", 6, "TIMEDOUT: the call's deadline passed.", TimeoutError)
AgainError = _error("AgainError", 7, "AGAIN: out of request slots or credits; retry.")
QuotaError = _error("QuotaError", 8, "QUOTA: the tenant's quota is exhausted.")
UnsupportedError = _error("UnsupportedError", 9, "UNSUPPORTED: not supported here.")
MalformedError = _error("MalformedError", 10, "MALFORMED: malformed message or input.")
NotFoundError = _error("NotFoundError", 11, "NOT_FOUND: no such name or node.", LookupError)
ExistsError = _error("ExistsError", 12, "EXISTS: the name or id is taken.")
AuthError = _error("AuthError", 13, "AUTH: ltier-manager refused the cluster secret.")
NoMemoryError = _error("NoMemoryError", 14, "NO_MEMORY: out of memory.")
NotJoinedError = _error("NotJoinedError", 15, "NOT_JOINED: the engine has left the cluster.")
AlignError = _error("AlignError", 16, "ALIGN: atomics need an 8-byte aligned offset.")
NoHandlerError = _error("NoHandlerError", 17, "NO_HANDLER: nothing serves that RPC function id.")
TruncatedError = _error("TruncatedError", 18,
                        "TRUNCATED: the buffer is too small; .needed says how big.")
ClosedError = _error("ClosedError", 19, "CLOSED: the engine left while the operation was in flight.")
InternalError = _error("InternalError", 20,
                       "INTERNAL: internal error, or a remote handler raised a non-ltier exception.")
SystemCallError = _error("SystemCallError", 21, "SYS: a system call failed (see the log).")

_BY_CODE = {c.code: c for c in Error.__subclasses__()}

__all__ = ["Error"] + [c.__name__ for c in _BY_CODE.values()]


def _from_call(code: int, message: str, needed: int) -> Error:
    """Builds the error for a failed call (used by the C++ module)."""
    cls = _BY_CODE.get(code)
    if cls is None:
        err = Error(message, needed)
        err.code = code
        return err
    return cls(message, needed)
