"""Opaque C handles for Python objects, validated by address and kind (never dereferenced)."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from ._errors import HandleError
from ._ffi import _ffi


class HandleTable:
    """Maps the address of an opaque C handle to (kind, object). A wrong or stale handle raises
    `HandleError` (which the host turns into an error status) instead of crashing."""

    def __init__(self) -> None:
        self._entries: dict[int, tuple[str, Any, Any]] = {}
        self._lock = threading.Lock()
        # (kind, address) -> the object behind a handle this table does not hold, or None: the contexts and
        # values of the C context pool (`_fast_context`), looked up here only when C defers to Python
        self.resolver: Any = None


    def new(self, kind: str, obj: Any) -> Any:
        anchor = _ffi.new("char[1]")
        ptr = _ffi.cast(f"{kind}*", anchor)
        with self._lock:
            self._entries[int(_ffi.cast("uintptr_t", anchor))] = (kind, obj, anchor)
        return ptr

    def get(self, kind: str, ptr: Any) -> Any:
        addr = int(_ffi.cast("uintptr_t", ptr))
        entry = self._entries.get(addr)
        if entry is None and self.resolver is not None:
            found = self.resolver(kind, addr)
            if found is not None:
                return found
        if entry is None:
            raise HandleError(f"{kind}* 0x{addr:x} is not a live handle from this host (NULL, released, "
                              "or kept past the call that received it); use only handles the host gave you")
        if entry[0] != kind:
            raise HandleError(f"handle 0x{addr:x} is an {entry[0]}*, not an {kind}*; pass the right handle")
        return entry[1]

    def release(self, kind: str, ptr: Any) -> Any:
        obj = self.get(kind, ptr)
        with self._lock:
            self._entries.pop(int(_ffi.cast("uintptr_t", ptr)), None)
        return obj

    def live(self) -> Counter[str]:
        return Counter(kind for kind, _, _ in self._entries.values())


HANDLES = HandleTable()


def live_handles() -> dict[str, int]:
    """Live handles by kind (e.g. {'OrtKernelDefBuilder': 1} means a builder was never released)."""
    return dict(HANDLES.live())
