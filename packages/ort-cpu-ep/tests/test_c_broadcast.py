"""The C broadcasting ops of csrc/bcast_kernel.c against the numpy kernel and onnxruntime, one node at a time through
the CPU provider: Expand of every moved element type, Equal / Less / Greater / LessOrEqual / GreaterOrEqual of float32,
int32 and int64 to bool, two-input Max / Min with NaN; broadcast patterns both ways, errors, and which nodes they
take."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_abi
from ort_cpu_ep.testing import chosen_language, one_node_model, onnxruntime_outputs, run_one_node

T = TensorProto
PATTERNS = [((1, 2048, 1), (1, 1, 257)), ((3, 4), (3, 4)), ((3, 4), ()), ((), (5,)), ((2, 1, 4), (3, 1)),
            ((1, 5, 1, 7), (2, 1, 6, 1)), ((4, 1), (1, 0)), ((2, 3, 4, 5), (1, 3, 1, 5)), ((6,), (2, 6))]
NP = {T.FLOAT: np.float32, T.INT32: np.int32, T.INT64: np.int64}


def _model(op, a_shape, b_shape, dtype, out_dtype, b_const=None):
    inits = [numpy_helper.from_array(b_const, "b")] if b_const is not None else []
    inputs = [helper.make_tensor_value_info("a", dtype, list(a_shape))]
    if b_const is None:
        inputs.append(helper.make_tensor_value_info("b", dtype, list(b_shape)))
    model = one_node_model(helper.make_node(op, ["a", "b"], ["y"]), inputs,
                           [helper.make_tensor_value_info("y", out_dtype, None)], inits)
    model.opset_import[0].version = 17
    return model


def _values(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    return np.asarray(rng.integers(-3, 4, shape)).astype(NP[dtype])  # small integers: equal values occur




def _check(model, feeds):
    got = run_one_node(model, feeds, "C")["y"]
    for want in (run_one_node(model, feeds, "numpy")["y"], onnxruntime_outputs(model, feeds)[0]):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    return got


@pytest.mark.parametrize(("a_shape", "b_shape"), PATTERNS)
@pytest.mark.parametrize("dtype", [T.FLOAT, T.INT32, T.INT64])
@pytest.mark.parametrize("op", ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"])
def test_comparisons_match_numpy_and_onnxruntime(op, dtype, a_shape, b_shape):
    feeds = {"a": _values(a_shape, dtype, 0), "b": _values(b_shape, dtype, 1)}
    _check(_model(op, a_shape, b_shape, dtype, T.BOOL), feeds)


@pytest.mark.parametrize(("a_shape", "b_shape"), PATTERNS)
@pytest.mark.parametrize("op", ["Max", "Min"])
def test_max_min_match_numpy_and_onnxruntime(op, a_shape, b_shape):
    rng = np.random.default_rng(2)
    feeds = {"a": rng.standard_normal(a_shape).astype(np.float32), "b": rng.standard_normal(b_shape).astype(np.float32)}
    _check(_model(op, a_shape, b_shape, T.FLOAT, T.FLOAT), feeds)


@pytest.mark.parametrize("op", ["Max", "Min"])
def test_max_min_nan_either_side(op):
    a = np.array([np.nan, 1.0, np.nan, -0.0, 2.0], np.float32)
    b = np.array([1.0, np.nan, np.nan, 0.0, 2.0], np.float32)
    got = run_one_node(_model(op, a.shape, b.shape, T.FLOAT, T.FLOAT), {"a": a, "b": b}, "C")["y"]
    want = (np.maximum if op == "Max" else np.minimum)(a, b)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(("x_shape", "shape"), [((1, 2048, 1), (1, 2048, 1)), ((3, 1), (2, 3, 4)), ((1, 1), (1, 1)),
                                                ((2, 1, 5), (4, 1)), ((), (3, 2)), ((4,), (0, 4)), ((3, 4), (1,))])
@pytest.mark.parametrize("dtype", [T.FLOAT, T.INT64, T.BOOL, T.UINT8, T.FLOAT16, T.INT16])
def test_expand_matches_numpy_and_onnxruntime(dtype, x_shape, shape):
    np_type = helper.tensor_dtype_to_np_dtype(dtype)
    x = np.asarray(np.random.default_rng(3).standard_normal(x_shape) * 10).astype(np_type)
    model = _model("Expand", x_shape, None, dtype, dtype, b_const=np.array(shape, np.int64))
    _check(model, {"a": x})


@pytest.mark.parametrize(("op", "a_shape", "b_shape"), [
    ("Equal", (1, 2048, 1), (1, 1, 257)), ("Less", (3, 70001), (70001,)), ("Max", (7, 1, 30001), (1, 5, 1)),
    ("Expand", (1, 2048, 1), (3, 2048, 65)), ("Expand", (70001,), (3, 1))])
def test_threads_split_the_runs_with_the_same_result(op, a_shape, b_shape):
    """Past BC_MIN_PER_THREAD outputs the intra-op threads split the runs (uneven shares, one run each at most
    three threads for Expand's (3, 70001)): any thread count gives numpy's result."""
    a = _values(a_shape, T.FLOAT, 4)
    if op == "Expand":
        model, feeds = _model(op, a_shape, None, T.FLOAT, T.FLOAT, b_const=np.array(b_shape, np.int64)), {"a": a}
        want = a * np.ones(b_shape, np.float32)
    else:
        model, feeds = _model(op, a_shape, b_shape, T.FLOAT, T.BOOL if op != "Max" else T.FLOAT), {"a": a, "b": _values(b_shape, T.FLOAT, 5)}
        want = {"Equal": np.equal, "Less": np.less, "Max": np.maximum}[op](a, feeds["b"])
    for threads in (1, 2, 3):
        got = run_one_node(model, feeds, "C", threads=threads)["y"]
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_shapes_that_do_not_broadcast_are_an_error():
    model = _model("Equal", (3, 4), (2, 4), T.INT64, T.BOOL)
    feeds = {"a": np.zeros((3, 4), np.int64), "b": np.zeros((2, 4), np.int64)}
    with pytest.raises(ort_abi.KernelError, match=r"shapes \[3, 4\] and \[2, 4\] do not broadcast \(axis 0: 3 against 2\)"):
        run_one_node(model, feeds, "C")


def test_nodes_the_c_broadcast_kernels_take():
    assert chosen_language(_model("Equal", (2,), (2,), T.INT32, T.BOOL)) == "C"
    assert chosen_language(_model("Equal", (2,), (2,), T.BOOL, T.BOOL)) == "numpy"
    assert chosen_language(_model("Less", (2,), (2,), T.DOUBLE, T.BOOL)) == "numpy"
    assert chosen_language(_model("Max", (2,), (2,), T.INT64, T.INT64)) == "numpy"
    assert chosen_language(_model("Max", (2,), (2,), T.FLOAT, T.FLOAT)) == "C"
    assert chosen_language(_model("Expand", (2,), None, T.STRING, T.STRING, b_const=np.array([2], np.int64))) == "numpy"
