"""The testing drivers' streams, events and asynchronous copies (`AsyncCopies`, a base of `RecordingDriver`):
cuMemcpyHtoDAsync is deferred until an event wait or a synchronize covers it, and `self.hazards`
(`ort_abi.HazardTracker`, made by the driver) refuses a launch reading a copy still in flight, or a copy over
bytes a launch on another stream read without an event between."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["AsyncCopies"]


class _DriverEvent:
    mark: Any = None  # the HazardTracker mark of its last cuEventRecord


class AsyncCopies:
    """Needs the driver's `memory`, `mapped`, `calls`, `hazards`, `_find` and `_ok`."""

    memory: dict[int, Any]
    mapped: set[int]
    calls: list[tuple]
    hazards: Any

    def _pinned(self, src) -> tuple[Any, int] | None:
        """(mapped allocation, offset) when `src` (an address or an array) lies in cuMemHostAlloc'd memory."""
        address = int(src) if isinstance(src, int) else np.asarray(src).__array_interface__["data"][0]
        for base in self.mapped:
            mem = self.memory[base]
            if base <= address < base + len(mem):
                return mem, address - base
        return None

    def cuMemcpyHtoDAsync(self, dst, src, n, stream):
        """Deferred: the bytes land when the copy completes. From pinned memory the copy engine reads the
        source then (the host must not overwrite it before); from pageable memory the driver stages it now."""
        mem, off = self._find(dst)
        pinned = self._pinned(src)
        if pinned is not None:
            host, at = pinned

            def apply():
                mem[off:off + n] = bytes(host[at:at + n])
        else:
            data = np.asarray(src).reshape(-1).view(np.uint8).tobytes()[:n]

            def apply():
                mem[off:off + n] = data
        self.hazards.copy(stream, None, int(dst), int(dst) + n, apply, f"cuMemcpyHtoDAsync of {n} bytes")
        self.calls.append(("HtoDAsync", n, stream, pinned is not None))
        return self._ok()

    def cuStreamWaitEvent(self, stream, event, flags):
        assert getattr(event, "mark", None) is not None, "cuStreamWaitEvent on an event never recorded"
        self.hazards.wait(stream, event.mark)
        self.calls.append(("wait_event", stream))
        return self._ok()

    # events: they order the streams (cuStreamWaitEvent) and time gpu_check.py's loop (every kernel 'takes' 0.5 ms)
    def cuEventCreate(self, flags):
        self.calls.append(("event_create", flags))
        return self._ok(_DriverEvent())

    def cuEventRecord(self, ev, stream):
        ev.mark = self.hazards.record(stream)
        return self._ok()

    def cuEventSynchronize(self, ev):
        if ev.mark is not None:
            self.hazards.complete(ev.mark)
        return self._ok()

    def cuEventElapsedTime(self, a, b):
        return self._ok(0.5)

    def cuEventDestroy(self, ev):
        return self._ok()
