"""com.microsoft MoE (ops_extra_moe) against onnxruntime: activations, k, routing normalization, biases, 3-D
input, interleaved SwiGLU with alpha/beta/limit; the fusion layouts onnxruntime's CPU kernel lacks are
checked against the interleaved one."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from ort_cpu_ep.ops import InputInfo

F = np.float32
T, H, INTER, E = 7, 8, 6, 4


def _weights(rng, fused=False):
    w1 = (rng.standard_normal((E, (2 if fused else 1) * INTER, H)) * 0.5).astype(F)
    b1 = rng.standard_normal((E, w1.shape[1])).astype(F)
    w2 = (rng.standard_normal((E, H, INTER)) * 0.5).astype(F)
    b2 = rng.standard_normal((E, H)).astype(F)
    return w1, b1, w2, b2


@pytest.mark.parametrize("act", ["relu", "gelu", "silu", "identity"])
@pytest.mark.parametrize("k,normalize", [(1, 0), (2, 0), (2, 1), (4, 1)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_moe_matches_onnxruntime(kit, rng, act, k, normalize, with_bias):
    x = rng.standard_normal((T, H)).astype(F)
    router = rng.standard_normal((T, E)).astype(F)
    w1, b1, w2, b2 = _weights(rng)
    ins = [x, router, w1, b1 if with_bias else None, w2, b2 if with_bias else None]
    attrs = dict(k=k, activation_type=act, normalize_routing_weights=normalize)
    ref = kit.ort("MoE", ins, 1, **attrs)[0]
    got = kit.ours("MoE", ins, 1, **attrs)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("params", [{}, {"activation_alpha": 1.702, "activation_beta": 1.0, "swiglu_limit": 1.5}])
@pytest.mark.parametrize("three_d", [False, True])
def test_moe_swiglu_interleaved_matches_onnxruntime(kit, rng, params, three_d):
    x = rng.standard_normal((1, T, H) if three_d else (T, H)).astype(F)
    router = rng.standard_normal((T, E)).astype(F)
    w1, b1, w2, b2 = _weights(rng, fused=True)
    ins = [x, router, w1, b1, w2, b2]
    attrs = dict(k=2, activation_type="swiglu", swiglu_fusion=1, normalize_routing_weights=1) | params
    ref = kit.ort("MoE", ins, 1, **attrs)[0]
    got = kit.ours("MoE", ins, 1, **attrs)[0]
    assert got.shape == x.shape
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_moe_swiglu_layouts_agree(kit, rng):
    """fusion 2 ([gate | up]) and fusion 0 (gate in fc1, up in fc3) equal fusion 1 on the same weights."""
    x = rng.standard_normal((T, H)).astype(F)
    router = rng.standard_normal((T, E)).astype(F)
    w1, b1, w2, b2 = _weights(rng, fused=True)
    attrs = dict(k=2, activation_type="swiglu", swiglu_limit=2.0, activation_alpha=1.5, activation_beta=0.5)
    ref = kit.ours("MoE", [x, router, w1, b1, w2, b2], 1, swiglu_fusion=1, **attrs)[0]
    gate_w, up_w, gate_b, up_b = w1[:, 0::2], w1[:, 1::2], b1[:, 0::2], b1[:, 1::2]
    cat = kit.ours("MoE", [x, router, np.concatenate([gate_w, up_w], 1), np.concatenate([gate_b, up_b], 1), w2, b2],
                   1, swiglu_fusion=2, **attrs)[0]
    sep = kit.ours("MoE", [x, router, np.ascontiguousarray(gate_w), np.ascontiguousarray(gate_b), w2, b2,
                           np.ascontiguousarray(up_w), np.ascontiguousarray(up_b)], 1, swiglu_fusion=0, **attrs)[0]
    np.testing.assert_allclose(cat, ref, rtol=1e-6)
    np.testing.assert_allclose(sep, ref, rtol=1e-6)


def test_moe_declines(kit):
    FL = TensorProto.FLOAT
    infos = [InputInfo(FL, (T, H)), InputInfo(FL, (T, E)), InputInfo(FL, (E, INTER, H)), InputInfo(0, None, False),
             InputInfo(FL, (E, H, INTER))]
    d = kit.decline_of("MoE", infos, activation_type="relu2")
    assert d is not None and "relu2" in d.rejected
    d = kit.decline_of("MoE", infos, use_sparse_mixer=1)
    assert d is not None and "sparse" in d.rejected
    d = kit.decline_of("MoE", infos, k=5)
    assert d is not None and "k=5" in d.rejected
    d = kit.decline_of("MoE", infos, activation_type="swiglu")
    assert d is not None and "swiglu" in d.rejected
