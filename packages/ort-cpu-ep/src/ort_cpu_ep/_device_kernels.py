"""A host kernel run on the simulated device through explicit staging copies (the boundary copy itself is
`ort_abi.CopyKernel`), and the simulated device's Capture surface (003), which records each staged kernel call
while it runs and replays the recorded calls."""

from __future__ import annotations

from typing import Any

import numpy as np

import ort_abi

__all__ = ["SimulatedCapture", "SimulatedCaptureSurface", "StagedKernel"]


class _StagingContext(ort_abi.KernelContext):
    """The host side of a staged call: host inputs and outputs; a scratch request reserves the bytes on
    the device (through the outer context, counted there) and hands the kernel a host mirror."""

    def __init__(self, outer: ort_abi.KernelContext, inputs: list[Any], workspace: dict[int, np.ndarray]) -> None:
        super().__init__(inputs, output_count=outer.output_count, output_types=outer.output_types,
                         output_allocator=_host_output, workspace=workspace, counters=outer.counters,
                         node_name=outer.node_name)
        self.outer = outer

    def scratch(self, nbytes: int) -> Any:
        self.outer.scratch(nbytes)  # the device bytes a real kernel would take, freed with the outer context
        return np.empty(int(nbytes), np.uint8)


def _host_output(index: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    return np.empty(shape, dtype)  # staging, not a runtime allocation: not counted


class StagedKernel:
    """A host kernel on a device whose memory the host cannot read (the simulated GPU): device inputs
    are copied to the host, the kernel runs there, and each output is copied into the device tensor
    the context allocates (its planned block). Planned workspace slots get host mirrors of their size,
    so the plan's workspace is used (and counted) as a device kernel would use it."""

    def __init__(self, inner: Any, capture: SimulatedCapture | None = None, transfers: Any = None) -> None:
        self.inner = inner
        self.capture = capture
        self.transfers = transfers  # a callable giving the device's SimulatedTransfers: reads are checked there

    def declare_workspace(self, shapes: list[ort_abi.WorkspaceInputShape]) -> Any:
        declare = getattr(self.inner, "declare_workspace", None)
        return None if declare is None else declare(shapes)

    def release(self) -> None:
        ort_abi.release_kernel(self.inner)

    def compute(self, ctx: ort_abi.KernelContext) -> None:
        if self.transfers is not None:  # a copy still in flight into what it reads is a StreamOrderError
            self.transfers().kernel_reads([a.buffer for a in ctx.inputs if isinstance(a, ort_abi.DeviceTensor)],
                                          f"node {ctx.node_name!r}")
        inputs = [ort_abi.tensor_to_host(a) if isinstance(a, ort_abi.DeviceTensor) else a for a in ctx.inputs]
        mirrors = {slot: np.empty(buf.nbytes, np.uint8) for slot, buf in ctx.workspace.items()}
        host = _StagingContext(ctx, inputs, mirrors)
        self.inner.compute(host)
        for i, out in enumerate(host.outputs):
            if isinstance(out, np.ndarray | np.generic) and np.asarray(out).dtype != object:
                arr = np.asarray(out, order="C")
                dst = ctx.output(i, arr.shape, arr.dtype)
                if isinstance(dst, ort_abi.DeviceTensor):
                    if arr.nbytes:
                        ort_abi.copy_host_to_device(arr, dst.buffer.view(0, dst.nbytes))
                else:
                    np.copyto(dst, arr)
            else:
                ctx.outputs[i] = out  # sequences, optionals, strings stay host objects
        if self.capture is not None and self.capture.active:
            self.capture.record(self.inner, ctx, {slot: buf.nbytes for slot, buf in mirrors.items()})


class SimulatedCapture:
    """The simulated device's captured graph: it runs each staged call while it records it (so the
    region's work has run once when the capture ends), and replays a call by staging the same device
    inputs through the same kernel into the same device outputs (fixed addresses: the planned blocks)."""

    def __init__(self) -> None:
        self.graph: ort_abi.RecordedCalls | None = None

    @property
    def active(self) -> bool:
        return self.graph is not None

    def begin(self) -> None:
        if self.graph is not None:
            raise ort_abi.CaptureError("begin_capture while a capture is open; end or abort it first",
                                       reason="already open")
        self.graph = ort_abi.RecordedCalls()
        self.graph.capturing = True

    def end(self) -> ort_abi.RecordedCalls:
        graph, self.graph = self.graph, None
        if graph is None:
            raise ort_abi.CaptureError("end_capture without begin_capture", reason="not capturing")
        graph.capturing = False
        return graph

    def abort(self) -> None:
        self.graph = None

    def record(self, kernel: Any, ctx: ort_abi.KernelContext, workspace: dict[int, int]) -> None:
        outputs = list(ctx.outputs)
        for i, out in enumerate(outputs):
            if not isinstance(out, ort_abi.DeviceTensor):
                raise ort_abi.CaptureError(
                    f"output {i} of node {ctx.node_name!r} is a host object ({type(out).__name__}), not a device "
                    "tensor, inside the captured region: a replay cannot reproduce it", reason="a host output")
        inputs, name, count, types = list(ctx.inputs), ctx.node_name, ctx.output_count, ctx.output_types

        def replay() -> None:
            host_inputs = [ort_abi.tensor_to_host(a) if isinstance(a, ort_abi.DeviceTensor) else a for a in inputs]
            mirrors = {slot: np.empty(n, np.uint8) for slot, n in workspace.items()}
            host = ort_abi.KernelContext(host_inputs, output_count=count, output_types=types,
                                         output_allocator=_host_output, workspace=mirrors, node_name=name)
            kernel.compute(host)
            for i, (arr, dst) in enumerate(zip(host.outputs, outputs)):
                arr = np.asarray(arr, order="C")
                if tuple(arr.shape) != tuple(dst.shape) or arr.dtype != dst.dtype:
                    raise ort_abi.CaptureError(
                        f"replay of node {name!r}: output {i} came out as {arr.shape!r} {arr.dtype}, captured as "
                        f"{tuple(dst.shape)!r} {dst.dtype}; a captured graph replays fixed shapes",
                        reason="a changed output shape")
                if arr.nbytes:
                    ort_abi.copy_host_to_device(arr, dst.buffer.view(0, dst.nbytes))

        self.graph.record(replay)  # type: ignore[union-attr]


class SimulatedCaptureSurface:
    """The Capture surface of a provider whose device kernels are `StagedKernel(kernel, self.capture)`."""

    @property
    def capture(self) -> SimulatedCapture:
        state = self.__dict__.get("_simulated_capture")
        if state is None:
            state = self.__dict__["_simulated_capture"] = SimulatedCapture()
        return state

    def begin_capture(self) -> None:
        self.capture.begin()

    def end_capture(self) -> ort_abi.RecordedCalls:
        return self.capture.end()

    def abort_capture(self) -> None:
        self.capture.abort()
