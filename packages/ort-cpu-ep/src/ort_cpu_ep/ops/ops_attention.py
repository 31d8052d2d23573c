"""ONNX Attention (opset 23+): scaled dot-product attention with GQA, KV cache, causal/sliding-window
masks, softcap. Vectorized over batch and heads; 16-bit inputs are computed in their own type, step by step,
as the ONNX reference does."""

from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto as T

from ._registry import Decline, OpImpl, register
from ._util import FLOATS_BF, check_all, check_dtype, decline_attr, np_dtype, rank


def _split_heads(x: np.ndarray, heads: int) -> np.ndarray:
    b, s, hidden = x.shape
    return x.reshape(b, s, heads, hidden // heads).transpose(0, 2, 1, 3)


def _causal_allowed(sq: int, skv: int, offset) -> np.ndarray:
    i = np.arange(sq).reshape(sq, 1)
    j = np.arange(skv).reshape(1, skv)
    if np.ndim(offset):
        return (j <= i + np.reshape(offset, (-1, 1, 1)))[:, None]  # (B, 1, q, kv)
    return j <= i + int(offset)


def _window_allowed(sq: int, skv: int, offset, left: int, right: int) -> np.ndarray:
    i = np.arange(sq).reshape(sq, 1)
    j = np.arange(skv).reshape(1, skv)
    diff = (i + np.reshape(offset, (-1, 1, 1)))[:, None] - j if np.ndim(offset) else i + int(offset) - j
    ok = np.ones(np.shape(diff), dtype=bool)
    if left >= 0:
        ok &= diff <= left
    if right >= 0:
        ok &= -diff <= right
    return ok


def attention(q, k, v, mask=None, past_k=None, past_v=None, nonpad=None, *, scale=None, is_causal=False,
              q_heads=None, kv_heads=None, softcap=0.0, qk_mode=-1, left=-1, right=-1, softmax_precision=None, scratch=None,
              want_qk=True):
    """(Y, present_key, present_value, qk_output) following the ONNX Attention definition."""
    dt = q.dtype
    three_d = q.ndim == 3
    if three_d:
        q, k, v = _split_heads(q, q_heads), _split_heads(k, kv_heads), _split_heads(v, kv_heads)
    pk = k if past_k is None else np.concatenate([past_k, k], axis=2)
    pv = v if past_v is None else np.concatenate([past_v, v], axis=2)
    # 16-bit types run natively like the ONNX function body and the reference: every step rounds to the input
    # type (a bfloat16 matmul accumulates in float32, as numpy does for it, and rounds once at its end)
    ct = dt.type
    qf, kf, vf = q.astype(ct), pk.astype(ct), pv.astype(ct)
    sq, skv = qf.shape[2], kf.shape[2]
    bias = np.zeros((sq, skv), dtype=ct)
    if mask is not None:
        pad = skv - mask.shape[-1]
        if pad > 0:
            mask = np.pad(mask, [(0, 0)] * (mask.ndim - 1) + [(0, pad)],
                          constant_values=False if mask.dtype == bool else -np.inf)
        m = np.where(mask, ct(0), ct(-np.inf)) if mask.dtype == bool else mask.astype(ct)
        bias = bias + m
    if past_k is None and nonpad is not None:
        offset = nonpad.reshape(-1).astype(np.int64) - sq
    else:
        offset = past_k.shape[2] if past_k is not None else 0
    if is_causal:
        bias = np.where(_causal_allowed(sq, skv, offset), bias, ct(-np.inf))
    if left >= 0 or right >= 0:
        bias = np.where(_window_allowed(sq, skv, offset, left, right), bias, ct(-np.inf))
    if nonpad is not None:
        pm = np.arange(skv) < nonpad.reshape(-1, 1)
        bias = bias + np.where(pm, ct(0), ct(-np.inf)).reshape(-1, 1, 1, skv)
    hq, hk = qf.shape[1], kf.shape[1]
    if hq != hk:
        kf, vf = np.repeat(kf, hq // hk, axis=1), np.repeat(vf, hq // hk, axis=1)
    if scale is None:
        scale = 1 / math.sqrt(qf.shape[3])
    root = ct(math.sqrt(scale))
    shape = (qf.shape[0], hq, sq, skv)
    sp = np.dtype(ct) if softmax_precision is None else np_dtype(softmax_precision)
    buf = None
    if scratch is not None and sp == np.dtype(ct) and dt.name != "bfloat16":  # numpy's bf16 matmul has no out=
        nbytes = int(np.prod(shape)) * sp.itemsize
        raw = scratch(nbytes)
        if raw is not None and raw.nbytes >= nbytes:
            buf = raw.reshape(-1).view(np.uint8)[:nbytes].view(sp).reshape(shape)
    s = np.matmul(qf * root, np.swapaxes(kf, -1, -2) * root, out=buf)  # the score buffer, updated in place
    if s.dtype != np.dtype(ct):  # bfloat16: numpy computes the product in float32
        s = s.astype(ct)
    if softcap and softcap > 0:
        c = ct(softcap)
        np.divide(s, c, out=s)
        np.tanh(s, out=s)
        np.multiply(s, c, out=s)
    qk_out = s.astype(dt) if want_qk and qk_mode in (-1, 0, 1) else None
    s += bias
    if want_qk and qk_mode == 2:
        qk_out = s.astype(dt)
    if sp != s.dtype:
        s = s.astype(sp)
    row_masked = np.isneginf(np.max(bias, axis=-1, keepdims=True))
    mx = np.max(s, axis=-1, keepdims=True)
    s -= np.where(np.isneginf(mx), 0, mx)
    np.exp(s, out=s)
    total = np.sum(s, axis=-1, keepdims=True)
    s /= np.where(total == 0, 1, total)
    s[np.broadcast_to(row_masked, s.shape)] = 0
    if want_qk and qk_mode == 3:
        qk_out = s.astype(dt)
    p = s if s.dtype == dt and s.dtype == np.dtype(ct) else s.astype(dt).astype(ct)
    y = np.matmul(p, vf)
    if three_d:
        y = y.transpose(0, 2, 1, 3).reshape(y.shape[0], y.shape[2], y.shape[1] * y.shape[3])
    return y.astype(dt), pk, pv, qk_out


def attention_score_bytes(q_shape, k_shape, past_shape, q_heads: int | None, itemsize: int) -> int | None:
    """Bytes of the (B, Hq, Sq, Skv) score buffer for static shapes, else None."""
    dims = list(q_shape or ()) + list(k_shape or ()) + list(past_shape or ())
    if not q_shape or not k_shape or not all(isinstance(d, int) for d in dims):
        return None
    if len(q_shape) == 3:
        b, sq, hq = q_shape[0], q_shape[1], q_heads or 1
        skv = k_shape[1]
    else:
        b, hq, sq = q_shape[0], q_shape[1], q_shape[2]
        skv = k_shape[2]
    if past_shape:
        skv += past_shape[2]
    return b * hq * sq * skv * itemsize


@register("Attention", since=23)
class Attention(OpImpl):
    def supports(self, node, inputs, opset):
        d = check_all(inputs, FLOATS_BF, [0, 1, 2, 4, 5])
        if d:
            return d
        if len(inputs) > 3 and inputs[3].present:
            d = check_dtype(inputs, 3, FLOATS_BF | {T.BOOL})
            if d:
                return d
        r = rank(inputs, 0)
        if r == 3 and (node.attr("q_num_heads") is None or node.attr("kv_num_heads") is None):
            return Decline(rejected="3-D inputs without q_num_heads/kv_num_heads",
                           accepts="both head-count attributes for 3-D Q/K/V", remedy="set the attributes")
        if r not in (None, 3, 4):
            return Decline(rejected=f"input rank {r}", accepts="3 or 4")
        if node.attr("qk_matmul_output_mode", 0) not in (0, 1, 2, 3):
            return decline_attr("qk_matmul_output_mode", node.attr("qk_matmul_output_mode"), "0..3")
        sp = node.attr("softmax_precision")
        if sp is not None and sp not in (T.FLOAT, T.DOUBLE, T.FLOAT16, T.BFLOAT16):
            return decline_attr("softmax_precision", sp, "1, 10, 11, 16")
        return None

    def compute(self, node, inputs):
        get = lambda i: inputs[i] if len(inputs) > i else None  # noqa: E731
        out = attention(inputs[0], inputs[1], inputs[2], get(3), get(4), get(5), get(6),
                        scale=node.attr("scale"), is_causal=bool(node.attr("is_causal", 0)),
                        q_heads=node.attr("q_num_heads"), kv_heads=node.attr("kv_num_heads"),
                        softcap=node.attr("softcap", 0.0), qk_mode=node.attr("qk_matmul_output_mode", 0),
                        left=node.attr("left_window_size", -1), right=node.attr("right_window_size", -1),
                        softmax_precision=node.attr("softmax_precision"),
                        scratch=lambda nbytes: self.scratch(0, nbytes),
                        want_qk=len(node.outputs) > 3 and bool(node.outputs[3]))
        return list(out)

    def workspace_bytes(self, node, input_shapes):
        """Slot 0: the (B, Hq, Sq, Skv) attention score buffer in the compute type (float32 for bfloat16)."""
        shapes = list(input_shapes) + [None] * 6
        v = node.graph.values.get(node.inputs[0]) if node.graph is not None else None
        ct = {T.FLOAT16: T.FLOAT16, T.DOUBLE: T.DOUBLE}.get(v.dtype if v is not None else 0, T.FLOAT)
        sp = node.attr("softmax_precision")
        if sp is not None and sp != ct:
            return []  # scores are converted to another precision: no in-place buffer
        size = np_dtype(ct).itemsize
        n = attention_score_bytes(shapes[0], shapes[1], shapes[4], node.attr("q_num_heads"), size)
        return [] if n is None else [(0, n)]



@register("FlexAttention", since=1, domain="ai.onnx.preview")
class FlexAttention(OpImpl):
    """Rank-4 attention with optional score_mod / prob_mod subgraphs (run with the interpreter)."""

    implicit_inputs = True

    def supports(self, node, inputs, opset):
        for i in range(3):
            r = rank(inputs, i)
            if r is not None and r != 4:
                return Decline(rejected=f"input {i} rank {r}", accepts="rank-4 Q, K, V")
        sp = node.attr("softmax_precision")
        if sp is not None and sp not in (T.FLOAT, T.DOUBLE, T.FLOAT16, T.BFLOAT16):
            return decline_attr("softmax_precision", sp, "1, 10, 11, 16")
        return check_all(inputs, FLOATS_BF, range(3))

    def compute(self, node, inputs):
        from ._interp import run_graph

        q, k, v = inputs[:3]
        outer = dict(zip(node.implicit_inputs(), inputs[3:]))
        hq, hk = q.shape[1], k.shape[1]
        if hq != hk:
            k, v = np.repeat(k, hq // hk, axis=1), np.repeat(v, hq // hk, axis=1)
        scale = node.attr("scale")
        if scale is None:
            scale = 1.0 / np.sqrt(q.shape[3])
        root = np.array(np.sqrt(np.float32(scale)), dtype=q.dtype)
        scores = np.matmul(q * root, np.swapaxes(k * root, -1, -2))
        sp = node.attr("softmax_precision")
        ct = np_dtype(sp) if sp is not None else (np.dtype(np.float32) if q.dtype.itemsize < 4 else q.dtype)
        scores = scores.astype(ct)

        def mod(name, x):
            g = node.attr(name)
            if g is None:
                return x
            res = run_graph(g, {g.inputs[0]: x}, outer)
            return np.asarray(res[g.outputs[0]], dtype=ct)

        scores = mod("score_mod", scores)
        e = np.exp(scores - np.max(scores, axis=-1, keepdims=True))
        probs = mod("prob_mod", e / np.sum(e, axis=-1, keepdims=True))
        return [np.matmul(probs, v.astype(ct)).astype(v.dtype)]
