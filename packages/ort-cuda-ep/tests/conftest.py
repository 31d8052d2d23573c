"""Model builders shared by this package's tests (one-node graphs with resolved shapes)."""

from __future__ import annotations

import types

import numpy as np
import pytest
from onnx import TensorProto, helper

from ort_graph import from_proto


def mha_model(batch, seq, kv, hidden=128, heads=2, extra_inputs=(), dtype=TensorProto.FLOAT, unidirectional=0):
    inputs = [helper.make_tensor_value_info(n, dtype, s) for n, s in
              (("q", [batch, seq, hidden]), ("k", [batch, kv, hidden]), ("v", [batch, kv, hidden]))]
    node = helper.make_node("MultiHeadAttention", ["q", "k", "v", *extra_inputs], ["o"], domain="com.microsoft",
                            num_heads=heads, unidirectional=unidirectional, name="/model/layers.0/attn/MultiHeadAttention")
    for e in extra_inputs:
        inputs.append(helper.make_tensor_value_info(e, dtype, [batch, kv]))
    g = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("o", dtype, [batch, seq, hidden])])
    mp = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    return from_proto(mp)


def nbits_model(m, n=256, k=128, block=32):
    kb = k // block
    inits = [helper.make_tensor("B", TensorProto.UINT8, [n, kb, block // 2], np.zeros(n * kb * block // 2, np.uint8).tobytes(), raw=True),
             helper.make_tensor("scales", TensorProto.FLOAT, [n * kb], np.ones(n * kb, np.float32).tolist())]
    node = helper.make_node("MatMulNBits", ["A", "B", "scales"], ["Y"], domain="com.microsoft", K=k, N=n, bits=4,
                            block_size=block, name="/model/layers.0/mlp/down_proj/MatMul_Q4")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("A", TensorProto.FLOAT, [m, k])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [m, n])], inits)
    return from_proto(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]))



GQA_INPUT_NAMES = ("query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length",
                   "cos_cache", "sin_cache", "position_ids", "attention_bias", "head_sink")


def gqa_model(batch=1, seq=8, past=0, heads=4, kv_heads=2, head=16, packed=True, dtype=TensorProto.FLOAT,
              with_past=True, rotary=1, half=None, cos_rows=128, attrs=None, extra_inputs=(), outputs=3,
              shapes=None, dtypes=None, name="/model/layers.0/attn/GroupQueryAttention"):
    """One com.microsoft GroupQueryAttention node as the genai builder exports it (packed QKV, BNSH past,
    shared cos/sin caches); `shapes` / `dtypes` override per input name (None: no shape), `extra_inputs`
    names inputs after sin_cache to make present, `outputs` is a count or a list of names."""
    hidden = (heads + 2 * kv_heads) * head if packed else heads * head
    half = head // 2 if half is None else half
    default = {"query": [batch, seq, hidden], "key": [batch, seq, kv_heads * head], "value": [batch, seq, kv_heads * head],
               "past_key": [batch, kv_heads, past, head], "past_value": [batch, kv_heads, past, head],
               "seqlens_k": [batch], "total_sequence_length": [], "cos_cache": [cos_rows, half],
               "sin_cache": [cos_rows, half], "position_ids": [batch, seq],
               "attention_bias": [batch, 1, seq, "total"], "head_sink": [heads]}
    present = {"query": True, "key": not packed, "value": not packed, "past_key": with_past, "past_value": with_past,
               "seqlens_k": True, "total_sequence_length": True, "cos_cache": bool(rotary), "sin_cache": bool(rotary)}
    for e in extra_inputs:
        present[e] = True
    last = max(i for i, n in enumerate(GQA_INPUT_NAMES) if present.get(n))
    names = [n if present.get(n) else "" for n in GQA_INPUT_NAMES[:last + 1]]
    types_ = {"seqlens_k": TensorProto.INT32, "total_sequence_length": TensorProto.INT32,
              "position_ids": TensorProto.INT64}
    infos = []
    for n in names:
        if not n:
            continue
        shape = (shapes or {}).get(n, default[n])
        elem = (dtypes or {}).get(n, types_.get(n, dtype))
        infos.append(helper.make_tensor_value_info(n, elem, shape))
    outs = (["output", "present_key", "present_value", "output_qk"][:outputs] if isinstance(outputs, int)
            else list(outputs))
    a = {"num_heads": heads, "kv_num_heads": kv_heads, "do_rotary": rotary, **(attrs or {})}
    node = helper.make_node("GroupQueryAttention", names, outs, domain="com.microsoft", name=name, **a)
    out_shapes = {"output": [batch, seq, heads * head], "present_key": [batch, kv_heads, "total", head],
                  "present_value": [batch, kv_heads, "total", head], "output_qk": None}
    g = helper.make_graph([node], "g", infos, [helper.make_tensor_value_info(o, dtype, out_shapes.get(o)) for o in outs
                                               if o])
    mp = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    return from_proto(mp)


