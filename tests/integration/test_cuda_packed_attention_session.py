"""PackedAttention and PackedMultiHeadAttention through InferenceSession on the emulated CUDA device
(ort_cuda_ep.testing.EmulatingDriver): onnxruntime's CPU provider implements neither, so the CUDA EP must
claim them; the session budgets them with the recipes' workspace (PackedAttention's one aligned root,
planned in the pre-allocated arena) and the outputs match a numpy transcription of the ops' spec."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from ort_session import InferenceSession

pytest.importorskip("ort_cuda_ep", reason="ort-cuda-ep is not installed")
from ort_cuda_ep.testing import EmulatingDriver, install_driver  # noqa: E402

CUDA = "CUDAExecutionProvider"
B, S, H, D, DIN = 3, 4, 2, 8, 12


def _model(op: str, rng) -> tuple[bytes, dict]:
    i32 = TensorProto.INT32
    offsets = [helper.make_tensor_value_info("token_offset", i32, [B, S]),
               helper.make_tensor_value_info("cum", i32, [B + 1])]
    out = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["tokens", H * D])]
    weights = {}
    if op == "PackedAttention":
        weights = {"w": (rng.standard_normal((DIN, 3 * H * D)) * 0.3).astype(np.float32),
                   "b": (rng.standard_normal(3 * H * D) * 0.3).astype(np.float32)}
        node = helper.make_node(op, ["x", "w", "b", "token_offset", "cum"], ["y"], domain="com.microsoft", num_heads=H)
        ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["tokens", DIN]), *offsets]
    else:
        node = helper.make_node(op, ["qkv", "", "", "", "token_offset", "cum"], ["y"], domain="com.microsoft",
                                num_heads=H)
        ins = [helper.make_tensor_value_info("qkv", TensorProto.FLOAT, ["tokens", H, 3, D]), *offsets]
    g = helper.make_graph([node], "g", ins, out, [numpy_helper.from_array(v, k) for k, v in weights.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    return m.SerializeToString(), weights


@pytest.mark.parametrize("op", ["PackedAttention", "PackedMultiHeadAttention"])
def test_packed_attention_is_budgeted_and_runs_on_the_emulated_device(monkeypatch, op):
    from ort_cuda_ep._packed_recipe import packed_attention_recipe

    driver = install_driver(monkeypatch, EmulatingDriver())
    rng = np.random.default_rng(4)
    model, weights = _model(op, rng)
    seqlens = [1, 2, 4]
    T = sum(seqlens)
    real = [b * S + s for b, n in enumerate(seqlens) for s in range(n)]
    pad = [b * S + s for b, n in enumerate(seqlens) for s in range(n, S)]
    off = np.array(real + pad, np.int32).reshape(B, S)
    cum = np.concatenate([[0], np.cumsum(seqlens)]).astype(np.int32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = InferenceSession(model, {"budgets": "cuda:1MiB", "free_dimension_overrides": {"tokens": T},
                                        "session.pre_allocate_execution_buffers": "1"},
                                providers=[CUDA, "CPUExecutionProvider"])
    (node,) = [n for n in sess.model.graph.nodes if n.op_type == op]
    assert node.ep == CUDA
    if op == "PackedAttention":
        x = rng.standard_normal((T, DIN)).astype(np.float32)
        feeds = {"x": x}
        qkv = x.astype(np.float64) @ weights["w"] + weights["b"]
        q, k, v = (qkv[:, i * H * D:(i + 1) * H * D].reshape(T, H, D) for i in range(3))
    else:
        packed = rng.standard_normal((T, H, 3, D)).astype(np.float32)
        feeds = {"qkv": packed}
        q, k, v = (packed[:, :, i].astype(np.float64) for i in range(3))
    feeds.update(token_offset=off, cum=cum)
    # the spec: scatter to the padded layout, mask keys past each length, softmax, gather the real tokens
    qp, kp, vp = (np.zeros((B * S, H, D)) for _ in range(3))
    qp[off.reshape(-1)[:T]], kp[off.reshape(-1)[:T]], vp[off.reshape(-1)[:T]] = q, k, v
    want = np.zeros((B * S, H, D))
    for b, n in enumerate(seqlens):
        s = np.einsum("shd,jhd->hsj", qp[b * S:(b + 1) * S], kp[b * S:(b + 1) * S]) / np.sqrt(D)
        s[:, :, n:] = -10000.0
        p = np.exp(s - s.max(-1, keepdims=True))
        want[b * S:(b + 1) * S] = np.einsum("hsj,jhd->shd", p / p.sum(-1, keepdims=True), vp[b * S:(b + 1) * S])
    want = want.reshape(B * S, H * D)[off.reshape(-1)[:T]]
    for _ in range(2):
        np.testing.assert_allclose(sess.run(None, feeds)[0], want, rtol=1e-4, atol=1e-4)
        stats = sess.last_run_stats
        assert stats.allocations == 0 and stats.scratch_fallbacks == 0
        assert stats.workspace_from_plan == (1 if op == "PackedAttention" else 0)  # the kernel got its planned root
    launched = {c[1] for c in driver.calls if c[0] == "launch"}
    assert "packed_attn_f32" in launched
    # Level 2 as planned: PackedAttention's one 256-byte-aligned root (the QKV projection, 7 x 48 x 4 =
    # 1,344 B -> 1,536 B), PackedMultiHeadAttention none
    declared = {k[1]: v for k, v in sess.memory.slots.items() if k[0] == node.index}
    assert declared == ({0: packed_attention_recipe(T, H * D, H * D, H, 4).total_bytes} if op == "PackedAttention" else {})
    if op == "PackedAttention":
        assert declared == {0: 1536}
    sess.close()
    assert driver.memory == {}
