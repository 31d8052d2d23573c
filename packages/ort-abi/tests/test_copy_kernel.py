"""The boundary copy kernel (`ort_abi.CopyKernel`): host <-> device and device <-> device through explicit
transfers; values that are not tensors pass through."""

from __future__ import annotations

import numpy as np
import pytest

import ort_abi


def _ctx(inputs, allocator=None, scratch_allocator=None):
    def out(i, shape, dtype):
        return np.empty(shape, dtype) if allocator is None else ort_abi.empty_tensor(allocator, shape, dtype)

    return ort_abi.KernelContext(inputs, output_count=1, output_allocator=out, scratch_allocator=scratch_allocator)


@pytest.mark.parametrize("shape", [(), (3,), (2, 0), (2, 3)])
def test_copy_kernel_round_trips_host_device_and_device_device(shape):
    a, b = ort_abi.NullDeviceAllocator(), ort_abi.NullDeviceAllocator(ort_abi.EpIdentity("Other", "other", 1))
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    up = _ctx([x], a)
    ort_abi.CopyKernel().compute(up)
    same = _ctx([up.outputs[0]], a)
    ort_abi.CopyKernel().compute(same)
    other = _ctx([same.outputs[0]], b)
    ort_abi.CopyKernel().compute(other)
    down = _ctx([other.outputs[0]])
    ort_abi.CopyKernel().compute(down)
    assert down.outputs[0].shape == shape and np.array_equal(down.outputs[0], x)


def test_copy_kernel_passes_values_that_are_not_tensors():
    seq = [np.zeros(2, np.float32)]
    ctx = _ctx([seq], ort_abi.NullDeviceAllocator())
    ort_abi.CopyKernel().compute(ctx)
    assert ctx.outputs[0] is seq
