"""A host kernel run on the simulated device through explicit staging copies (the boundary copy itself is
`ort_abi.CopyKernel`)."""

from __future__ import annotations

from typing import Any

import numpy as np

import ort_abi

__all__ = ["StagedKernel"]


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

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def declare_workspace(self, shapes: list[ort_abi.WorkspaceInputShape]) -> Any:
        declare = getattr(self.inner, "declare_workspace", None)
        return None if declare is None else declare(shapes)

    def release(self) -> None:
        ort_abi.release_kernel(self.inner)

    def compute(self, ctx: ort_abi.KernelContext) -> None:
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
