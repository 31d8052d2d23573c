"""SimplifiedLayerNormalization, LayerNormalization (opset < 17) and Skip(Simplified)LayerNormalization vs onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from ort_cpu_ep.ops import InputInfo

F16, F32 = np.float16, np.float32


def _tol(dt):
    return dict(rtol=2e-3, atol=2e-3) if dt == F16 else dict(rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("xt,st", [(F32, F32), (F16, F16), (F32, F16), (F16, F32), (np.float64, np.float64)])
@pytest.mark.parametrize("axis", [-1, 1])
def test_simplified_layer_norm_matches_onnxruntime(kit, rng, xt, st, axis):
    x = (rng.standard_normal((2, 3, 16)) * 3).astype(xt)
    shape = x.shape[axis:]
    g = rng.standard_normal(shape).astype(st)
    ref = kit.ort("SimplifiedLayerNormalization", [x, g], 2, domain="", opset=22, epsilon=1e-5, axis=axis)
    got = kit.ours("SimplifiedLayerNormalization", [x, g], 2, domain="", opset=22, epsilon=1e-5, axis=axis)
    for r, o in zip(ref, got):
        assert o.dtype == r.dtype and o.shape == r.shape
        np.testing.assert_allclose(o.astype(np.float64), r.astype(np.float64), **_tol(F16 if F16 in (xt, st) else F32))


@pytest.mark.parametrize("bias", [False, True])
def test_layer_norm_opset1_matches_onnxruntime(kit, rng, bias):
    x = (rng.standard_normal((3, 5, 8)) + 2).astype(F32)
    g, b = rng.standard_normal(8).astype(F32), rng.standard_normal(8).astype(F32)
    ins = [x, g, b] if bias else [x, g]
    ref = kit.ort("LayerNormalization", ins, 3, domain="", opset=1, epsilon=1e-5)
    got = kit.ours("LayerNormalization", ins, 3, domain="", opset=1, epsilon=1e-5)
    for r, o in zip(ref, got):
        assert o.shape == r.shape
        np.testing.assert_allclose(o, r, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["SkipSimplifiedLayerNormalization", "SkipLayerNormalization"])
@pytest.mark.parametrize("dt", [F32, F16])
@pytest.mark.parametrize("skip_shape", ["full", "no_batch", "2d_input"])
@pytest.mark.parametrize("with_bias", [False, True])
def test_skip_layer_norms_match_onnxruntime_all_outputs(kit, rng, op, dt, skip_shape, with_bias):
    hidden = 32
    xshape = (6, hidden) if skip_shape == "2d_input" else (2, 3, hidden)
    sshape = (3, hidden) if skip_shape == "no_batch" else xshape
    x = rng.standard_normal(xshape).astype(dt)
    skip = rng.standard_normal(sshape).astype(dt)
    gamma = rng.standard_normal(hidden).astype(dt)
    bias = rng.standard_normal(hidden).astype(dt) if with_bias else None
    if op == "SkipLayerNormalization":
        ins = [x, skip, gamma, rng.standard_normal(hidden).astype(dt), bias]
    else:
        ins = [x, skip, gamma, bias]
    ref = kit.ort(op, ins, 4, epsilon=1e-6)
    got = kit.ours(op, ins, 4, epsilon=1e-6)
    assert len(got) == 4
    for r, o in zip(ref, got):
        assert o.dtype == r.dtype, (o.dtype, r.dtype)
        np.testing.assert_allclose(o.astype(np.float64), r.astype(np.float64), **_tol(dt))
    # output 3 is the residual sum input + skip (+ bias)
    want = x.astype(F32) + skip.astype(F32) + (bias.astype(F32) if bias is not None else 0)
    np.testing.assert_allclose(got[3].astype(F32), want.astype(dt).astype(F32), rtol=1e-3)


def test_skip_norm_only_requested_outputs(kit, rng):
    x = rng.standard_normal((1, 2, 8)).astype(F32)
    out = kit.ours("SkipSimplifiedLayerNormalization", [x, x, np.ones(8, F32)], 1)
    assert len(out) == 1 and out[0].shape == x.shape


def test_norm_declines_name_the_problem(kit):
    d = kit.decline_of("SkipSimplifiedLayerNormalization",
                       [InputInfo(TensorProto.DOUBLE, (1, 2, 8)), InputInfo(TensorProto.DOUBLE, (1, 2, 8)),
                        InputInfo(TensorProto.DOUBLE, (8,))])
    assert d is not None and "DOUBLE" in d.rejected.upper() and "FLOAT" in d.accepts.upper()
    d = kit.decline_of("SkipLayerNormalization",
                       [InputInfo(TensorProto.FLOAT, (2, 2, 2, 8)), InputInfo(TensorProto.FLOAT, (2, 2, 2, 8)),
                        InputInfo(TensorProto.FLOAT, (8,))])
    assert d is not None and "rank 4" in d.rejected
    d = kit.decline_of("SimplifiedLayerNormalization",
                       [InputInfo(TensorProto.FLOAT, (2, 8)), InputInfo(TensorProto.DOUBLE, (8,))], domain="", opset=22)
    assert d is not None and "DOUBLE" in d.rejected.upper()
    d = kit.decline_of("SimplifiedLayerNormalization",
                       [InputInfo(TensorProto.FLOAT, (2, 8)), InputInfo(TensorProto.FLOAT, (8,))], domain="",
                       opset=22, axis=3)
    assert d is not None and "axis=3" in d.rejected
