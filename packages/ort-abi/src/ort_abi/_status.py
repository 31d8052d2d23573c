"""OrtStatus: created by the host, released exactly once, turned into `KernelError` by `check`."""

from __future__ import annotations

import contextlib
import contextvars
import enum
import logging
import threading
from collections.abc import Iterator
from typing import Any

import attrs

from ._errors import KernelError
from ._ffi import _ffi

_log = logging.getLogger("ort_abi")


class ErrorCode(enum.IntEnum):
    """Mirror of the header's OrtErrorCode."""

    OK = 0
    FAIL = 1
    INVALID_ARGUMENT = 2
    NO_SUCHFILE = 3
    NO_MODEL = 4
    ENGINE_ERROR = 5
    RUNTIME_EXCEPTION = 6
    INVALID_PROTOBUF = 7
    MODEL_LOADED = 8
    NOT_IMPLEMENTED = 9
    INVALID_GRAPH = 10
    EP_FAIL = 11


@attrs.define
class _StatusRecord:
    code: int
    message: str
    c_message: Any  # char[] kept alive while the status lives
    anchor: Any  # the cdata whose address is the OrtStatus* value


class StatusTable:
    """Every live OrtStatus the host created, by address. Never dereferences a foreign pointer."""

    def __init__(self) -> None:
        self._live: dict[int, _StatusRecord] = {}
        self._lock = threading.Lock()
        self.misuse: list[str] = []  # releases of unknown or already released statuses

    def create(self, code: int, message: str) -> Any:
        from ._ffi import require_c

        ffi, _ = require_c("OrtStatus")
        if int(code) == ErrorCode.OK:
            # ORT semantics: success is NULL; an OK status object would be ambiguous
            return ffi.NULL
        anchor = ffi.new("char[1]")
        record = _StatusRecord(int(code), message, ffi.new("char[]", message.encode("utf-8", "replace")), anchor)
        ptr = ffi.cast("OrtStatus*", anchor)
        with self._lock:
            self._live[int(ffi.cast("uintptr_t", ptr))] = record
        return ptr

    def get(self, ptr: Any) -> _StatusRecord | None:
        return self._live.get(_address(ptr))

    def release(self, ptr: Any) -> bool:
        """Drop a status; False (and a logged, recorded misuse) when it is not live."""
        addr = _address(ptr)
        if addr == 0:
            return True
        with self._lock:
            record = self._live.pop(addr, None)
        if record is None:
            msg = f"ReleaseStatus on 0x{addr:x}, which is not a live status (released twice, or not made by CreateStatus)"
            self.misuse.append(msg)
            _log.warning(msg)
            return False
        return True

    def live_count(self) -> int:
        return len(self._live)


def _address(ptr: Any) -> int:
    if ptr is None:
        return 0
    if isinstance(ptr, int):
        return ptr
    return int(_ffi.cast("uintptr_t", ptr))


STATUSES = StatusTable()


def live_status_count() -> int:
    """Statuses created through the host API and not yet released (0 when nothing leaks)."""
    return STATUSES.live_count()


def status_misuse() -> list[str]:
    """Messages about ReleaseStatus calls on statuses that were not live (double releases)."""
    return list(STATUSES.misuse)


def check(status: Any, *, node: str | None = None, library: str | None = None,
          operation: str | None = None) -> None:
    """Consume an OrtStatus returned by C code: NULL is success; otherwise release it (exactly once)
    and raise `KernelError(code, message, node, library)`. A pointer that is not a live host status
    raises too, without being dereferenced."""
    addr = _address(status)
    if addr == 0:
        return
    record = STATUSES.get(status)
    if record is None:
        raise KernelError(
            ErrorCode.RUNTIME_EXCEPTION,
            f"returned status pointer 0x{addr:x}, which is not a live status created by api->CreateStatus "
            "(released already, or not a status at all); return NULL for success or a fresh CreateStatus",
            node=node, library=library, operation=operation,
        )
    STATUSES.release(status)
    raise KernelError(record.code, record.message, node=node, library=library, operation=operation)


# the failures of host calls made during a library's registration entry (see `recording_failures`)
FAILURES: contextvars.ContextVar[list[BaseException] | None] = contextvars.ContextVar("ort_abi_failures", default=None)


@contextlib.contextmanager
def recording_failures(into: list[BaseException]) -> Iterator[None]:
    """While active, every host call that returns an error status appends its exception to `into`:
    a registration entry that returns success after one of them ignored it."""
    token = FAILURES.set(into)
    try:
        yield
    finally:
        FAILURES.reset(token)
