"""WorkspaceInputShape's three states, KernelInfo, and KernelContext (outputs, scratch, planned workspace)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from ort_abi import (
    ContextCounters,
    InputState,
    KernelContext,
    KernelInfo,
    WorkspaceInputShape,
    workspace_input_shapes,
)

F = TensorProto.FLOAT


def test_shapes_from_a_node_keep_all_three_states(node_factory):
    node = node_factory("Op", [("a", (2, "seq", None), F), None, ("b", None, F), ("s", (), TensorProto.INT64),
                               ("z", (0, 4), F), ("w", None, 0)],
                        initializers={"w": np.zeros((3, 5), np.float16)})
    shapes = workspace_input_shapes(node)
    assert [s.state for s in shapes] == [InputState.SHAPED, InputState.MISSING, InputState.UNSHAPED,
                                         InputState.SHAPED, InputState.SHAPED, InputState.SHAPED]
    assert shapes[0].dims == (2, -1, -1) and not shapes[0].is_static
    assert shapes[3].dims == () and shapes[3].is_static and shapes[3].rank == 0
    assert shapes[4].dims == (0, 4) and shapes[4].is_static
    assert shapes[5].dims == (3, 5) and shapes[5].elem_type == TensorProto.FLOAT16
    assert shapes[2].rank is None and shapes[2].present and not shapes[2].has_shape
    assert not shapes[1].present


@pytest.mark.parametrize(("state", "dims"), [(InputState.SHAPED, None), (InputState.SHAPED, (2, -2)),
                                             (InputState.MISSING, (1,)), (InputState.UNSHAPED, ())])
def test_inconsistent_shape_states_are_rejected(state, dims):
    with pytest.raises(ValueError):
        WorkspaceInputShape(state, dims)


def test_kernel_info_from_node(node_factory):
    node = node_factory("Softmax", [("x", (2, 3), F)], attributes={"axis": -1}, name="/m/sm")
    info = KernelInfo.from_node(node, ep="ep")
    assert (info.node_name, info.op_type, info.input_count, info.output_count) == ("/m/sm", "Softmax", 1, 1)
    assert info.input_types == (F,) and info.attr("axis") == -1 and info.attr("nope", 3) == 3
    with pytest.raises(KeyError, match="'nope'"):
        info.attr("nope")


def test_outputs_come_from_the_pluggable_allocator_once():
    calls = []

    def planned(index, shape, dtype):
        calls.append((index, shape, dtype))
        return np.zeros(shape, dtype)

    counters = ContextCounters()
    ctx = KernelContext([np.ones((2, 2), np.float32)], output_types=[F], output_allocator=planned, counters=counters)
    out = ctx.output(0, (2, 2))
    assert ctx.output(0, [2, 2]) is out and calls == [(0, (2, 2), np.dtype(np.float32))]
    assert counters.allocations == 0  # the session's allocator accounts for its own memory
    with pytest.raises(ValueError, match="already allocated"):
        ctx.output(0, (4,))
    with pytest.raises(IndexError, match="out of range"):
        ctx.output(1, (1,))


@pytest.mark.parametrize("bad", [lambda i, s, d: np.zeros((1,), d), lambda i, s, d: np.zeros(s, np.float64),
                                 lambda i, s, d: np.zeros(s[::-1], d).T, lambda i, s, d: [0]])
def test_allocator_results_are_checked(bad):
    ctx = KernelContext([np.ones((2, 3), np.float32)], output_allocator=bad)
    with pytest.raises(TypeError, match="output allocator returned"):
        ctx.output(0, (2, 3))


def test_default_output_dtype_and_counting():
    ctx = KernelContext([None, np.ones(3, np.int64)], output_count=2, output_types=[0, TensorProto.FLOAT16])
    assert ctx.input(0) is None and ctx.output(0, (3,)).dtype == np.int64
    assert ctx.output(1, (3,)).dtype == np.float16
    assert ctx.counters.allocations == 2
    with pytest.raises(ValueError, match="no declared type"):
        KernelContext([None]).output(0, (1,))


@pytest.mark.parametrize(("workspace", "slot", "nbytes", "served"), [
    ({0: np.zeros(64, np.uint8)}, 0, 64, True),
    ({0: np.zeros(64, np.uint8)}, 0, 16, True),
    ({0: np.zeros(64, np.uint8)}, 0, 65, False),   # larger than declared
    ({0: np.zeros(64, np.uint8)}, 1, 8, False),    # slot not planned
    (None, 0, 8, False),                           # no plan at all
])
def test_preallocated_workspace_or_none(workspace, slot, nbytes, served):
    ctx = KernelContext([np.ones(1, np.float32)], workspace=workspace)
    buf = ctx.preallocated_workspace(slot, nbytes)
    if served:
        assert buf.nbytes == nbytes and np.shares_memory(buf, workspace[slot])
        assert (ctx.counters.workspace_from_plan, ctx.counters.workspace_misses) == (1, 0)
    else:
        assert buf is None and (ctx.counters.workspace_from_plan, ctx.counters.workspace_misses) == (0, 1)


def test_scratch_is_the_counted_fallback():
    ctx = KernelContext([np.ones(1, np.float32)])
    a, b = ctx.scratch(10), ctx.scratch(0)
    assert a.nbytes == 10 and b.nbytes == 0 and not np.shares_memory(a, ctx.scratch(10))
    assert (ctx.counters.scratch_fallbacks, ctx.counters.scratch_bytes, ctx.counters.allocations) == (3, 20, 3)
    with pytest.raises(ValueError, match="byte count"):
        ctx.scratch(-1)


def test_device_kernels_get_device_workspace_and_scratch():
    from ort_abi import DeviceBuffer, NullDeviceAllocator

    dev = NullDeviceAllocator()
    planned = dev.alloc(128)

    def device_outputs(index, shape, dtype):
        class DeviceTensor:
            def __init__(self):
                self.shape, self.dtype = shape, dtype
                self.buffer = dev.alloc(int(np.prod(shape)) * dtype.itemsize)

        return DeviceTensor()

    x = device_outputs(0, (2, 4), np.dtype(np.float32))
    ctx = KernelContext([x], output_types=[F], output_allocator=device_outputs, workspace={0: planned},
                        scratch_allocator=dev)
    assert ctx.input(0) is x and ctx.output(0, (2, 4)).buffer.nbytes == 32
    ws = ctx.preallocated_workspace(0, 64)
    assert isinstance(ws, DeviceBuffer) and not ws.owned and ws.ptr == planned.ptr and ws.nbytes == 64
    assert ctx.preallocated_workspace(0, 129) is None
    scratch = ctx.scratch(256)
    assert isinstance(scratch, DeviceBuffer) and dev.live_buffers == 4
    ctx.close()
    assert not scratch.alive and dev.live_buffers == 3
