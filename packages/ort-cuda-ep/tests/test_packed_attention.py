"""PackedAttention / PackedMultiHeadAttention without a GPU: the launch code runs on an EmulatingRuntime
(every launch checked against packed_attention.cu's / matmul.cu's signature and executed in numpy as the
kernel does) and is compared with a numpy reference written from the ops' spec (onnxruntime's CPU
provider does not implement them): tokens scattered to their padded positions by token_offset, keys
past each sequence's length masked with mask_filter_value, softmax, gathered back. Also: claims and
declines, and the seeds' workspace recipes (one 256-byte-aligned root; unavailable hints)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from ort_abi import tensor_from_host, tensor_to_host
from ort_cuda_ep import get_profile
from ort_cuda_ep._launch import ScratchOnly, compute
from ort_cuda_ep._ops import NodeFacts, check_node, find_spec
from ort_cuda_ep._packed_recipe import packed_attention_recipe, packed_mha_recipe
from ort_cuda_ep._workspace import estimate_bytes, workspace_bytes
from ort_cuda_ep.testing import EmulatingRuntime

F32, F16, I32 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT32
PROFILE = get_profile("a100")


def run(op, inputs, attrs):
    rt = EmulatingRuntime()
    args = [None if a is None else tensor_from_host(rt.allocator, np.asarray(a)) for a in inputs]
    ws = ScratchOnly(rt)
    out = compute(rt, find_spec(op, "com.microsoft", 1), "n", args, attrs, ws)[0]
    host = tensor_to_host(out)
    ws.release()
    return host, rt


CASES = [([1, 2, 4], 4, 2, 8, 8), ([3, 3], 3, 1, 16, 16), ([5, 1, 2], 6, 4, 8, 4), ([2], 2, 2, 4, 4)]


@pytest.mark.parametrize("seqlens,S,H,D,Dv", CASES)
@pytest.mark.parametrize("with_ab", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_packed_attention_matches_the_spec(packed_kit, seqlens, S, H, D, Dv, with_ab, dtype):
    rng = np.random.default_rng(len(seqlens) * 7 + S)
    off, cum = packed_kit.layout(seqlens, S)
    T, Din = int(cum[-1]), 12
    total = 2 * H * D + H * Dv
    x, w, bias = (rng.standard_normal(s).astype(dtype) * 0.5 for s in ((T, Din), (Din, total), (total,)))
    ab = (rng.standard_normal((len(seqlens), 1, S, S)) * 0.5).astype(dtype) if with_ab else None
    attrs = {"num_heads": H, "qkv_hidden_sizes": [H * D, H * D, H * Dv]}
    ours, rt = run("PackedAttention", [x, w, bias, off, cum, ab], attrs)
    qkv = x.astype(np.float64) @ w.astype(np.float64) + bias.astype(np.float64)
    q, k, v = qkv[:, :H * D], qkv[:, H * D:2 * H * D], qkv[:, 2 * H * D:]
    want = packed_kit.reference(q.reshape(T, H, D), k.reshape(T, H, D), v.reshape(T, H, Dv), off, cum,
                     None if ab is None else ab.astype(np.float64), 1 / np.sqrt(D))
    tol = 1e-4 if dtype == np.float32 else 2e-2
    np.testing.assert_allclose(ours.astype(np.float64), want, rtol=tol, atol=tol)
    assert [e for e, *_ in rt.launches] == [f"matmul_{'f32' if dtype == np.float32 else 'f16'}",
                                           f"packed_attn_{'f32' if dtype == np.float32 else 'f16'}"]
    item = np.dtype(dtype).itemsize
    proj = item * T * total
    assert rt.counters.last["n"][1] == packed_attention_recipe(T, H * D, H * Dv, H, item).total_bytes == \
        -(-proj // 256) * 256


@pytest.mark.parametrize("seqlens,S,H,D,Dv,layout", [
    (*case, layout) for case in CASES for layout in ("separate", "separate+bias", "packed_qkv", "packed_qkv+bias")
    if case[3] == case[4] or not layout.startswith("packed")])  # packed QKV has one head size
def test_packed_multihead_attention_matches_the_spec(packed_kit, seqlens, S, H, D, Dv, layout):
    rng = np.random.default_rng(S * 3 + H)
    off, cum = packed_kit.layout(seqlens, S)
    T = int(cum[-1])
    q, k = (rng.standard_normal((T, H, D)).astype(np.float32) for _ in range(2))
    v = rng.standard_normal((T, H, Dv)).astype(np.float32)
    bias = rng.standard_normal(2 * H * D + H * Dv).astype(np.float32) if "bias" in layout else None
    ab = rng.standard_normal((1, H, S, S)).astype(np.float32)
    attrs = {"num_heads": H, "scale": 0.3, "mask_filter_value": -10000.0}
    if layout.startswith("packed"):
        qkv = np.stack([q, k, v], axis=2)  # [T, H, 3, D]
        inputs = [qkv, None, None, bias, off, cum, ab]
    else:
        inputs = [q.reshape(T, -1), k.reshape(T, -1), v.reshape(T, -1), bias, off, cum, ab]
    ours, rt = run("PackedMultiHeadAttention", inputs, attrs)
    if bias is not None:
        q = q + bias[:H * D].reshape(H, D)
        k = k + bias[H * D:2 * H * D].reshape(H, D)
        v = v + bias[2 * H * D:].reshape(H, Dv)
    want = packed_kit.reference(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64), off, cum, ab.astype(np.float64), 0.3)
    np.testing.assert_allclose(ours, want, rtol=1e-4, atol=1e-4)
    assert rt.counters.last["n"][1] == 0  # the fused route keeps its softmax state on chip


def test_malformed_offsets_never_read_out_of_bounds(packed_kit):
    """token_offset past B*S gives zero rows; a cumulative length past the tokens is clamped (the emulation
    asserts every read is inside its allocation, as the kernel guarantees)."""
    off, cum = packed_kit.layout([2, 1], 2)
    off = off.copy()
    off[0, 0] = 99
    cum = np.array([0, 2, 40], np.int32)
    q = np.ones((3, 4), np.float32)
    ours, _ = run("PackedMultiHeadAttention", [q, q, q, None, off, cum, None], {"num_heads": 2})
    assert np.all(ours[0] == 0) and np.all(np.isfinite(ours))


def test_zero_tokens_launch_nothing_and_use_no_workspace():
    off, cum = np.zeros((1, 2), np.int32), np.zeros(2, np.int32)
    out, rt = run("PackedAttention", [np.zeros((0, 4), np.float32), np.zeros((4, 12), np.float32),
                                      np.zeros(12, np.float32), off, cum, None], {"num_heads": 2})
    assert out.shape == (0, 4) and rt.launches == []
    assert packed_attention_recipe(0, 4, 4, 2, 4).total_bytes == 0


def _facts(op, shapes, dtypes, attrs, names=None):
    names = names or tuple(f"i{i}" if s is not None else "" for i, s in enumerate(shapes))
    return NodeFacts("n", op, "com.microsoft", names, tuple(dtypes), tuple(shapes), attrs, ("y",))


PA_SHAPES = [("T", 12), (12, 48), (48,), (2, 4), (3,), None]
PA_TYPES = [F32, F32, F32, I32, I32, 0]
PMHA_SHAPES = [("T", 16), ("T", 16), ("T", 16), None, (2, 4), (3,), (1, 2, 4, 4)]
PMHA_TYPES = [F16, F16, F16, 0, I32, I32, F16]


def test_claims():
    assert check_node(_facts("PackedAttention", PA_SHAPES, PA_TYPES, {"num_heads": 2}), 1)[1] is None
    assert check_node(_facts("PackedMultiHeadAttention", PMHA_SHAPES, PMHA_TYPES, {"num_heads": 2}), 1)[1] is None
    packed = [("T", 2, 3, 8), None, None, None, (2, 4), (3,), None]
    assert check_node(_facts("PackedMultiHeadAttention", packed, [F32, 0, 0, 0, I32, I32, 0], {"num_heads": 2}), 1)[1] is None


@pytest.mark.parametrize("op,change,aspect,needle", [
    ("PackedAttention", {"attrs": {"num_heads": 5}}, "shape", "num_heads=5"),
    ("PackedAttention", {"attrs": {"num_heads": 2, "do_rotary": 1}}, "attribute", "do_rotary"),
    ("PackedAttention", {"shape": (1, (12, 47))}, "shape", "weights"),
    ("PackedAttention", {"shape": (4, (4,))}, "shape", "cumulative_sequence_length"),
    ("PackedAttention", {"type": (3, F32)}, "dtype", "input 3"),
    ("PackedAttention", {"type": (0, TensorProto.BFLOAT16)}, "dtype", "BFLOAT16"),
    ("PackedAttention", {"attrs": {"num_heads": 2, "qkv_hidden_sizes": [8, 16, 24]}}, "attribute", "qkv_hidden_sizes"),
    ("PackedMultiHeadAttention", {"shape": (6, (3, 2, 4, 4))}, "shape", "attention_bias"),
    ("PackedMultiHeadAttention", {"shape": (1, ("T", 8))}, "shape", "key"),
    ("PackedMultiHeadAttention", {"attrs": {"num_heads": 2, "scale": 0.1}}, None, None),
    ("PackedMultiHeadAttention", {"attrs": {"num_heads": 1}}, "shape", "attention_bias"),
    ("PackedMultiHeadAttention", {"drop": 5}, "input", "cumulative_sequence_length"),
])
def test_declines_name_what_and_why(op, change, aspect, needle):
    shapes, types = (list(PA_SHAPES), list(PA_TYPES)) if op == "PackedAttention" else (list(PMHA_SHAPES), list(PMHA_TYPES))
    attrs = change.get("attrs", {"num_heads": 2})
    if "shape" in change:
        shapes[change["shape"][0]] = change["shape"][1]
    if "type" in change:
        types[change["type"][0]] = change["type"][1]
        if change["type"][0] == 0:
            types[1] = types[2] = change["type"][1]
    names = None
    if "drop" in change:
        shapes[change["drop"]] = None
        names = tuple("" if i == change["drop"] or s is None else f"i{i}" for i, s in enumerate(shapes))
    r = check_node(_facts(op, shapes, types, attrs, names), 1)[1]
    if aspect is None:
        assert r is None
        return
    assert r is not None and r.aspect == aspect and needle in (r.detail + r.accepts), r


def test_workspace_recipes_follow_the_seeds():
    static = [(3, 12), (12, 48), (48,), (2, 4), (3,), None]
    # one 256-byte-aligned root: projection (4 * 3 * 48 = 576 B) aligned + max(routes) = 0
    assert workspace_bytes("packed_attention", static, PA_TYPES, {"num_heads": 2}, PROFILE) == 768
    assert workspace_bytes("packed_attention", [(64, 12), *static[1:]], [F16, *PA_TYPES[1:]], {"num_heads": 2},
                           PROFILE) is None  # 64 tokens cannot fit B*S = 8 padded positions: malformed
    assert packed_attention_recipe(100, 768, 768, 12, 2).total_bytes == 460_800
    assert packed_mha_recipe(100, 768, 768, 12).total_bytes == 0
    # Level 1 over a token range: the largest need (monotonic)
    assert estimate_bytes("packed_attention", PA_SHAPES, PA_TYPES, {"num_heads": 2}, PROFILE, {"T": (1, 8)},
                          [True] * 5 + [False]) == 4 * 8 * 48  # 1,536 B: already 256-aligned
    assert estimate_bytes("packed_mha", PMHA_SHAPES, PMHA_TYPES, {"num_heads": 2}, PROFILE, {"T": (1, 8)},
                          [True, True, True, False, True, True, True]) == 0


@pytest.mark.parametrize("kernel,shapes,present", [
    ("packed_attention", [(3, 12), (12, 48), (48,), (2, 4), None, None], [True] * 4 + [False, False]),  # missing cum
    ("packed_attention", [(3, 12), (12, 48), (48,), (2, 4), None, None], [True] * 5 + [False]),  # shapeless cum
    ("packed_attention", [(3, 12), (12, 48), (48,), (2, "S"), (3,), None], [True] * 5 + [False]),  # unknown dim
    ("packed_attention", [(0, 12), (12, 48), (48,), (2, 4), (3,), None], [True] * 5 + [False]),  # zero hint
    ("packed_attention", [(3, 12), (12, 47), (47,), (2, 4), (3,), None], [True] * 5 + [False]),  # malformed
    ("packed_mha", [(3, 16), (3, 16), (3, 16), None, (2, 4), (4,), None], [True] * 3 + [False, True, True, False]),
    ("packed_mha", [(3, 16), None, (3, 16), None, (2, 4), (3,), None], [True, False, True, False, True, True, False]),
    ("packed_mha", [(3, 16), (3, 16), (3, 16), None, (0, 4), (1,), None], [True] * 3 + [False, True, True, False]),
])
def test_unavailable_hints_have_no_estimate(kernel, shapes, present):
    dtypes = [F32] * 3 + [I32] * 3 + [F32]
    assert estimate_bytes(kernel, shapes, dtypes, {"num_heads": 2}, PROFILE, {}, present) is None
    if all(s is None or all(isinstance(d, int) for d in s) for s in shapes):
        assert workspace_bytes(kernel, shapes, dtypes, {"num_heads": 2}, PROFILE) is None
