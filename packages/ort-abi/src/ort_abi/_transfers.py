"""The transfer surface's asynchronous part (003: synchronous and asynchronous copies, ordered by
fences): a device's streams, host-to-device copies issued on a stream, events recorded on one stream and
waited on by another, and, where the device has it, pinned host memory to stage copies from.

A provider offers it with `transfers()` (`TransferStreamProvider`); `transfers_for(provider)` falls back to
`ImmediateTransfers`, the CPU's and the null device's, where a copy is done when it is issued and streams
and events only order the bookkeeping. `SimulatedTransfers` (the simulated GPU's) defers each copy until
something is ordered after it, checks every access by address range (`HazardTracker`) and keeps a
simulated timeline in which copies on the copy stream overlap kernels on the compute stream. The CUDA EP's
issues cuMemcpyHtoDAsync on its own stream, and cuEventRecord / cuStreamWaitEvent between the streams.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import attrs
import numpy as np

from ._buffers import DeviceBuffer, copy_host_to_device
from ._errors import TransferError
from ._hazards import HazardTracker, buffer_range
from ._streams import Event, Stream

__all__ = ["DeviceTransfers", "ImmediateTransfers", "SimulatedTransfers", "Timeline", "TransferStreamProvider",
           "transfers_for"]


@runtime_checkable
class DeviceTransfers(Protocol):
    """One device's streams and asynchronous copies. `compute` is the stream its kernels run on; `pinned`
    says whether `staging(nbytes)` gives page-locked host memory to copy from (the copy engine reads it
    directly, without the driver's staging). A copy from a staging buffer reads it until the copy
    completes: the host must `host_wait` on the copy's event before writing there again."""

    compute: Stream
    pinned: bool

    def stream(self, name: str) -> Stream: ...

    def copy_async(self, src: np.ndarray, dst: DeviceBuffer, stream: Stream) -> None: ...

    def record(self, stream: Stream) -> Event: ...

    def wait(self, stream: Stream, event: Event) -> None: ...

    def host_wait(self, event: Event) -> None: ...

    def staging(self, nbytes: int) -> np.ndarray: ...

    def work(self, stream: Stream, seconds: float, what: str) -> None: ...

    def begin_run(self) -> None: ...

    def end_run(self) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class TransferStreamProvider(Protocol):
    """The optional asynchronous transfer surface of a provider: `transfers()` (one object per provider).
    `pinned_host_staging` says, before a device exists (planning), whether its transfers stage copies in
    pinned host memory, which the plan counts as host memory the user pays for."""

    pinned_host_staging: bool

    def transfers(self) -> DeviceTransfers: ...


def transfers_for(provider: Any) -> DeviceTransfers:
    """`provider.transfers()` (looking through a session's wrapper, `.inner`), else `ImmediateTransfers()`."""
    for candidate in (provider, getattr(provider, "inner", None)):
        fn = getattr(candidate, "transfers", None)
        if callable(fn):
            return fn()
    return ImmediateTransfers()


class ImmediateTransfers:
    """The CPU's and the null device's transfer surface: every copy is done when issued (pageable memory,
    nothing to stage), so streams and events only order the bookkeeping."""

    pinned = False

    def __init__(self) -> None:
        self.compute = Stream("compute")

    def stream(self, name: str) -> Stream:
        return Stream(name)

    def copy_async(self, src: np.ndarray, dst: DeviceBuffer, stream: Stream) -> None:
        copy_host_to_device(src, dst)

    def record(self, stream: Stream) -> Event:
        return stream.record()

    def wait(self, stream: Stream, event: Event) -> None:
        stream.wait(event)

    def host_wait(self, event: Event) -> None:
        pass

    def staging(self, nbytes: int) -> np.ndarray:
        raise TransferError(f"{type(self).__name__} has no pinned host memory to stage {nbytes} bytes in; copy from "
                            "pageable memory (check `.pinned` first)")

    def work(self, stream: Stream, seconds: float, what: str) -> None:
        pass

    def begin_run(self) -> None:
        pass

    def end_run(self) -> None:
        pass

    def close(self) -> None:
        pass


@attrs.define
class Timeline:
    """Simulated device time: per stream, when its last work ends; each piece of work as (stream, what,
    start, end) in seconds."""

    ends: dict[str, float] = attrs.field(factory=dict)
    spans: list[tuple[str, str, float, float]] = attrs.field(factory=list)

    def add(self, stream: str, seconds: float, what: str) -> None:
        start = self.ends.get(stream, 0.0)
        self.ends[stream] = start + seconds
        self.spans.append((stream, what, start, start + seconds))

    def at(self, stream: str) -> float:
        return self.ends.get(stream, 0.0)

    def wait_until(self, stream: str, t: float) -> None:
        self.ends[stream] = max(self.ends.get(stream, 0.0), t)

    @property
    def seconds(self) -> float:
        """The run's simulated time: the last stream to finish."""
        return max(self.ends.values(), default=0.0)

    @property
    def busy(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for stream, _, start, end in self.spans:
            out[stream] = out.get(stream, 0.0) + end - start
        return out

    def overlap(self, a: str, b: str) -> float:
        """Seconds during which streams `a` and `b` both had work."""
        xs = [(s, e) for st, _, s, e in self.spans if st == a]
        ys = [(s, e) for st, _, s, e in self.spans if st == b]
        return sum(max(0.0, min(e1, e2) - max(s1, s2)) for s1, e1 in xs for s2, e2 in ys)

    def to_dict(self) -> dict[str, Any]:
        busy = self.busy
        return {"seconds": self.seconds, "serial_seconds": sum(busy.values()), "busy": busy,
                "overlap_seconds": self.overlap("copy", "compute")}


class SimulatedTransfers:
    """The simulated GPU's transfer surface: copies are deferred (their bytes land when something is
    ordered after them), every kernel's reads and every copy are checked by address range (`hazards`), and
    `timeline` is the simulated device time: a copy takes bytes / `h2d_bandwidth` on its stream, a kernel
    the seconds the caller models (`work`), and a wait starts the waiting stream no earlier than the event.
    No pinned memory: copies read pageable host memory (here: the weights' arrays, immutable)."""

    pinned = False

    def __init__(self, h2d_bandwidth: float) -> None:
        self.h2d_bandwidth = float(h2d_bandwidth)
        self.compute = Stream("compute")
        self.hazards = HazardTracker()
        self.timeline = Timeline()
        self.copies = 0

    def stream(self, name: str) -> Stream:
        return Stream(name)

    def copy_async(self, src: np.ndarray, dst: DeviceBuffer, stream: Stream) -> None:
        if src.nbytes != dst.nbytes:
            raise TransferError(f"copy size mismatch: source has {src.nbytes} bytes, destination {dst.nbytes}; "
                                "sizes must match")
        key, lo, hi = buffer_range(dst)
        self.hazards.copy(stream.name, key, lo, hi, lambda: copy_host_to_device(src, dst),
                          f"the copy of {dst.nbytes} bytes")
        self.timeline.add(stream.name, dst.nbytes / self.h2d_bandwidth, f"copy {dst.nbytes} B")
        self.copies += 1

    def record(self, stream: Stream) -> Event:
        event = stream.record()
        return attrs.evolve(event, handle=(self.hazards.record(stream.name), self.timeline.at(stream.name)))

    def wait(self, stream: Stream, event: Event) -> None:
        mark, t = event.handle
        self.hazards.wait(stream.name, mark)
        self.timeline.wait_until(stream.name, t)
        stream.wait(event)

    def host_wait(self, event: Event) -> None:
        self.hazards.complete(event.handle[0])

    def staging(self, nbytes: int) -> np.ndarray:
        raise TransferError(f"the simulated GPU has no pinned host memory to stage {nbytes} bytes in; it copies "
                            "from pageable memory (check `.pinned` first)")

    def kernel_reads(self, buffers: Sequence[DeviceBuffer], what: str) -> None:
        """A kernel on the compute stream reads `buffers`: checked against the copies still in flight."""
        self.hazards.launch(self.compute.name, [buffer_range(b) for b in buffers], what)

    def work(self, stream: Stream, seconds: float, what: str) -> None:
        self.timeline.add(stream.name, seconds, what)

    def end_run(self) -> None:
        self.hazards.synchronize()

    def begin_run(self) -> None:
        """A fresh timeline (device time starts at 0 for each run)."""
        self.timeline = Timeline()

    def close(self) -> None:
        self.hazards.synchronize()
