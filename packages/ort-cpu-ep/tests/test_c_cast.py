"""The C Cast (csrc/cast_kernel.c) between float, double, int8, uint8, int32, int64 and bool against the numpy kernel
and onnxruntime, every pair of types, one node at a time through the CPU provider; and which nodes it takes."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from onnx import TensorProto, helper

from ort_cpu_ep.testing import chosen_language, one_node_model, onnxruntime_outputs, run_one_node

T = TensorProto
TYPES = {T.FLOAT: np.float32, T.DOUBLE: np.float64, T.INT8: np.int8, T.UINT8: np.uint8, T.INT32: np.int32,
         T.INT64: np.int64, T.BOOL: np.bool_}
PAIRS = [(a, b) for a, b in itertools.product(TYPES, TYPES)
         if not (a in (T.FLOAT, T.DOUBLE) and b in (T.INT8, T.UINT8))]


def _model(src, dst, shape=(3, 37)):
    return one_node_model(helper.make_node("Cast", ["x"], ["y"], to=dst),
                          [helper.make_tensor_value_info("x", src, list(shape))],
                          [helper.make_tensor_value_info("y", dst, list(shape))])


def _values(src, shape=(3, 37), seed=0):
    rng = np.random.default_rng(seed)
    dt = TYPES[src]
    if dt == np.bool_:
        return rng.integers(0, 2, shape).astype(np.bool_)
    if np.issubdtype(dt, np.integer):
        info = np.iinfo(dt)
        x = rng.integers(max(info.min, -2**40), min(info.max, 2**40), shape, endpoint=True).astype(dt)
        x.reshape(-1)[:3] = [0, info.min, info.max]
        return x
    x = (rng.standard_normal(shape) * 1e3).astype(dt)  # within int32's range: C and numpy truncate alike
    x.reshape(-1)[:6] = [0.0, -0.0, 0.5, -0.5, -1.75, 16777217.0]
    return x




@pytest.mark.parametrize(("src", "dst"), PAIRS)
def test_cast_matches_numpy_and_onnxruntime(src, dst):
    model, x = _model(src, dst), _values(src)
    got = run_one_node(model, {"x": x}, "C")["y"]
    assert got.dtype == TYPES[dst] and got.shape == x.shape
    np.testing.assert_array_equal(got, run_one_node(model, {"x": x}, "numpy")["y"])
    np.testing.assert_array_equal(got, onnxruntime_outputs(model, {"x": x})[0])


def test_float_specials_to_bool_and_double():
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45], np.float32)
    for dst, want in ((T.BOOL, [True, True, True, False, False, True]), (T.DOUBLE, x.astype(np.float64))):
        got = run_one_node(_model(T.FLOAT, dst, x.shape), {"x": x}, "C")["y"]
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(("src", "dst"), [(T.INT32, T.FLOAT), (T.BOOL, T.FLOAT), (T.FLOAT, T.INT64), (T.INT64, T.INT8)])
def test_threads_split_the_elements_with_the_same_result(src, dst):
    """Past CAST_MIN_PER_THREAD elements the intra-op threads split them (shares in multiples of 64, element sizes
    differing between source and destination): any thread count gives numpy's result."""
    shape = (3, 70001)
    model, x = _model(src, dst, shape), _values(src, shape, 7)
    for threads in (1, 2, 3):
        got = run_one_node(model, {"x": x}, "C", threads=threads)["y"]
        np.testing.assert_array_equal(got, x.astype(TYPES[dst]))


def test_empty_and_scalar_inputs():
    for shape in ((0, 3), ()):
        x = np.zeros(shape, np.int64)
        got = run_one_node(_model(T.INT64, T.FLOAT, shape), {"x": x}, "C")["y"]
        assert got.shape == shape and got.dtype == np.float32


def test_nodes_the_c_cast_takes():
    assert chosen_language(_model(T.INT32, T.INT64)) == "C"
    assert chosen_language(_model(T.BOOL, T.FLOAT)) == "C"
    assert chosen_language(_model(T.FLOAT, T.UINT8)) == "numpy"   # past uint8's range C is undefined
    assert chosen_language(_model(T.FLOAT, T.FLOAT16)) == "numpy"
    assert chosen_language(_model(T.FLOAT16, T.FLOAT)) == "numpy"
    assert chosen_language(_model(T.STRING, T.FLOAT)) == "numpy"
