"""Python objects behind the opaque C handles, each keeping alive what it handed to C."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._ep import ep_info
from ._ffi import _ffi
from ._handles import HANDLES
from ._workspace import WorkspaceInputShape, workspace_input_shapes


class _View:
    """Caches the cdata (strings, arrays) a handle gave out, so pointers stay valid for the call."""

    def __init__(self) -> None:
        self.keep: dict[Any, Any] = {}
        self.children: list[tuple[str, Any]] = []  # handles created on behalf of this one

    def cstr(self, key: Any, text: str) -> Any:
        if key not in self.keep:
            self.keep[key] = _ffi.new("char[]", text.encode("utf-8"))
        return self.keep[key]

    def int64s(self, key: Any, values: Any) -> Any:
        """An int64 array for `key`, made once: a pointer handed out earlier stays valid."""
        if key in self.keep:
            return self.keep[key]
        values = [int(v) for v in values]
        self.keep[key] = arr = _ffi.new("int64_t[]", values or 1)  # at least one element (zero) for none
        return arr

    def float32s(self, key: Any, values: Any) -> Any:
        """A float array for `key`, made once (as `int64s`)."""
        if key not in self.keep:
            self.keep[key] = _ffi.new("float[]", [float(v) for v in values] or [0.0])
        return self.keep[key]

    def child(self, kind: str, obj: Any) -> Any:
        ptr = HANDLES.new(kind, obj)
        self.children.append((kind, ptr))
        return ptr

    def close(self) -> None:
        for kind, ptr in self.children:
            HANDLES.release(kind, ptr)
        self.children.clear()


class NodeView(_View):
    def __init__(self, node: Any) -> None:
        super().__init__()
        self.node = node
        self._inputs: list[WorkspaceInputShape] | None = None

    def input_shapes(self) -> list[WorkspaceInputShape]:
        """`workspace_input_shapes(node)`, made once for the call this view serves (one estimate or output-shape
        callback: the graph does not change while C queries it)."""
        if self._inputs is None:
            self._inputs = workspace_input_shapes(self.node)
        return self._inputs


class EpView(_View):
    def __init__(self, ep: Any) -> None:
        super().__init__()
        self.ep = ep_info(ep)


class InfoView(_View):
    def __init__(self, info: Any) -> None:
        super().__init__()
        self.info = info
        self.ep_handle: Any = None


class ValueView(_View):
    def __init__(self, array: np.ndarray, writable: bool) -> None:
        super().__init__()
        if not array.flags.c_contiguous:
            array = np.ascontiguousarray(array)
        self.array = array
        self.writable = writable
        self.data = _ffi.from_buffer(array, require_writable=writable) if array.nbytes else None

    def pointer(self) -> Any:
        return _ffi.cast("void*", self.data) if self.data is not None else _ffi.NULL


class ContextView(_View):
    def __init__(self, ctx: Any) -> None:
        super().__init__()
        self.ctx = ctx
        self.inputs: dict[int, Any] = {}
        self.outputs: dict[int, Any] = {}
        self.fast: int | None = None  # its slot in the C context pool (`_fast_context`) while it computes


class RegistryScope:
    """The registry a library's registration entry adds to, plus what happened during the call."""

    def __init__(self, registry: Any, library: str) -> None:
        self.registry = registry
        self.library = library
        self.added: list[Any] = []
        self.errors: list[BaseException] = []


def open_handle(kind: str, view: _View) -> Any:
    return HANDLES.new(kind, view)


def close_handle(kind: str, ptr: Any) -> None:
    view = HANDLES.release(kind, ptr)
    if isinstance(view, _View):
        view.close()
