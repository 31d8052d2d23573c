"""Compute-time reads answered in C: a pool of kernel contexts in the bridge that the host fills once
per Compute call (input and output counts; each input's data pointer, element type, shape and count),
so a C kernel's `KernelContext_GetInput` / `Value_Get*` calls do not enter Python (`_ffi_build.py`
holds the C side).

A live pool context is also an `OrtKernelContext` handle of the Python table (`HANDLES.resolver`), so everything C does not
serve (outputs, scratch, workspace, an index out of range, an input that is not a C-contiguous host
array of a known element type, writing to an input) is answered by the Python host functions exactly
as for any other context. A pointer outside the pool, or into a context that is not computing, is
never dereferenced by C: it goes to Python, which rejects it as before. When the pool is exhausted
(deeply nested or many concurrent Compute calls) or the bridge predates the pool, contexts are the
plain Python handles."""

from __future__ import annotations

import collections
import threading
from typing import Any

import numpy as np

from ._handles import HANDLES

_ELEM_TYPES: dict[np.dtype, int] = {}  # dtype -> ONNX element type (-1: none; such inputs go to Python)


def _elem_type(dtype: np.dtype) -> int:
    found = _ELEM_TYPES.get(dtype)
    if found is None:
        from ort_graph import from_numpy_dtype

        try:
            found = from_numpy_dtype(dtype)
        except Exception:  # noqa: BLE001 - no ONNX number: the Python path reports it when asked
            found = -1
        _ELEM_TYPES[dtype] = found
    return found


