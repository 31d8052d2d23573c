"""The registry face of the CUDA kernels: create, Level-1 estimate, Level-2 declaration, compute.

All three workspace numbers come from one recipe (``_workspace``): the estimate reads the SM count
from the EP handle through the host API, the declaration from the kernel's EP, and compute asks
for the same bytes at run time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ort_abi import (
    DeviceBuffer,
    DeviceTensor,
    KernelContext,
    KernelInfo,
    WorkspaceInputShape,
    WorkspaceSlot,
    tensor_to_host,
)
from ort_partition import DeviceProfile

from ._errors import CudaEpError
from ._launch import compute
from ._ops import NodeFacts, OpSpec
from ._runtime import CudaRuntime, DeviceArray
from ._workspace import SLOT_ID, estimate_bytes, known_empty, workspace_bytes

if TYPE_CHECKING:
    from ._ep import CudaExecutionProvider

__all__ = ["CudaKernel", "make_estimate_func", "declared_slots"]


def declared_slots(spec: OpSpec, shapes: Sequence[WorkspaceInputShape], attrs: Mapping[str, Any],
                   profile: DeviceProfile) -> list[WorkspaceSlot] | None:
    """Level 2: one slot with the recipe's bytes; [] when the kernel needs none (a known-empty output
    such as MatMulNBits' A of [0, -1, K] included); None when the shapes are not static or the recipe
    says unavailable (the kernel then falls back to scratch)."""
    if spec.recipe == "none":
        return []
    if any(s.present and not s.is_static for s in shapes):
        partial = [None if not s.has_shape else tuple(None if d < 0 else d for d in s.dims or ()) for s in shapes]
        return [] if known_empty(spec.recipe, partial, attrs, [s.present for s in shapes]) else None
    dims: list[tuple[int, ...] | None] = []
    dtypes = [s.elem_type for s in shapes]
    for s in shapes:
        dims.append(tuple(s.dims or ()) if s.present else None)
    n = workspace_bytes(spec.recipe, dims, dtypes, attrs, profile)
    if n is None:
        return None
    return [WorkspaceSlot(SLOT_ID, n)] if n else []


def make_estimate_func(ep: CudaExecutionProvider, spec: OpSpec):
    """Level 1: ``estimate(api, node, ep_handle) -> bytes | None``; the SM count comes from the handle."""

    def estimate(api: Any, node: Any, ep_handle: Any) -> int | None:
        profile = ep.profile_for(api, ep_handle)
        if profile is None:
            return None
        facts = NodeFacts.from_node(node)
        return estimate_bytes(spec.recipe, list(facts.shapes), facts.dtypes, facts.attrs, profile,
                              ep.estimate_ranges(facts), facts.present_inputs())

    estimate.__name__ = f"estimate_{spec.op_type}"
    return estimate


class _ContextWorkspace:
    """Planned device workspace from the context when the plan holds a CUDA DeviceBuffer for the slot,
    else a device scratch buffer (freed after compute). Counters go to the context and the runtime."""

    def __init__(self, ctx: KernelContext, rt: CudaRuntime) -> None:
        self.ctx, self.rt = ctx, rt
        self.scratch_buffers: list[DeviceBuffer] = []

    def preallocated(self, slot_id: int, nbytes: int) -> int | None:
        planned = self.ctx.workspace.get(slot_id)
        if planned is not None and not (isinstance(planned, DeviceBuffer) and planned.device.type == "cuda"):
            self.ctx.counters.workspace_misses += 1  # planned in host memory: unusable by a device kernel
            return None
        view = self.ctx.preallocated_workspace(slot_id, nbytes)  # None when unplanned or too small
        return None if view is None else view.ptr

    def scratch(self, nbytes: int) -> int:
        buf = self.rt.allocator.alloc(nbytes)
        self.scratch_buffers.append(buf)
        self.ctx.counters.scratch_fallbacks += 1
        self.ctx.counters.scratch_bytes += nbytes
        return buf.ptr

    def release(self) -> None:
        while self.scratch_buffers:
            self.rt.allocator.free(self.scratch_buffers.pop())


class CudaKernel:
    """One node's kernel. Device tensors in the context are used in place: inputs are read where they
    are, outputs are written into the tensors the context's allocator returns (a session's planned
    blocks). Host arrays are copied to the device explicitly and host outputs copied back."""

    has_declaration = True

    def __init__(self, ep: CudaExecutionProvider, spec: OpSpec, info: KernelInfo) -> None:
        self.ep, self.spec, self.info = ep, spec, info
        self.attrs = dict(info.attributes)
        self.node_name = info.node_name

    def declare_workspace(self, shapes: list[WorkspaceInputShape]) -> list[WorkspaceSlot] | None:
        return declared_slots(self.spec, shapes, self.attrs, self.ep.require_profile())

    def compute(self, ctx: KernelContext) -> None:
        rt = self.ep.runtime
        ws = _ContextWorkspace(ctx, rt)
        owned: list[DeviceArray] = []
        to_host: list[tuple[int, DeviceArray]] = []  # outputs the context holds on the host

        def output(index: int, shape: tuple[int, ...], dtype: np.dtype) -> DeviceArray:
            dst = ctx.output(index, shape, dtype)
            if index in self.spec.host_outputs:
                return dst  # made in host memory (Shape's output): the launch code fills it on the host
            if isinstance(dst, DeviceTensor):
                if dst.device != rt.allocator.device:
                    raise CudaEpError(f"node {self.node_name!r}: output {index} was allocated on {dst.device}, "
                                      f"not on this EP's {rt.allocator.device}; place it on the device that runs the node")
                return dst
            tmp = rt.empty(shape, dtype)
            owned.append(tmp)
            to_host.append((index, tmp))
            return tmp

        try:
            inputs = []
            for i, a in enumerate(ctx.inputs):
                if a is None or isinstance(a, DeviceTensor):  # device tensors pass through, borrowed
                    inputs.append(a)
                    continue
                if i in self.spec.host_inputs:  # shapes, axes, slice bounds: read on the host
                    inputs.append(np.asarray(a))
                    continue
                d = rt.to_device(np.asarray(a, order="C"))  # explicit host -> device copy
                inputs.append(d)
                owned.append(d)
            compute(rt, self.spec, self.node_name, inputs, self.attrs, ws, ctx.output_count, out=output)
            for index, tmp in to_host:
                tensor_to_host(tmp, ctx.outputs[index])  # explicit device -> host copy
        finally:
            ws.release()
            for d in owned:
                rt.release(d)
