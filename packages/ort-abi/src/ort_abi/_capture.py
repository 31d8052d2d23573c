"""The Capture contract surface (003: "declare, begin, end, abort and replay device graph capture").

A provider that can record the device work of a region of a run and replay it implements
`CaptureCapable`; the session declares the region (fixed shapes and addresses: pre-allocated buffers),
calls `begin_capture()` before the region's first kernel and `end_capture()` after its last one, which
returns a `CapturedGraph` whose work has run once; later runs call `graph.replay()` instead of the
kernels. `abort_capture()` drops a capture that failed midway (the region's kernels raised). Work that a
replay cannot repeat (a host copy, an allocation) inside the region is a `CaptureError` with the reason.

`RecordedCalls` is the graph of a device that replays by calling back (the simulated GPU records each
staged kernel call); CUDA records a real graph (cuStreamBeginCapture ... cuGraphLaunch).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from ._errors import CaptureError

__all__ = ["CaptureCapable", "CapturedGraph", "RecordedCalls", "capture_refusal"]


@runtime_checkable
class CapturedGraph(Protocol):
    """A captured device graph: `launches` device operations, replayed in their recorded order."""

    launches: int

    def replay(self) -> None: ...

    def release(self) -> None: ...


@runtime_checkable
class CaptureCapable(Protocol):
    """The optional Capture surface of an execution provider."""

    def begin_capture(self) -> None: ...

    def end_capture(self) -> CapturedGraph: ...

    def abort_capture(self) -> None: ...


def capture_refusal(ep: Any) -> str | None:
    """Why `ep` cannot capture (None: it can): it lacks the surface, or says why (`capture_unavailable`)."""
    if not isinstance(ep, CaptureCapable):
        return f"{getattr(ep, 'name', type(ep).__name__)} has no Capture surface (begin/end/abort_capture)"
    why = getattr(ep, "capture_unavailable", None)
    return why() if callable(why) else None


class RecordedCalls:
    """A graph recorded as host callbacks, each one device operation; `replay` calls them in order."""

    def __init__(self) -> None:
        self._calls: list[Callable[[], None]] = []
        self.capturing = False
        self._released = False

    @property
    def launches(self) -> int:
        return len(self._calls)

    def record(self, call: Callable[[], None]) -> None:
        if not self.capturing:
            raise CaptureError("record() outside begin_capture()/end_capture()", reason="not capturing")
        self._calls.append(call)

    def replay(self) -> None:
        if self._released:
            raise CaptureError("replay of a released captured graph; capture again", reason="released")
        for call in self._calls:
            call()

    def release(self) -> None:
        self._calls.clear()
        self._released = True
