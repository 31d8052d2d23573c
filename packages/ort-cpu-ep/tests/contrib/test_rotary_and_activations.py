"""RotaryEmbedding (com.microsoft 1, ai.onnx 23), Gelu/BiasGelu/FastGelu/QuickGelu and FusedMatMul vs onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from ort_cpu_ep.ops import InputInfo


def _caches(rng, n, half, dt=np.float32):
    ang = rng.random((n, half)) * 3
    return np.cos(ang).astype(dt), np.sin(ang).astype(dt)


@pytest.mark.parametrize("layout", ["3d", "4d"])
@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("pos_kind", ["scalar", "2d"])
@pytest.mark.parametrize("rot_dim", [0, 8])
def test_rotary_contrib_matches_onnxruntime(kit, rng, layout, interleaved, pos_kind, rot_dim):
    B, S, N, H = 2, 5, 3, 16
    x = rng.standard_normal((B, S, N * H) if layout == "3d" else (B, N, S, H)).astype(np.float32)
    cos, sin = _caches(rng, 32, (rot_dim or H) // 2)
    pos = np.array([3], np.int64) if pos_kind == "scalar" else rng.integers(0, 32, (B, S)).astype(np.int64)
    attrs = dict(interleaved=interleaved)
    if rot_dim:
        attrs |= dict(rotary_embedding_dim=rot_dim, num_heads=N)
    ref = kit.ort("RotaryEmbedding", [x, pos, cos, sin], 1, **attrs)[0]
    got = kit.ours("RotaryEmbedding", [x, pos, cos, sin], 1, **attrs)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("layout", ["3d", "4d"])
@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("with_pos", [True, False])
@pytest.mark.parametrize("rot_dim", [0, 8])
def test_rotary_onnx23_matches_onnxruntime(kit, rng, layout, interleaved, with_pos, rot_dim):
    B, S, N, H = 2, 4, 2, 16
    x = rng.standard_normal((B, S, N * H) if layout == "3d" else (B, N, S, H)).astype(np.float32)
    half = (rot_dim or H) // 2
    if with_pos:
        cos, sin = _caches(rng, 16, half)
        pos = rng.integers(0, 16, (B, S)).astype(np.int64)
        ins = [x, cos, sin, pos]
    else:
        ang = rng.random((B, S, half)) * 3
        ins = [x, np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)]
    attrs = dict(interleaved=interleaved, num_heads=N) | (dict(rotary_embedding_dim=rot_dim) if rot_dim else {})
    ref = kit.ort("RotaryEmbedding", ins, 1, domain="", opset=23, **attrs)[0]
    got = kit.ours("RotaryEmbedding", ins, 1, domain="", opset=23, **attrs)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def test_rotary_declines(kit):
    F = TensorProto.FLOAT
    d = kit.decline_of("RotaryEmbedding", [InputInfo(F, (2, 4, 32)), InputInfo(F, (16, 8)), InputInfo(F, (16, 8))],
                       domain="", opset=23)
    assert d is not None and "num_heads" in d.rejected
    d = kit.decline_of("RotaryEmbedding", [InputInfo(TensorProto.DOUBLE, (2, 4, 32))] + [InputInfo(F, (16, 8))] * 3)
    assert d is not None and "DOUBLE" in d.rejected.upper()
    d = kit.decline_of("RotaryEmbedding", [InputInfo(F, (2, 4, 32))] * 4, is_packed_batching=1)
    assert d is not None and "is_packed_batching" in d.rejected


@pytest.mark.parametrize("op,with_bias,attrs", [
    ("Gelu", False, {}), ("BiasGelu", True, {}), ("FastGelu", False, {}), ("FastGelu", True, {}),
    ("QuickGelu", False, {}), ("QuickGelu", False, {"alpha": 1.3}),
])
@pytest.mark.parametrize("dt", [np.float32, np.float16])
def test_gelu_family_matches_onnxruntime(kit, rng, op, with_bias, attrs, dt):
    x = (rng.standard_normal((3, 4, 32)) * 3).astype(dt)
    ins = [x, rng.standard_normal(32).astype(dt)] if with_bias else [x]
    ref = kit.ort(op, ins, 1, **attrs)[0]
    got = kit.ours(op, ins, 1, **attrs)[0]
    assert got.dtype == ref.dtype
    tol = dict(rtol=1e-5, atol=1e-6) if dt == np.float32 else dict(rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(got.astype(np.float32), ref.astype(np.float32), **tol)


@pytest.mark.parametrize("shapes,attrs", [
    (((2, 3, 4), (2, 4, 5)), {}),
    (((2, 4, 3), (2, 4, 5)), {"transA": 1}),
    (((2, 3, 4), (2, 5, 4)), {"transB": 1, "alpha": 0.5}),
    (((3, 2, 4), (2, 4, 5)), {"transBatchA": 1}),
    (((3, 2, 4), (4, 2, 5)), {"transBatchA": 1, "transBatchB": 1}),
    (((4, 2, 3), (5, 2, 4)), {"transBatchA": 1, "transA": 1, "transBatchB": 1, "transB": 1}),
    (((3, 4), (4, 5)), {"alpha": 2.0}),
])
def test_fused_matmul_matches_onnxruntime(kit, rng, shapes, attrs):
    a, b = (rng.standard_normal(s).astype(np.float32) for s in shapes)
    ref = kit.ort("FusedMatMul", [a, b], 1, **attrs)[0]
    got = kit.ours("FusedMatMul", [a, b], 1, **attrs)[0]
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
