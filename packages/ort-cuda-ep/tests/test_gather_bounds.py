"""The CUDA Gather kernel with device-resident indices cannot raise: an index outside [-n, n-1] writes
zeros for its row (movement.cu `gather_impl`) and never reads outside the table. Checked on the emulating
runtime, which executes the launch with the kernel's semantics."""

from __future__ import annotations

import numpy as np
import pytest

from ort_abi import DeviceTensor, tensor_from_host, tensor_to_host
from ort_cuda_ep._launch import ScratchOnly, compute
from ort_cuda_ep._ops import find_spec
from ort_cuda_ep.testing import EmulatingRuntime


def _gather(table: np.ndarray, idx: np.ndarray, axis: int = 0) -> np.ndarray:
    rt = EmulatingRuntime()
    spec = find_spec("Gather", "", 13)
    args = [np.asarray(a) if i in spec.host_inputs else tensor_from_host(rt.allocator, np.asarray(a))
            for i, a in enumerate([table, idx])]

    def new(i, shape, dtype):
        return np.empty(shape, dtype) if i in spec.host_outputs else rt.empty(shape, dtype)

    (out,) = compute(rt, spec, "g", args, {"axis": axis}, ScratchOnly(rt), 1, out=new)
    return tensor_to_host(out) if isinstance(out, DeviceTensor) else out


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_out_of_range_indices_write_zero_rows(dtype):
    table = np.arange(1, 256 * 4 + 1, dtype=np.float32).reshape(256, 4)  # no zero in the table
    idx = np.array([0, -257, 255, 256, -1, 2**31 - 1 if dtype == np.int32 else 2**40], dtype)
    y = _gather(table, idx)
    np.testing.assert_array_equal(y[[0, 2, 4]], table[[0, 255, 255]])
    np.testing.assert_array_equal(y[[1, 3, 5]], 0)


def test_out_of_range_on_an_inner_axis_writes_zeros():
    x = np.arange(1, 2 * 3 * 4 + 1, dtype=np.float32).reshape(2, 3, 4)
    y = _gather(x, np.array([1, 3, -4], np.int64), axis=1)
    np.testing.assert_array_equal(y[:, 0], x[:, 1])
    np.testing.assert_array_equal(y[:, 1:], 0)