def gqa_inputs(rng, batch, seq, past, heads=4, kv_heads=2, head=16, packed=True, dtype=np.float32, seqlens=None,
               total=None, with_past=True, half=None, cos_rows=128):
    """Feeds for a GroupQueryAttention node, in input order (None where omitted); rotary caches as the
    genai builder makes them (theta 10000)."""
    hidden = (heads + 2 * kv_heads) * head if packed else heads * head
    total = past + seq if total is None else total
    seqlens = [total - 1] * batch if seqlens is None else seqlens
    half = head // 2 if half is None else half
    ang = np.arange(cos_rows)[:, None] * (1.0 / 10000 ** (np.arange(half) / half))[None, :]

    def f(*shape):
        return rng.standard_normal(shape).astype(dtype)

    return [f(batch, seq, hidden), None if packed else f(batch, seq, kv_heads * head),
            None if packed else f(batch, seq, kv_heads * head),
            f(batch, kv_heads, past, head) if with_past else None, f(batch, kv_heads, past, head) if with_past else None,
            np.array(seqlens, np.int32), np.array(total, np.int32), np.cos(ang).astype(dtype), np.sin(ang).astype(dtype)]


def ort_gqa(inputs, attrs):
    """onnxruntime's CPU GroupQueryAttention on the same inputs: [output, present_key, present_value]."""
    import onnxruntime as ort

    names = [n if a is not None else "" for n, a in zip(GQA_INPUT_NAMES, inputs)]
    infos = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
             for n, a in zip(names, inputs) if n]
    elem = helper.np_dtype_to_tensor_dtype(inputs[0].dtype)
    node = helper.make_node("GroupQueryAttention", names, ["o", "pk", "pv"], domain="com.microsoft", **attrs)
    g = helper.make_graph([node], "g", infos, [helper.make_tensor_value_info(n, elem, None) for n in ("o", "pk", "pv")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {n: a for n, a in zip(names, inputs) if n})


@pytest.fixture
def models():
    return types.SimpleNamespace(mha=mha_model, nbits=nbits_model, gqa=gqa_model)


@pytest.fixture
def gqa_kit():
    """GroupQueryAttention helpers: node builder, feeds, onnxruntime's CPU kernel as the reference."""
    return types.SimpleNamespace(model=gqa_model, inputs=gqa_inputs, ort=ort_gqa, names=GQA_INPUT_NAMES)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    from ort_cuda_ep import KernelCache

    return KernelCache(tmp_path_factory.mktemp("cubins"))  # one compile per source for the module


@pytest.fixture
def recording_ep(monkeypatch, cache):
    """A CudaExecutionProvider that found an A100 and runs on ort_cuda_ep.testing.RecordingDriver."""
    from ort_cuda_ep import CudaExecutionProvider, CudaRuntime
    from ort_cuda_ep.testing import RecordingDriver, fake_device

    fake = fake_device("a100")
    monkeypatch.setattr("ort_cuda_ep._ep.discover", lambda device_id=0: fake)
    ep = CudaExecutionProvider(cache=cache)
    ep._runtime = CudaRuntime(fake, cache, ep.identity, driver=RecordingDriver())
    return ep


# -- PackedAttention / PackedMultiHeadAttention by their spec (onnxruntime's CPU provider has neither) ----
def packed_layout(seqlens: list[int], S: int) -> tuple[np.ndarray, np.ndarray]:
    """token_offset (real tokens' padded positions first, then the padding's) and cumulative lengths."""
    real = [b * S + s for b, n in enumerate(seqlens) for s in range(n)]
    pad = [b * S + s for b, n in enumerate(seqlens) for s in range(n, S)]
    return (np.array(real + pad, np.int32).reshape(len(seqlens), S),
            np.concatenate([[0], np.cumsum(seqlens)]).astype(np.int32))


def packed_reference(q, k, v, token_offset, cum, ab, scale, mask_filter=-10000.0):
    """[T, H, D] q/k, [T, H, Dv] v -> [T, H*Dv] by the spec, in float64 on the padded layout."""
    B, S = token_offset.shape
    T, H, D = q.shape
    Dv = v.shape[2]
    qp, kp, vp = np.zeros((B * S, H, D)), np.zeros((B * S, H, D)), np.zeros((B * S, H, Dv))
    at = token_offset.reshape(-1)[:T]
    qp[at], kp[at], vp[at] = q, k, v
    qp, kp, vp = (a.reshape(B, S, H, -1) for a in (qp, kp, vp))
    out = np.zeros((B, S, H, Dv))
    for b in range(B):
        n = cum[b + 1] - cum[b]
        s = np.einsum("shd,jhd->hsj", qp[b], kp[b]) * scale
        if ab is not None:
            s = s + ab[b if ab.shape[0] > 1 else 0]
        s[:, :, n:] = mask_filter
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        out[b] = np.einsum("hsj,jhd->shd", p, vp[b])
    return out.reshape(B * S, H * Dv)[at]


@pytest.fixture(scope="module")
def packed_kit():
    """Packed-attention helpers: the token layout of given sequence lengths and the spec's reference."""
    return types.SimpleNamespace(layout=packed_layout, reference=packed_reference)
