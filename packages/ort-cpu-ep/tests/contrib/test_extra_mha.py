"""com.microsoft MultiHeadAttention (ops_extra_mha) against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from ort_cpu_ep.ops import InputInfo, find
from ort_cpu_ep.ops.ops_extra_mha import mha_workspace_bytes

B, S, L, N, H = 2, 4, 6, 2, 8
D = N * H


def _case(rng, name):
    q = rng.standard_normal((B, S, D)).astype(np.float32)
    k = rng.standard_normal((B, L, D)).astype(np.float32)
    v = rng.standard_normal((B, L, D)).astype(np.float32)
    ins: list = [q, k, v, None, None, None, None, None]
    attrs: dict = dict(num_heads=N)
    if "bias" in name:
        ins[3] = rng.standard_normal(3 * D).astype(np.float32)
    if "mask2d" in name:
        ins[4] = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], np.int32)
    if "mask1d" in name:
        ins[4] = np.array([3, 6], np.int32)
    if "mask3d" in name:
        ins[4] = rng.integers(0, 2, (B, S, L)).astype(np.int32)
        ins[4][:, :, 0] = 1
    if "attn_bias" in name:
        ins[5] = rng.standard_normal((1, N, S, L)).astype(np.float32)
    if "causal" in name:
        ins[1], ins[2] = ins[1][:, :S], ins[2][:, :S]
        attrs["unidirectional"] = 1
    if "past" in name:
        ins[1], ins[2] = ins[1][:, :1], ins[2][:, :1]
        ins[0] = ins[0][:, :1]
        ins[6] = rng.standard_normal((B, N, 5, H)).astype(np.float32)
        ins[7] = rng.standard_normal((B, N, 5, H)).astype(np.float32)
    if "cross" in name:
        ins[1] = rng.standard_normal((B, N, L, H)).astype(np.float32)
        ins[2] = rng.standard_normal((B, N, L, H)).astype(np.float32)
    if "scale" in name:
        attrs["scale"] = 0.2
    if "filter" in name:
        attrs["mask_filter_value"] = -1e4
    while ins and ins[-1] is None:
        ins.pop()
    return ins, attrs


NAMES = ["self", "bias", "mask2d", "mask1d", "mask3d", "attn_bias", "causal", "causal_bias", "past", "past_causal",
         "cross", "scale", "bias_mask2d_attn_bias_filter"]


@pytest.mark.parametrize("name", NAMES)
def test_mha_matches_onnxruntime(kit, rng, name):
    ins, attrs = _case(rng, name)
    n_out = 3 if "past" in name else 1
    ref = kit.ort("MultiHeadAttention", ins, n_out, **attrs)
    got = kit.ours("MultiHeadAttention", ins, n_out, **attrs)
    for r, o in zip(ref, got):
        assert o.shape == r.shape
        np.testing.assert_allclose(o, r, rtol=1e-5, atol=1e-5)


def test_mha_workspace(kit):
    node = kit.make_node("MultiHeadAttention", 8, 3, num_heads=N)
    shapes = [(B, 1, D), (B, 1, D), (B, 1, D), None, None, None, (B, N, 5, H), (B, N, 5, H)]
    impl = find("MultiHeadAttention", kit.MS, 1)
    assert impl.workspace_bytes(node, shapes) == mha_workspace_bytes(node, shapes) == [(0, 4 * B * N * 1 * 6)]


def test_mha_declines(kit):
    F = TensorProto.FLOAT
    d = kit.decline_of("MultiHeadAttention", [InputInfo(F, (B, S, N, 3, H))], num_heads=N)
    assert d is not None and "packed" in d.rejected
    d = kit.decline_of("MultiHeadAttention", [InputInfo(F, (B, S, D)), InputInfo(F, (B, L, D)),
                                              InputInfo(F, (B, L, D))], 4, num_heads=N)
    assert d is not None and "qk" in d.rejected
    d = kit.decline_of("MultiHeadAttention", [InputInfo(F, (B, S, D)), InputInfo(F, (B, L, D)), InputInfo(F, (B, L, D)),
                                              InputInfo(0, None, False), InputInfo(TensorProto.INT32, (3 * B + 2,))],
                       num_heads=N)
    assert d is not None and "key_padding_mask" in d.rejected


ATT_NAMES = ["plain", "bias", "mask1d", "mask2b", "mask2d", "mask3d", "causal", "past", "past_causal_mask2d",
             "attn_bias", "qkv_sizes", "scale"]


@pytest.mark.parametrize("name", ATT_NAMES)
def test_contrib_attention_matches_onnxruntime(kit, rng, name):
    hid_in = 12
    s = 1 if "past" in name else S
    x = rng.standard_normal((B, s, hid_in)).astype(np.float32)
    attrs: dict = dict(num_heads=N)
    sizes = (D, D, D)
    if "qkv_sizes" in name:
        sizes = (D, D, 2 * D)
        attrs["qkv_hidden_sizes"] = list(sizes)
    w = (rng.standard_normal((hid_in, sum(sizes))) * 0.3).astype(np.float32)
    ins: list = [x, w, rng.standard_normal(sum(sizes)).astype(np.float32) if "bias" in name else None, None, None,
                 None]
    past_len = 3 if "past" in name else 0
    total = past_len + s
    if "past" in name:
        ins[4] = rng.standard_normal((2, B, N, past_len, H)).astype(np.float32)
    if "mask1d" in name:
        ins[3] = np.array([total - 1, total], np.int32)
    if "mask2b" in name:
        ins[3] = np.array([total, total - 1, 1, 0], np.int32)
    if "mask2d" in name:
        ins[3] = np.ones((B, total), np.int32)
        ins[3][0, 0] = 0
    if "mask3d" in name:
        ins[3] = rng.integers(0, 2, (B, s, total)).astype(np.int32)
        ins[3][:, :, -1] = 1
    if "causal" in name:
        attrs["unidirectional"] = 1
    if "attn_bias" in name:
        ins[5] = rng.standard_normal((B, 1, s, total)).astype(np.float32)
    if "scale" in name:
        attrs["scale"] = 0.3
    if ins[2] is None:  # onnxruntime's CPU kernel requires the bias input
        ins[2] = np.zeros(sum(sizes), np.float32)
    while ins and ins[-1] is None:
        ins.pop()
    n_out = 2 if "past" in name else 1
    ref = kit.ort("Attention", ins, n_out, **attrs)
    got = kit.ours("Attention", ins, n_out, **attrs)
    for r, o in zip(ref, got):
        assert o.shape == r.shape
        np.testing.assert_allclose(o, r, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("with_segment", [False, True])
@pytest.mark.parametrize("with_mask", [False, True])
@pytest.mark.parametrize("with_pos", [False, True])
def test_embed_layer_norm_matches_onnxruntime(kit, rng, with_segment, with_mask, with_pos):
    vocab, hid = 30, 16
    ids = rng.integers(0, vocab, (B, 5)).astype(np.int32)
    ins = [ids, rng.integers(0, 2, (B, 5)).astype(np.int32) if with_segment else None,
           rng.standard_normal((vocab, hid)).astype(np.float32), rng.standard_normal((8, hid)).astype(np.float32),
           rng.standard_normal((2, hid)).astype(np.float32) if with_segment else None,
           rng.standard_normal(hid).astype(np.float32), rng.standard_normal(hid).astype(np.float32),
           np.array([[1, 1, 1, 0, 0], [1, 0, 1, 1, 1]], np.int32) if with_mask else None,
           rng.integers(0, 8, (1, 5)).astype(np.int32) if with_pos else None]
    while ins[-1] is None:
        ins.pop()
    ref = kit.ort("EmbedLayerNormalization", ins, 3, epsilon=1e-12)
    got = kit.ours("EmbedLayerNormalization", ins, 3, epsilon=1e-12)
    for r, o in zip(ref, got):
        assert o.shape == r.shape and o.dtype == r.dtype
        np.testing.assert_allclose(o, r, rtol=1e-5, atol=1e-5)


def test_qattention_declines_float_input_and_per_row_input_scale(kit):
    from onnx import TensorProto as TP

    from ort_cpu_ep.ops import InputInfo as II

    U8, F = TP.UINT8, TP.FLOAT
    base = [II(U8, (2, 3, 16)), II(U8, (16, 48)), II(F, (48,)), II(F, ()), II(F, ())]
    d = kit.decline_of("QAttention", [II(F, (2, 3, 16))] + base[1:], num_heads=2)
    assert d is not None and "input dtype FLOAT" in d.rejected
    d = kit.decline_of("QAttention", base[:3] + [II(F, (6,)), II(F, ())], num_heads=2)
    assert d is not None and "input_scale" in d.rejected
    assert kit.decline_of("QAttention", base, num_heads=2) is None
