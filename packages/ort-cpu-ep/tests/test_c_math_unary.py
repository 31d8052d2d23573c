"""The C float32 Sqrt, Reciprocal, Abs (numpy's bits), Exp and Tanh (within a few ulp) of csrc/math_unary.c against the
numpy kernel and onnxruntime, one node at a time through the CPU provider: special values, every vector lane and
tail length, thread counts, and which nodes the C kernels take."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from ort_cpu_ep.testing import chosen_language, one_node_model, onnxruntime_outputs, run_one_node

F = TensorProto.FLOAT
SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -3e-42, 3.4e38, -3.4e38, 1.0, -1.0, 0.625, -0.625,
                     0.6249, 88.5, -88.5, 9.0, -20.0, 1e-4, -2e-7], np.float32)
EXACT = ("Sqrt", "Reciprocal", "Abs")


def _values(shape, seed=0, scale=4.0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * scale).astype(np.float32)
    flat = x.reshape(-1)
    flat[::3] = SPECIALS[rng.integers(0, len(SPECIALS), flat[::3].shape)]
    return x


def _model(op, shape, dtype=F):
    return one_node_model(helper.make_node(op, ["x"], ["y"]), [helper.make_tensor_value_info("x", dtype, list(shape))],
                          [helper.make_tensor_value_info("y", dtype, list(shape))])




def _close(got, want, op, ulps):
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    if op in EXACT:
        np.testing.assert_array_equal(got[ok], want[ok])
    else:  # a few ulp of the larger magnitude, and absolutely near zero
        np.testing.assert_allclose(got[ok], want[ok], rtol=ulps * 6e-8, atol=1e-37)


@pytest.mark.parametrize("shape", [(1,), (7,), (8,), (9,), (2, 3, 17, 5), (0, 4), (1, 2048, 64)])
@pytest.mark.parametrize("op", ["Sqrt", "Reciprocal", "Abs", "Exp", "Tanh"])
def test_math_unary_matches_numpy_and_onnxruntime(op, shape):
    x = _values(shape)
    if op == "Sqrt":
        x = np.abs(x) * np.where(np.arange(x.size).reshape(shape) % 7 == 0, -1, 1).astype(np.float32)
    model = _model(op, shape)
    got = run_one_node(model, {"x": x}, "C")["y"]
    with np.errstate(all="ignore"):
        _close(got, run_one_node(model, {"x": x}, "numpy")["y"], op, 4)
        _close(got, onnxruntime_outputs(model, {"x": x})[0], op, 8)


@pytest.mark.parametrize("op", ["Exp", "Tanh"])
def test_exp_and_tanh_across_their_range(op, isa_cap):
    """On each instruction-set path (the AVX-512 one: vec_math_avx512.h's intrinsics), tails of every length."""
    x = np.linspace(-100, 100, 200_001, dtype=np.float32)
    x = np.concatenate([x, np.linspace(-0.7, 0.7, 10_001, dtype=np.float32), SPECIALS[~np.isnan(SPECIALS)][:13]])
    model = _model(op, x.shape)
    got = run_one_node(model, {"x": x}, "C")["y"]
    ref = (np.exp if op == "Exp" else np.tanh)(x.astype(np.float64))
    with np.errstate(over="ignore"):
        big = np.abs(ref) > np.finfo(np.float32).max
    np.testing.assert_array_equal(np.isinf(got), big)
    small = ref < 1e-37 if op == "Exp" else np.zeros_like(big)
    ok = ~big & ~small
    np.testing.assert_allclose(got[ok], ref[ok], rtol=4 * 6e-8)
    if op == "Tanh":  # odd, exactly
        np.testing.assert_array_equal(got, -run_one_node(model, {"x": -x}, "C")["y"])


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_math_unary_same_result_at_every_thread_count(threads):
    x = _values((3, 70_001))
    model = _model("Tanh", x.shape)
    one = run_one_node(model, {"x": x}, "C", threads=1)["y"]
    np.testing.assert_array_equal(run_one_node(model, {"x": x}, "C", threads=threads)["y"], one)


@pytest.mark.parametrize("op", ["Sqrt", "Reciprocal", "Abs", "Exp", "Tanh"])
def test_nodes_the_c_math_kernels_take(op):
    assert chosen_language(_model(op, (2, 3))) == "C"
    assert chosen_language(_model(op, (2, 3), TensorProto.DOUBLE)) == "numpy"
    assert chosen_language(_model(op, (2, 3), TensorProto.FLOAT16)) == "numpy"