class FastContexts:
    """The bridge's context pool: `open` fills a free context for one Compute call (None when none is
    free), `close` ends it; `describe_output` fills an output once the host allocated it."""

    def __init__(self, ffi: Any, lib: Any) -> None:
        self._ffi, self._null = ffi, ffi.NULL
        size = int(lib.ort_abi_fast_pool_size())
        self._slots = [lib.ort_abi_fast_slot(i) for i in range(size)]
        self.inputs = int(lib.ort_abi_fast_inputs())
        self.outputs = len(self._slots[0].values) - self.inputs
        self.rank = len(self._slots[0].values[0].dims)
        self._handles = [ffi.cast("OrtKernelContext*", s) for s in self._slots]
        self._addresses = {int(ffi.cast("uintptr_t", s)): i for i, s in enumerate(self._slots)}
        self._value_addresses = {int(ffi.cast("uintptr_t", ffi.addressof(s.values[j]))): (i, j)
                                 for i, s in enumerate(self._slots) for j in range(self.inputs + self.outputs)}
        self._zeros = bytes(ffi.sizeof(self._slots[0].values))  # a context's values, cleared (`release`)
        self._views: list[Any] = [None] * size
        self._owners: list[Any] = [None] * size  # the run holding each context (`hold`), else None
        # first in, first out: a slot is reused only after every other one, so a handle a kernel kept past
        # its Compute finds its context closed (and is refused) rather than a later call's context
        self._free = collections.deque(range(size))
        self._lock = threading.Lock()
        HANDLES.resolver = self.resolve

    def open(self, view: Any) -> Any | None:
        """A pool context describing `view.ctx`'s inputs, live and registered as `view`'s handle."""
        with self._lock:
            if not self._free:
                return None
            slot = self._free.popleft()
        c = self._slots[slot]
        ffi, null, keep = self._ffi, self._null, view.keep
        inputs = view.ctx.inputs
        c.input_count, c.output_count = len(inputs), len(view.ctx.outputs)
        values = c.values
        for i in range(min(len(inputs), self.inputs)):
            a, v = inputs[i], values[i]
            if a is None:
                v.state = 2
            elif type(a) is np.ndarray and a.flags.c_contiguous and a.ndim <= self.rank and _elem_type(a.dtype) >= 0:
                data = ffi.from_buffer(a) if a.nbytes else null
                keep[("fast", i)] = data
                v.writable, v.elem_type, v.rank, v.count, v.data = 0, _ELEM_TYPES[a.dtype], a.ndim, a.size, data
                v.dims[0:a.ndim] = a.shape
                v.state = 1
            # else: state stays 0 (close() cleared it): Python serves it (a copy to contiguous memory, a device
            # tensor refused, ...)
        view.fast = slot
        self._views[slot] = view
        c.live = 1  # the Python host functions find `view` through `resolve`
        return self._handles[slot]

    def close(self, view: Any) -> None:
        """End the Compute call: the context is not live and none of its values is described any more (a
        handle kept from this call finds nothing, whichever call holds the context next)."""
        slot = view.fast
        c = self._slots[slot]
        c.live = 0
        values = c.values
        for j in range(min(int(c.input_count), self.inputs)):
            values[j].state = 0
        for index in view.outputs:
            if index < self.outputs:
                values[self.inputs + index].state = 0
        self._views[slot] = None
        view.fast = None
        with self._lock:
            self._free.append(slot)

    def hold(self, owner: Any) -> int | None:
        """A free context held by `owner` (a `_fast_steps.StepRun`) for a whole run, None when none is free.
        While held, the host functions reach the step's Python context through `owner.context_view()`."""
        with self._lock:
            if not self._free:
                return None
            slot = self._free.popleft()
        self._owners[slot] = owner
        return slot

    def release(self, slot: int) -> None:
        """Give back a context `hold` returned: nothing of the run stays described in it."""
        c = self._slots[slot]
        c.live, c.run = 0, self._null
        self._ffi.memmove(c.values, self._zeros, len(self._zeros))  # every value's state 0, in one call
        self._owners[slot] = None
        with self._lock:
            self._free.append(slot)

    def context(self, slot: int) -> Any:
        return self._slots[slot]

    def output_value(self, slot: int, index: int) -> Any | None:
        return self._slots[slot].values[self.inputs + index] if 0 <= index < self.outputs else None

    def _view(self, slot: int) -> Any:
        owner = self._owners[slot]
        return self._views[slot] if owner is None else owner.context_view()  # a held run: its step's context

    def describe_output(self, view: Any, index: int, arr: Any) -> Any | None:
        """The pool value for output `index` (allocated as `arr`), or None when C cannot describe it."""
        slot = getattr(view, "fast", None)
        if (slot is None or index >= self.outputs or type(arr) is not np.ndarray or not arr.flags.c_contiguous
                or arr.ndim > self.rank or _elem_type(arr.dtype) < 0):
            return None
        v = self._slots[slot].values[self.inputs + index]
        data = self._ffi.from_buffer(arr, require_writable=True) if arr.nbytes else self._null
        view.keep[("fast-out", index)] = data
        v.writable, v.elem_type, v.rank, v.count, v.data = 1, _ELEM_TYPES[arr.dtype], arr.ndim, arr.size, data
        v.dims[0:arr.ndim] = arr.shape
        v.state = 1
        return self._ffi.cast("OrtValue*", self._ffi.addressof(self._slots[slot].values[self.inputs + index]))

    def resolve(self, kind: str, address: int) -> Any | None:
        """The ContextView of a live pool context, or the ValueView behind a pool value (for the cases C
        hands to Python); None for any other address."""
        if kind == "OrtKernelContext":
            slot = self._addresses.get(address)
            return None if slot is None else self._view(slot)
        where = self._value_addresses.get(address) if kind == "OrtValue" else None
        if where is None:
            return None
        slot, j = where
        view = self._view(slot)
        if view is None or self._slots[slot].values[j].state != 1:
            return None
        key = ("fast-view", j)
        if key not in view.keep:
            from ._views import ValueView

            ctx = view.ctx
            arr = ctx.inputs[j] if j < self.inputs else ctx.outputs[j - self.inputs]
            view.keep[key] = ValueView(arr, writable=j >= self.inputs)
        return view.keep[key]


_POOL: list[FastContexts | None] = []


def fast_contexts(ffi: Any, lib: Any) -> FastContexts | None:
    """The process's pool, or None when the compiled bridge predates it."""
    if not _POOL:
        _POOL.append(FastContexts(ffi, lib) if hasattr(lib, "ort_abi_fast_slot") else None)
    return _POOL[0]
