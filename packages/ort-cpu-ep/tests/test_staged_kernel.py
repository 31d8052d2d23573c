"""The simulated GPU's staging: a host kernel on a device whose memory the host cannot read."""

from __future__ import annotations

import numpy as np
import pytest

import ort_abi
from ort_cpu_ep import StagedKernel


def _ctx(inputs, allocator=None, scratch_allocator=None):
    def out(i, shape, dtype):
        return np.empty(shape, dtype) if allocator is None else ort_abi.empty_tensor(allocator, shape, dtype)

    return ort_abi.KernelContext(inputs, output_count=1, output_allocator=out, scratch_allocator=scratch_allocator)


class _ScratchKernel:
    def __init__(self, nbytes):
        self.nbytes = nbytes

    def compute(self, ctx):
        ws = ctx.preallocated_workspace(0, 8)
        buf = ws if ws is not None else ctx.scratch(self.nbytes)
        assert isinstance(buf, np.ndarray)  # the host kernel gets host memory either way
        ctx.output(0, (2,), np.float32)[...] = ctx.input(0) * 2


def test_staged_kernel_reserves_scratch_on_the_device_and_uses_planned_workspace():
    dev = ort_abi.NullDeviceAllocator(capacity=64)
    x = ort_abi.tensor_from_host(dev, np.array([1, 2], np.float32))
    ctx = _ctx([x], dev, scratch_allocator=dev)
    StagedKernel(_ScratchKernel(40)).compute(ctx)
    assert ctx.counters.scratch_fallbacks == 1 and dev.bytes_in_use == 8 + 8 + 40  # input, output, scratch
    ctx.close()
    assert dev.bytes_in_use == 16
    assert np.array_equal(ort_abi.tensor_to_host(ctx.outputs[0]), [2, 4])
    too_big = _ctx([x], dev, scratch_allocator=dev)
    with pytest.raises(ort_abi.AllocationError, match="capacity 64"):
        StagedKernel(_ScratchKernel(100)).compute(too_big)
    planned = dev.alloc(8)
    ctx = ort_abi.KernelContext([x], output_count=1, workspace={0: planned},
                                output_allocator=lambda i, s, d: ort_abi.empty_tensor(dev, s, d), scratch_allocator=dev)
    StagedKernel(_ScratchKernel(40)).compute(ctx)
    assert (ctx.counters.workspace_from_plan, ctx.counters.scratch_fallbacks) == (1, 0)


class _Double:
    def compute(self, ctx):
        ctx.output(0, (2,), np.float32)[...] = ctx.input(0) * 2


def test_a_staged_kernel_reading_a_copy_still_in_flight_is_refused_and_reads_it_once_waited():
    import ort_cpu_ep
    from ort_graph import Graph

    sim = ort_cpu_ep.SimulatedGpuExecutionProvider(Graph(), {"": 17})
    transfers = sim.transfers()
    assert transfers is sim.transfers() and isinstance(transfers, ort_abi.SimulatedTransfers) and not transfers.pinned
    assert isinstance(ort_cpu_ep.CpuExecutionProvider(Graph(), {"": 17}).transfers(), ort_abi.ImmediateTransfers)
    dev = sim.allocator
    x = ort_abi.empty_tensor(dev, (2,), np.float32)
    copy = transfers.stream("copy")
    transfers.copy_async(np.array([3, 4], np.float32), x.buffer, copy)
    kernel = StagedKernel(_Double(), transfers=sim.transfers)
    with pytest.raises(ort_abi.StreamOrderError, match="has not completed"):
        kernel.compute(_ctx([x], dev))
    transfers.wait(transfers.compute, transfers.record(copy))
    ctx = _ctx([x], dev)
    kernel.compute(ctx)
    assert np.array_equal(ort_abi.tensor_to_host(ctx.outputs[0]), [6, 8])  # the copied bytes, not stale ones
    dev.free(ctx.outputs[0].buffer)
    dev.free(x.buffer)
