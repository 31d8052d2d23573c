"""Where, IsNaN, ReduceMean/ReduceSum and Sin/Cos without a GPU: launch code on the emulating runtime
(kernels' semantics in numpy, bounds-checked) against onnx.reference; claims with reasons."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto

from ort_cuda_ep._ops import NodeFacts, check_node
from ort_cuda_ep.testing import run_with_reference

R = np.random.default_rng(3)
F, B, I64 = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64


def _close(op, inputs, attrs=None, opset=17, tol=1e-6):
    ours, ref, rt = run_with_reference(op, inputs, attrs, opset)
    for a, b in zip(ours, ref):
        assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
        np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=tol, atol=tol)
    return rt


@pytest.mark.parametrize("shapes", [((2, 3, 4), (2, 3, 4), (2, 3, 4)), ((1, 1, 4, 4), (2, 4, 4, 4), ()),
                                    ((4, 1), (1, 5), (4, 5))])
def test_where_broadcasts_three_ways(shapes):
    c = R.random(shapes[0]) > 0.5
    x, y = R.standard_normal(shapes[1]).astype(np.float32), R.standard_normal(shapes[2]).astype(np.float32)
    rt = _close("Where", [c, x, y])
    assert [e for e, *_ in rt.launches] == ["where_f32"]


def test_where_float16_masking_like_torch_attention():
    scores = R.standard_normal((1, 2, 4, 4)).astype(np.float16)
    mask = np.triu(np.ones((4, 4), bool), 1)[None, None]
    _close("Where", [mask, np.array(-np.inf, np.float16), scores])


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
def test_isnan(dtype):
    x = np.array([1.0, np.nan, -np.inf, 0.0, np.nan], np.float32).astype(dtype)
    ours, _, _ = run_with_reference("IsNaN", [x], opset=20)
    assert ours[0].dtype == np.bool_ and ours[0].tolist() == [False, True, False, False, True]


@pytest.mark.parametrize("op,axes,keepdims,opset", [
    ("ReduceMean", [-1], 1, 17), ("ReduceMean", [1, 2], 0, 17), ("ReduceMean", None, 1, 17),
    ("ReduceSum", [-1], 1, 11), ("ReduceMean", [-1], 1, 18), ("ReduceSum", [2], 0, 13)])
def test_row_reductions(op, axes, keepdims, opset):
    x = R.standard_normal((3, 5, 7)).astype(np.float32)
    as_input = (op == "ReduceMean" and opset >= 18) or (op == "ReduceSum" and opset >= 13)
    attrs = {"keepdims": keepdims}
    if axes is not None and not as_input:
        attrs["axes"] = axes
    inputs = [x] + ([np.array(axes, np.int64)] if as_input and axes is not None else [])
    _close(op, inputs, attrs, opset, tol=1e-5)


def test_rms_norm_as_torchscript_exports_it_pow_reducemean_sqrt():
    x = R.standard_normal((2, 8, 64)).astype(np.float32)
    sq = run_with_reference("Pow", [x, np.array(2.0, np.float32)])[0][0]
    _close("ReduceMean", [sq], {"axes": [-1], "keepdims": 1}, 17, tol=1e-5)


@pytest.mark.parametrize("op", ["Sin", "Cos"])
def test_sin_cos(op):
    _close(op, [R.standard_normal((4, 16)).astype(np.float32) * 10], tol=1e-5)


def _facts(op, shapes, dtypes, attrs=None, consts=None):
    names = tuple(f"i{k}" for k in range(len(shapes)))
    return NodeFacts("n", op, "", names, tuple(dtypes), tuple(shapes), attrs or {}, ("y",), consts or {})


@pytest.mark.parametrize("facts,opset,aspect,text", [
    (_facts("Where", [(2,), (2,), (2,)], (F, F, F)), 17, "dtype", "input 0"),
    (_facts("Where", [(2,), (2,), (2,)], (B, I64, I64)), 17, "dtype", "INT64"),
    (_facts("ReduceMean", [(2, 3, 4)], (F,), {"axes": [1]}), 17, "attribute", "trailing axes"),
    (_facts("ReduceMean", [(2, 3, 4), (1,)], (F, I64)), 18, "input", "computed at run time"),
    (_facts("ReduceSum", [(2, 3)], (I64,), {"axes": [1]}), 11, "dtype", "INT64"),
])
def test_declined_with_reasons(facts, opset, aspect, text):
    spec, rejection = check_node(facts, opset)
    assert spec is not None and rejection is not None and rejection.aspect == aspect
    assert text in rejection.detail + rejection.accepts


def test_reduction_axes_from_an_initializer_are_claimed():
    spec, rejection = check_node(_facts("ReduceMean", [(2, 3, 4), (1,)], (F, I64), consts={1: (-1,)}), 18)
    assert rejection is None and spec.host_inputs == (1,)


@pytest.mark.parametrize("op,inputs,attrs", [
    ("MatMul", [R.standard_normal((2, 3, 5, 8)), R.standard_normal((8, 4))], {}),
    ("MatMul", [R.standard_normal((2, 5, 8)), R.standard_normal((2, 8, 3))], {}),
    ("MatMul", [R.standard_normal(8), R.standard_normal((8, 3))], {}),
    ("MatMul", [R.standard_normal((4, 8)), R.standard_normal(8)], {}),
    ("MatMul", [R.standard_normal((2, 1, 5, 8)), R.standard_normal((1, 3, 8, 4))], {}),  # one launch per batch
    ("MatMul", [R.standard_normal((3, 5, 8)), R.standard_normal((1, 8, 4))], {}),  # B shared: stride 0
    ("MatMul", [R.standard_normal((1, 5, 8)), R.standard_normal((2, 3, 8, 4))], {}),  # A shared across 6
    ("Gemm", [R.standard_normal((8, 5)), R.standard_normal((6, 8)), R.standard_normal(6)],
     {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0}),
    ("Gemm", [R.standard_normal((5, 8)), R.standard_normal((8, 6)), R.standard_normal((5, 1))], {}),
    ("Softmax", [R.standard_normal((3, 4, 17))], {"axis": -1}),
])
def test_matmul_gemm_softmax_launch_code_on_the_emulated_kernels(op, inputs, attrs):
    """matmul.cu / softmax.cu emulated (their index math: strides, batches, bias broadcast, transposes)."""
    _close(op, [np.asarray(a, np.float32) for a in inputs], attrs, 13, tol=1e-5)


def test_matmul_batch_dims_that_may_broadcast_at_run_time_are_claimed():
    symbolic = _facts("MatMul", [("unk__13", 4, 8, 16), ("batch", 4, 16, 8)], (F, F))
    assert check_node(symbolic, 17)[1] is None  # equal at run time in every valid model
    clash = _facts("MatMul", [(2, 4, 8, 16), (3, 4, 16, 8)], (F, F))
    assert check_node(clash, 17)[1].aspect == "shape"
