"""The CUDA EP's asynchronous transfer surface (`ort_abi.DeviceTransfers`): kernels run on the legacy
stream (handle 0, as `CudaRuntime.launch` issues them); copies run on their own non-blocking stream
(cuStreamCreate(CU_STREAM_NON_BLOCKING): no implicit ordering with the legacy stream), issued with
cuMemcpyHtoDAsync; cuEventRecord on one stream and cuStreamWaitEvent on the other order them, so a kernel
waits only for the copy of the bytes it reads. Pinned staging buffers (cuMemHostAlloc, through the
runtime's mapped allocator) let the copy engine read the weights without the driver's pageable staging;
they are host memory and are counted as such by the plan."""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np

from ort_abi import DeviceBuffer, Event, Stream, TransferError

__all__ = ["CudaTransfers"]

CU_STREAM_NON_BLOCKING = 1
CU_EVENT_DISABLE_TIMING = 2


class CudaTransfers:
    pinned = True

    def __init__(self, runtime: Any) -> None:
        self._rt = runtime
        self.compute = Stream("compute", 0)
        self._streams: list[Stream] = []
        self._events: list[Any] = []
        self._staging: list[DeviceBuffer] = []

    @property
    def pinned_bytes(self) -> int:
        return sum(b.nbytes for b in self._staging)

    def _call(self, name: str, *args: Any) -> Any:
        fn = getattr(self._rt.driver, name, None)
        if fn is None:
            raise TransferError(f"this CUDA driver binding has no {name}; asynchronous copies need cuda-python's "
                                "cuStreamCreate, cuMemcpyHtoDAsync, cuEventRecord and cuStreamWaitEvent")
        return self._rt.check(fn(*args), name)

    def stream(self, name: str) -> Stream:
        self._rt.activate()
        stream = Stream(name, self._call("cuStreamCreate", CU_STREAM_NON_BLOCKING))
        self._streams.append(stream)
        return stream

    def copy_async(self, src: np.ndarray, dst: DeviceBuffer, stream: Stream) -> None:
        if src.nbytes != dst.nbytes:
            raise TransferError(f"copy size mismatch: source has {src.nbytes} bytes, destination {dst.nbytes}; "
                                "sizes must match")
        if src.nbytes:
            self._rt.capture.refuse(f"a {src.nbytes}-byte asynchronous host-to-device copy")
            self._call("cuMemcpyHtoDAsync", dst.ptr, src, src.nbytes, stream.handle)

    def record(self, stream: Stream) -> Event:
        event = self._call("cuEventCreate", CU_EVENT_DISABLE_TIMING)
        self._events.append(event)
        self._call("cuEventRecord", event, stream.handle)
        return attrs.evolve(stream.record(), handle=event)

    def wait(self, stream: Stream, event: Event) -> None:
        self._call("cuStreamWaitEvent", stream.handle, event.handle, 0)
        stream.wait(event)

    def host_wait(self, event: Event) -> None:
        self._call("cuEventSynchronize", event.handle)

    def staging(self, nbytes: int) -> np.ndarray:
        """`nbytes` of pinned host memory (cuMemHostAlloc), freed by `close()`."""
        buf = self._rt.mapped_allocator.alloc(nbytes)
        self._staging.append(buf)
        return buf.numpy()

    def work(self, stream: Stream, seconds: float, what: str) -> None:
        pass  # the hardware keeps its own time

    def begin_run(self) -> None:
        pass

    def end_run(self) -> None:
        """The copy streams are drained (a failed run may leave a copy in flight into buffers about to be
        freed), then the run's events are destroyed."""
        for stream in self._streams:
            self._call("cuStreamSynchronize", stream.handle)
        events, self._events = self._events, []
        for event in events:
            self._call("cuEventDestroy", event)

    def close(self) -> None:
        """Everything issued is done; then the copy streams, the events and the staging buffers go."""
        if not (self._streams or self._events or self._staging):
            return
        self._rt.synchronize()
        self.end_run()
        for stream in self._streams:
            self._call("cuStreamDestroy", stream.handle)
        self._streams = []
        for buf in self._staging:
            self._rt.mapped_allocator.free(buf)
        self._staging = []
