"""The data-movement ops without a GPU: their launch code runs on a recording runtime whose launches
are emulated in numpy with exactly the kernels' semantics (movement.cu: strided copy, gather, cast),
and every output is compared with onnx.reference on the same single-node model."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto

from ort_abi import DeviceTensor, tensor_from_host, tensor_to_host
from ort_cuda_ep._launch import ScratchOnly, compute
from ort_cuda_ep._ops import find_spec
from ort_cuda_ep.testing import EmulatingRuntime, run_with_reference


def _run(op, inputs, attrs=None, opset=17, host=()):
    assert set(host) == set(find_spec(op, "", opset).host_inputs)
    return run_with_reference(op, inputs, attrs, opset)


def _check(op, inputs, attrs=None, opset=17, host=()):
    ours, ref, rt = _run(op, inputs, attrs, opset, host)
    for a, b in zip(ours, ref):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    return rt


R = np.random.default_rng(0)
X = R.standard_normal((2, 3, 4)).astype(np.float32)
I64 = np.int64


@pytest.mark.parametrize("target", [[4, -1], [0, 12], [24], [2, 3, 2, 2], [-1, 1, 4]])
def test_reshape(target):
    _check("Reshape", [X, np.array(target, I64)], host=(1,))


@pytest.mark.parametrize("op,axes,opset", [("Squeeze", [1], 13), ("Squeeze", None, 13), ("Unsqueeze", [0, -1], 13),
                                           ("Unsqueeze", [2], 13), ("Squeeze", [-2], 11), ("Unsqueeze", [1, 3], 11)])
def test_squeeze_and_unsqueeze(op, axes, opset):
    x = R.standard_normal((2, 1, 4)).astype(np.float16)
    if opset >= 13:
        _check(op, [x, None if axes is None else np.array(axes, I64)], opset=opset, host=(1,))
    else:
        _check(op, [x], {"axes": axes}, opset=opset)


@pytest.mark.parametrize("axis", [0, 1, 2, -1, 3])
def test_flatten(axis):
    _check("Flatten", [X], {"axis": axis})


@pytest.mark.parametrize("perm", [None, [0, 2, 1], [2, 0, 1], [1, 0, 2]])
def test_transpose(perm):
    _check("Transpose", [X], {} if perm is None else {"perm": perm})


def test_transpose_rank6_and_float16():
    x = R.standard_normal((2, 1, 3, 2, 2, 3)).astype(np.float16)
    _check("Transpose", [x], {"perm": [5, 3, 1, 0, 2, 4]})


@pytest.mark.parametrize("starts,ends,axes,steps", [
    ([1], [3], [1], [1]), ([0, 1], [2, 4], [0, 2], None), ([-1], [-4], [2], [-1]), ([2], [0], [1], [-2]),
    ([0], [2**62], [-1], [2]), ([5], [9], [2], [1]), ([-100], [100], [0], None)])
def test_slice(starts, ends, axes, steps):
    inputs = [X, np.array(starts, I64), np.array(ends, I64), np.array(axes, I64)]
    inputs.append(None if steps is None else np.array(steps, I64))
    _check("Slice", inputs, opset=13, host=(1, 2, 3, 4))


def test_slice_opset_9_attributes():
    _check("Slice", [X], {"starts": [0, 1], "ends": [1, 3], "axes": [0, 1]}, opset=9)


@pytest.mark.parametrize("shape,target", [((3, 1), (2, 3, 4)), ((1,), (5,)), ((2, 1, 4), (1, 3, 1)), ((4,), (2, 1, 4))])
def test_expand(shape, target):
    _check("Expand", [R.standard_normal(shape).astype(np.float32), np.array(target, I64)], host=(1,))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat_of_three_including_an_empty_one(axis):
    a = R.standard_normal((2, 3, 4)).astype(np.float32)
    shape = list(a.shape)
    shape[axis] = 0
    _check("Concat", [a, np.zeros(shape, np.float32), a * 2], {"axis": axis})


@pytest.mark.parametrize("axis,indices", [(0, np.array([[1, -1], [0, 1]], I64)), (1, np.array([2, 0, -3], np.int32)),
                                          (2, np.array(3, I64)), (0, np.array([], I64))])
def test_gather(axis, indices):
    _check("Gather", [X, indices], {"axis": axis}, opset=13)


def test_gather_embedding_rows_in_float16():
    table = R.standard_normal((50, 8)).astype(np.float16)
    _check("Gather", [table, np.array([[3, 49, 0, 7]], I64)], opset=13)


@pytest.mark.parametrize("src,to", [(np.float32, TensorProto.FLOAT16), (np.float16, TensorProto.FLOAT),
                                    (np.int64, TensorProto.FLOAT), (np.float32, TensorProto.INT32),
                                    (np.float32, TensorProto.INT64), (np.int32, TensorProto.FLOAT16),
                                    (np.float32, TensorProto.FLOAT), (np.float32, TensorProto.BFLOAT16),
                                    (ml_dtypes.bfloat16, TensorProto.FLOAT), (ml_dtypes.bfloat16, TensorProto.FLOAT16),
                                    (np.int64, TensorProto.BFLOAT16)])
def test_cast(src, to):
    x = (R.standard_normal((3, 5)) * 100).astype(src)
    _check("Cast", [x], {"to": to}, opset=21)


@pytest.mark.parametrize("attrs", [{}, {"start": 1}, {"end": -1}, {"start": -2, "end": 3}])
def test_shape_is_a_host_output_without_a_launch(attrs):
    rt = _check("Shape", [X], attrs, opset=21)
    assert rt.launches == []


def test_reshape_planned_in_place_moves_nothing():
    rt = EmulatingRuntime()
    x = tensor_from_host(rt.allocator, X)
    spec = find_spec("Reshape", "", 17)
    (y,) = compute(rt, spec, "n", [x, np.array([6, 4], I64)], {}, ScratchOnly(rt),
                   out=lambda i, shape, dtype: DeviceTensor(x.buffer.view(0, x.nbytes), shape, dtype))
    assert y.ptr == x.ptr and y.shape == (6, 4) and rt.launches == []
    np.testing.assert_array_equal(tensor_to_host(y), X.reshape(6, 4))


@pytest.mark.parametrize("op,inputs,attrs,opset", [
    ("Reshape", [X, np.array([4, -1], I64)], {}, 17),
    ("Slice", [X, np.array([-1], I64), np.array([-4], I64), np.array([2], I64), np.array([-1], I64)], {}, 13),
    ("Gather", [X, np.array([[1, -1]], I64)], {"axis": 1}, 13),
    ("Cast", [X * 100], {"to": TensorProto.INT32}, 21),
    ("Shape", [X], {"start": 1}, 21),
])
def test_the_kernel_path_keeps_host_inputs_and_outputs_on_the_host(monkeypatch, op, inputs, attrs, opset):
    """CudaKernel through the EP's run_op (what a session calls): host inputs are not copied to the
    device, Shape's host output is filled without a launch, other outputs come back explicitly."""
    from ort_cuda_ep import CudaExecutionProvider
    from ort_cuda_ep.testing import fake_device

    monkeypatch.setattr("ort_cuda_ep._ep.discover", lambda device_id=0: fake_device("a100"))
    ep = CudaExecutionProvider()
    ep._runtime = EmulatingRuntime()
    (y,), _ = ep.run_op(op, inputs, attrs, opset=opset)
    _, (want,), _ = _run(op, inputs, attrs, opset, find_spec(op, "", opset).host_inputs)  # onnx.reference
    assert y.shape == want.shape and y.dtype == want.dtype
    np.testing.assert_array_equal(y, want)
    host = find_spec(op, "", opset).host_inputs
    copied = ep.allocator.alloc_count
    assert copied == sum(1 for i, a in enumerate(inputs) if a is not None and i not in host) + (op != "Shape")
    assert ep.allocator.bytes_in_use == 0


def test_bfloat16_data_moves_by_element_size():
    x = R.standard_normal((3, 4, 2)).astype(ml_dtypes.bfloat16)
    rt = _check("Transpose", [x], {"perm": [2, 0, 1]})
    assert [e for e, *_ in rt.launches] == ["strided_copy_b2"]
    _check("Gather", [x, np.array([2, 0], I64)], {"axis": 0}, opset=13)
