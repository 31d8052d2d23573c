"""CUDA graphs for the Capture contract surface, through cuda-python's driver API.

`begin` creates (once) a non-blocking stream and starts a relaxed-mode capture on it (relaxed: a kernel's
module may be loaded on its first launch, inside the capture)
(`cuStreamBeginCapture`); while it is open the runtime launches kernels into that stream, which records
them instead of running them, and refuses host copies and allocations (a graph cannot repeat them:
`ort_abi.CaptureError`). `end` closes the capture (`cuStreamEndCapture`), instantiates the graph
(`cuGraphInstantiate`) and launches it once (`cuGraphLaunch` on the legacy stream, so it is ordered after
the host's input copies and before its output copies); `CudaGraph.replay` launches it again. `abort`
ends a capture that failed midway and drops the partial graph.
"""

from __future__ import annotations

from typing import Any

from ort_abi import CaptureError

__all__ = ["CudaGraph", "StreamCapture"]

CU_STREAM_NON_BLOCKING = 1
CU_STREAM_CAPTURE_MODE_RELAXED = 2


class CudaGraph:
    """An instantiated CUDA graph of `launches` kernels; freed by `release()` (once)."""

    def __init__(self, runtime: Any, graph: Any, executable: Any, launches: int) -> None:
        self._rt, self._graph, self._exec, self.launches = runtime, graph, executable, launches

    def replay(self) -> None:
        if self._exec is None:
            raise CaptureError("replay of a released CUDA graph; capture again", reason="released")
        self._rt.activate()
        self._rt.check(self._rt.driver.cuGraphLaunch(self._exec, 0), "cuGraphLaunch")

    def release(self) -> None:
        if self._exec is not None:
            self._rt.driver.cuGraphExecDestroy(self._exec)
            self._rt.driver.cuGraphDestroy(self._graph)
            self._exec = self._graph = None


class StreamCapture:
    """One runtime's capture state: the capture stream and the launches recorded so far."""

    def __init__(self, runtime: Any) -> None:
        self._rt = runtime
        self.stream: Any = None
        self.active = False
        self.launches = 0

    def begin(self) -> None:
        rt = self._rt
        if self.active:
            raise CaptureError("begin_capture while a capture is open; end or abort it first", reason="already open")
        rt.activate()
        if self.stream is None:
            self.stream = rt.check(rt.driver.cuStreamCreate(CU_STREAM_NON_BLOCKING), "cuStreamCreate")
        rt.synchronize()  # work queued before the region is not part of it
        rt.check(rt.driver.cuStreamBeginCapture(self.stream, _mode()), "cuStreamBeginCapture")
        self.active, self.launches = True, 0

    def end(self) -> CudaGraph:
        rt = self._rt
        if not self.active:
            raise CaptureError("end_capture without begin_capture", reason="not capturing")
        self.active = False
        graph = rt.check(rt.driver.cuStreamEndCapture(self.stream), "cuStreamEndCapture")
        executable = rt.check(rt.driver.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
        captured = CudaGraph(rt, graph, executable, self.launches)
        captured.replay()  # the region's work runs once now: capturing recorded it without running it
        return captured

    def abort(self) -> None:
        if not self.active:
            return
        self.active = False
        result = self._rt.driver.cuStreamEndCapture(self.stream)  # invalidated captures end with an error
        err, graph = (result[0], result[1]) if isinstance(result, tuple) and len(result) > 1 else (result, None)
        if int(err) == 0 and graph:
            self._rt.driver.cuGraphDestroy(graph)

    def refuse(self, what: str) -> None:
        """Raise CaptureError when a capture is open: `what` (a host copy, an allocation) cannot be replayed."""
        if self.active:
            raise CaptureError(f"{what} inside the captured region: a CUDA graph replays only the kernels it "
                               "recorded, not host work; keep the region on the device (inputs and outputs "
                               "through the planned buffers), or disable graph capture", reason=what)

    def close(self) -> None:
        self.abort()
        if self.stream is not None:
            self._rt.driver.cuStreamDestroy(self.stream)
            self.stream = None


def _mode() -> Any:
    try:
        from cuda.bindings import driver

        return driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
    except ImportError:  # pragma: no cover - cuda-python is a dependency
        return CU_STREAM_CAPTURE_MODE_RELAXED
