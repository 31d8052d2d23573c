"""Index-taking kernels refuse indices outside [-n, n-1] with a typed error naming the node, the index,
the data axis and the valid range (numpy would wrap -257 on a 256-row table to row 255)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

import ort_abi
import ort_session
from ort_cpu_ep import c_kernels
from ort_cpu_ep.ops._errors import IndexOutOfRangeError
from ort_session import KernelRunError


def _session(op: str, inputs: dict[str, np.ndarray], opset: int = 18, **attrs) -> ort_session.InferenceSession:
    node = helper.make_node(op, list(inputs), ["y"], name=f"my_{op.lower()}", **attrs)
    g = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info("y", 0, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return ort_session.InferenceSession(onnx.shape_inference.infer_shapes(m))


TABLE = np.arange(256 * 4, dtype=np.float32).reshape(256, 4)
I64 = np.int64

CASES = [
    ("Gather", {"x": TABLE, "i": np.array([0, -257, 3], I64)}, {"axis": 0}, -257, 0, 256),
    ("Gather", {"x": TABLE, "i": np.array([[1], [256]], I64)}, {"axis": 0}, 256, 0, 256),
    ("Gather", {"x": TABLE, "i": np.array([4], np.int32)}, {"axis": 1}, 4, 1, 4),
    ("GatherElements", {"x": TABLE, "i": np.full((2, 4), -300, I64)}, {"axis": 0}, -300, 0, 256),
    ("GatherND", {"x": TABLE, "i": np.array([[0, 1], [2, -5]], I64)}, {}, -5, 1, 4),
    ("GatherND", {"x": TABLE, "i": np.array([[257]], I64)}, {}, 257, 0, 256),
    ("ScatterElements", {"x": TABLE, "i": np.array([[0, 0, 0, -257]], I64),
                         "u": np.ones((1, 4), np.float32)}, {"axis": 0}, -257, 0, 256),
    ("ScatterND", {"x": TABLE, "i": np.array([[300]], I64), "u": np.ones((1, 4), np.float32)}, {}, 300, 0, 256),
    ("ScatterND", {"x": TABLE, "i": np.array([[1, -9]], I64), "u": np.ones((1,), np.float32)}, {}, -9, 1, 4),
]


@pytest.mark.parametrize(("op", "inputs", "attrs", "index", "axis", "size"), CASES)
def test_out_of_range_index_fails_the_run_naming_node_index_axis_range(op, inputs, attrs, index, axis, size):
    sess = _session(op, inputs, **attrs)
    with pytest.raises(KernelRunError) as info:
        sess.run(None, inputs)
    cause = info.value.__cause__
    if op == "Gather" and c_kernels.status().loaded:  # the C Gather: its INVALID_ARGUMENT status, same message
        assert isinstance(cause, ort_abi.KernelError) and cause.code == ort_abi.ErrorCode.INVALID_ARGUMENT, cause
    else:
        assert isinstance(cause, IndexOutOfRangeError)
    msg = str(info.value)
    assert f"my_{op.lower()}" in msg
    assert f"index {index} " in msg
    assert f"data axis {axis} " in msg
    assert f"[{-size}, {size - 1}]" in msg


def test_the_numpy_gather_refuses_with_its_typed_error(monkeypatch):
    """Where the C kernels are off (or absent) the numpy Gather refuses, as IndexOutOfRangeError."""
    inputs = {"x": TABLE, "i": np.array([0, -257, 3], I64)}
    monkeypatch.setenv(c_kernels.DISABLE_ENV, "1")
    c_kernels._load.cache_clear()
    try:
        with pytest.raises(KernelRunError, match=r"my_gather.*index -257 .*\[-256, 255\] for data axis 0") as info:
            _session("Gather", inputs, axis=0).run(None, inputs)
        assert isinstance(info.value.__cause__, IndexOutOfRangeError)
    finally:
        monkeypatch.delenv(c_kernels.DISABLE_ENV)
        c_kernels._load.cache_clear()


def test_scatter_opset10_refuses_out_of_range():
    inputs = {"x": TABLE, "i": np.array([[0, 0, 0, 256]], I64), "u": np.ones((1, 4), np.float32)}
    with pytest.raises(KernelRunError, match=r"index 256 .*\[-256, 255\]"):
        _session("Scatter", inputs, opset=10, axis=0).run(None, inputs)


@pytest.mark.parametrize("ids", [[0, -1, 255, -256], [17]])
def test_in_range_indices_including_negative_still_work(ids):
    inputs = {"x": TABLE, "i": np.array(ids, I64)}
    sess = _session("Gather", inputs, axis=0)
    np.testing.assert_array_equal(sess.run(None, inputs)[0], TABLE[np.array(ids)])


def test_tensor_scatter_linear_write_past_the_cache_is_refused():
    cache = np.zeros((1, 2, 4, 3), np.float32)
    upd = np.ones((1, 2, 2, 3), np.float32)
    inputs = {"c": cache, "u": upd, "w": np.array([3], I64)}
    try:
        sess = _session("TensorScatter", inputs, opset=24, axis=2)
    except Exception as e:  # noqa: BLE001 - onnx without opset 24
        pytest.skip(f"TensorScatter model not buildable here: {e}")
    with pytest.raises(KernelRunError, match=r"TensorScatter node 'my_tensorscatter'.*outside \[0, 3\]"):
        sess.run(None, inputs)
