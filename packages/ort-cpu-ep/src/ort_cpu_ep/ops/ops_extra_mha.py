"""com.microsoft MultiHeadAttention (self / cross attention with KV cache), ONNX Runtime CPU semantics.

query (B, S, D) and key/value (B, L, D) / (B, L, Dv) get the packed input-projection bias (D + D + Dv) added,
or key/value come as (B, N, L, H) BNSH caches for cross attention (no bias then). past_key/past_value
(B, N, P, H) are prepended; present = [past, new]. Scores are scale * Q K^T (scale default 1/sqrt(H)) with an
additive mask: key_padding_mask 0 (2-D (B, T) or 3-D (B, S, T)) or positions >= length (1-D (B)) become
mask_filter_value, and unidirectional masks future positions the same way; attention_bias (B|1, N|1, S, T)
is added, then softmax over T and the product with V gives (B, S, N * Hv).

Workspace: the float32 scores (B, N, S, P + L), `mha_workspace_bytes`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import TensorProto

from ort_graph import Node, dtype_name

from ._registry import Decline, InputInfo, OpImpl, attrs_of, register
from .ops_extra_attention import requested

MS = "com.microsoft"
_T = frozenset({TensorProto.FLOAT, TensorProto.FLOAT16})


def _opt(inputs: list, i: int) -> np.ndarray | None:
    return inputs[i] if len(inputs) > i else None


def mha_workspace_bytes(node: Node, input_shapes: Sequence[tuple[int, ...] | None]) -> list[tuple[int, int]]:
    """[(0, bytes)] of the float32 scores (B, N, S, P + L): one function for estimate and declaration."""
    q = input_shapes[0] if input_shapes else None
    k = input_shapes[1] if len(input_shapes) > 1 else None
    if q is None or len(q) != 3 or k is None:
        return []
    kv_len = int(k[2]) if len(k) == 4 else int(k[1])
    past = input_shapes[6] if len(input_shapes) > 6 else None
    past_len = int(past[2]) if past is not None and len(past) == 4 else 0
    n = int(node.attr("num_heads", 0))
    return [(0, 4 * int(q[0]) * n * int(q[1]) * (past_len + kv_len))]


def padding_keep(mask: np.ndarray, b: int, s: int, total: int) -> np.ndarray:
    """Key positions kept by an ORT mask index: (B) lengths, (2B) ends + starts, (B, T) or (B, S, T) 0/1."""
    m = np.asarray(mask)
    pos = np.arange(total)[None, :]
    if m.ndim == 1:
        keep = pos < m[:b, None]
        if m.shape[0] == 2 * b:
            keep &= pos >= m[b:, None]
        return keep[:, None, None, :]
    if m.ndim == 2:
        return (m > 0)[:, None, None, :]
    return (m > 0)[:, None, :, :]


def attend(q: np.ndarray, k: np.ndarray, v: np.ndarray, past_len: int, mask: np.ndarray | None,
           attn_bias: np.ndarray | None, a: dict, scores_buffer, out: np.ndarray | None = None) -> np.ndarray:
    """softmax(scale Q K^T + additive mask + bias) V for BNSH float32 q/k/v -> (B, S, N * Hv), written into
    `out` (float32 (B, S, N * Hv), e.g. the output block) when given."""
    f32 = np.float32
    b, n, s, h = q.shape
    total = k.shape[2]
    scale = float(a.get("scale", 0.0)) or 1.0 / float(np.sqrt(h))
    scores = scores_buffer((b, n, s, total))
    np.matmul(q, k.swapaxes(-1, -2), out=scores)
    scores *= f32(scale)
    filt = f32(a.get("mask_filter_value", -10000.0))
    add = np.zeros((b, 1, s, total), f32)
    if mask is not None:
        add = np.where(padding_keep(mask, b, s, total), add, filt)
    if int(a.get("unidirectional", 0)):
        future = np.arange(total)[None, :] > (past_len + np.arange(s))[:, None]
        add = np.where(future[None, None], filt, add)
    scores += add
    if attn_bias is not None:
        scores += attn_bias.astype(f32)
    scores -= scores.max(axis=-1, keepdims=True)
    probs = np.exp(scores, out=scores)
    probs /= probs.sum(axis=-1, keepdims=True)
    if out is not None:  # (B, S, N * Hv) seen as (B, N, S, Hv): the product lands in place
        np.matmul(probs, v, out=out.reshape(b, s, n, v.shape[-1]).transpose(0, 2, 1, 3))
        return out
    return np.matmul(probs, v).transpose(0, 2, 1, 3).reshape(b, s, -1)


@register("MultiHeadAttention", domain=MS)
class MultiHeadAttention(OpImpl):
    """MultiHeadAttention(query, key, value, bias?, key_padding_mask?, attention_bias?, past_key?, past_value?)."""

    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        n = int(node.attr("num_heads", 0))
        if n <= 0:
            return Decline(rejected=f"num_heads={n!r}", accepts="num_heads > 0", remedy="set num_heads")
        for i in (0, 1, 2, 3, 5, 6, 7):
            if i < len(inputs) and inputs[i].present and inputs[i].dtype and inputs[i].dtype not in _T:
                return Decline(rejected=f"input {i} dtype {dtype_name(inputs[i].dtype)}", accepts="float32, float16")
        q = inputs[0]
        if q.shape is not None and len(q.shape) != 3:
            return Decline(rejected=f"query rank {len(q.shape)} (packed QKV)", accepts="query (B, S, D)",
                           remedy="unpack QKV before the node or run it on ONNX Runtime's CUDA EP")
        if len(inputs) < 3 or not inputs[1].present or not inputs[2].present:
            return Decline(rejected="key/value absent (packed QKV)", accepts="separate key and value inputs",
                           remedy="unpack QKV before the node")
        k = inputs[1]
        if k.shape is not None and len(k.shape) not in (3, 4):
            return Decline(rejected=f"key rank {len(k.shape)} (packed KV)", accepts="key (B, L, D) or (B, N, L, H)",
                           remedy="unpack KV before the node")
        for i, what in ((8, "past_sequence_length"), (9, "cache_indirection")):
            if i < len(inputs) and inputs[i].present:
                return Decline(rejected=f"input {what} present (shared buffer / beam search)",
                               accepts=f"{what} absent", remedy="run beam-search attention on ONNX Runtime")
        if len(node.outputs) > 3 and node.outputs[3]:
            return Decline(rejected="output qk requested", accepts="outputs output, present_key, present_value",
                           remedy="drop the qk output")
        if len(inputs) > 4 and inputs[4].present:
            m = inputs[4]
            if m.dtype and m.dtype != TensorProto.INT32:
                return Decline(rejected=f"key_padding_mask dtype {dtype_name(m.dtype)}", accepts="int32",
                               remedy="cast the mask to int32")
            if m.shape is not None and len(m.shape) == 1 and q.shape is not None and isinstance(m.shape[0], int) \
                    and isinstance(q.shape[0], int) and m.shape[0] != q.shape[0]:
                return Decline(rejected=f"1-D key_padding_mask of length {m.shape[0]!r} (left padding / 3B+2)",
                               accepts="(B) right-padding lengths, (B, T) or (B, S, T)",
                               remedy="give a 2-D mask")
        return None

    def workspace_bytes(self, node: Node, input_shapes: Sequence[tuple[int, ...] | None]) -> list[tuple[int, int]]:
        return mha_workspace_bytes(node, input_shapes)

    def _scores_buffer(self, shape: tuple[int, ...]) -> np.ndarray:
        nbytes = 4 * int(np.prod(shape))
        buf = self.scratch(0, nbytes) if hasattr(self, "scratch") else None
        if buf is not None:
            return np.asarray(buf).reshape(-1).view(np.uint8)[:nbytes].view(np.float32).reshape(shape)
        return np.empty(shape, np.float32)

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        a = attrs_of(node)
        f32 = np.float32
        query, key, value = inputs[0], inputs[1], inputs[2]
        bias, mask, attn_bias = _opt(inputs, 3), _opt(inputs, 4), _opt(inputs, 5)
        past_k, past_v = _opt(inputs, 6), _opt(inputs, 7)
        n = int(a["num_heads"])
        b, s, d = query.shape
        h = d // n
        q = query.astype(f32, copy=False)
        if bias is not None:
            q = q + bias[:d].astype(f32)
        q = q.reshape(b, s, n, h).transpose(0, 2, 1, 3)
        if key.ndim == 4:  # BNSH caches (cross attention): used as they are
            k, v = key.astype(f32, copy=False), value.astype(f32, copy=False)
        else:
            dv = value.shape[2]
            k, v = key.astype(f32, copy=False), value.astype(f32, copy=False)
            if bias is not None:
                k = k + bias[d:2 * d].astype(f32)
                v = v + bias[2 * d:2 * d + dv].astype(f32)
            k = k.reshape(b, k.shape[1], n, h).transpose(0, 2, 1, 3)
            v = v.reshape(b, v.shape[1], n, dv // n).transpose(0, 2, 1, 3)
        past_len = 0
        into = query.dtype == f32  # output and present key / value computed in their blocks
        if past_k is not None and past_v is not None:
            past_len = past_k.shape[2]
            k = self._present(node, 1, [past_k, k], into)
            v = self._present(node, 2, [past_v, v], into)
        elif into:
            k, v = self._present(node, 1, [k], into), self._present(node, 2, [v], into)
        dv_all = v.shape[1] * v.shape[3]
        block = self.output(0, (b, s, dv_all), f32) if into else None
        out = attend(q, k, v, past_len, mask, attn_bias, a, self._scores_buffer, block).astype(query.dtype, copy=False)
        results = [out, k.astype(query.dtype, copy=False), v.astype(query.dtype, copy=False)]
        return requested(node, results)

    writes_output = True  # float32: output and present key / value in their blocks

    def _present(self, node: Node, index: int, parts: list[np.ndarray], into: bool) -> np.ndarray:
        """Past and new rows along the sequence axis: into output `index`'s block when float32 and
        requested, else a fresh float32 array (or the one part as it is)."""
        if into and index < len(node.outputs) and node.outputs[index]:
            shape = (*parts[0].shape[:2], sum(p.shape[2] for p in parts), parts[0].shape[3])
            out = self.output(index, shape, np.float32)
            np.concatenate(parts, axis=2, out=out)
            return out
        if len(parts) == 1:
            return parts[0]
        return np.concatenate([p.astype(np.float32, copy=False) for p in parts], axis=2)


def attention_workspace_bytes(node: Node, input_shapes: Sequence[tuple[int, ...] | None]) -> list[tuple[int, int]]:
    """[(0, bytes)] of the float32 scores (B, N, S, P + S) of com.microsoft Attention."""
    x = input_shapes[0] if input_shapes else None
    if x is None or len(x) != 3:
        return []
    past = input_shapes[4] if len(input_shapes) > 4 else None
    past_len = int(past[3]) if past is not None and len(past) == 5 else 0
    n = int(node.attr("num_heads", 0))
    return [(0, 4 * int(x[0]) * n * int(x[1]) * (past_len + int(x[1])))]


@register("Attention", domain=MS)
class Attention(OpImpl):
    """com.microsoft Attention (BERT / GPT-2): input @ weights (+ bias) split into Q, K, V; past / present stacked
    as (2, B, N, T, H); mask_index (B), (2B), (B, T) or (B, S, T)."""

    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        a = attrs_of(node)
        n = int(a.get("num_heads", 0))
        if n <= 0:
            return Decline(rejected=f"num_heads={n!r}", accepts="num_heads > 0", remedy="set num_heads")
        for name in ("do_rotary", "past_present_share_buffer"):
            if int(a.get(name, 0)):
                return Decline(rejected=f"{name}=1", accepts=f"{name}=0",
                               remedy="run this node on ONNX Runtime or export without it")
        for i in (0, 1, 2, 4, 5):
            if i < len(inputs) and inputs[i].present and inputs[i].dtype and inputs[i].dtype not in _T:
                return Decline(rejected=f"input {i} dtype {dtype_name(inputs[i].dtype)}", accepts="float32, float16")
        if len(inputs) > 6 and inputs[6].present:
            return Decline(rejected="past_sequence_length present (shared buffer)", accepts="past_sequence_length absent",
                           remedy="run shared-buffer attention on ONNX Runtime")
        if inputs[0].shape is not None and len(inputs[0].shape) != 3:
            return Decline(rejected=f"input rank {len(inputs[0].shape)}", accepts="input (B, S, hidden)",
                           remedy="reshape the input")
        sizes = a.get("qkv_hidden_sizes")
        if sizes and len(node.outputs) > 1 and node.outputs[1] and len(set(sizes)) != 1:
            return Decline(rejected=f"present output with qkv_hidden_sizes={list(sizes)!r}",
                           accepts="equal Q/K/V hidden sizes when past/present are used", remedy="fix the model")
        if len(inputs) > 3 and inputs[3].present and inputs[3].shape is not None:
            m, x = inputs[3].shape, inputs[0].shape
            if len(m) == 4 or (len(m) == 1 and x is not None and isinstance(m[0], int) and isinstance(x[0], int)
                               and m[0] not in (x[0], 2 * x[0])):
                return Decline(rejected=f"mask_index shape {m!r}", accepts="(B), (2B), (B, T) or (B, S, T)",
                               remedy="convert the mask to (B, T)")
        return None

    def workspace_bytes(self, node: Node, input_shapes: Sequence[tuple[int, ...] | None]) -> list[tuple[int, int]]:
        return attention_workspace_bytes(node, input_shapes)

    _scores_buffer = MultiHeadAttention._scores_buffer

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        a = attrs_of(node)
        f32 = np.float32
        x, w = inputs[0], inputs[1]
        bias, mask, past, attn_bias = _opt(inputs, 2), _opt(inputs, 3), _opt(inputs, 4), _opt(inputs, 5)
        proj = x.astype(f32) @ w.astype(f32)
        if bias is not None:
            proj = proj + bias.astype(f32)
        return self.attend_projection(node, a, proj, w.shape[1], mask, past, attn_bias, x.dtype)

    def attend_projection(self, node: Node, a: dict, proj: np.ndarray, width: int, mask: np.ndarray | None,
                          past: np.ndarray | None, attn_bias: np.ndarray | None, dtype: np.dtype) -> list[np.ndarray]:
        """The attention over a (B, S, q + k + v) float32 projection (QAttention computes it from integers)."""
        f32 = np.float32
        n = int(a["num_heads"])
        b, s, _ = proj.shape
        sizes = [int(v) for v in (a.get("qkv_hidden_sizes") or [width // 3] * 3)]
        dq, dk, dv = sizes
        q = proj[..., :dq].reshape(b, s, n, dq // n).transpose(0, 2, 1, 3)
        k = proj[..., dq:dq + dk].reshape(b, s, n, dk // n).transpose(0, 2, 1, 3)
        v = proj[..., dq + dk:dq + dk + dv].reshape(b, s, n, dv // n).transpose(0, 2, 1, 3)
        past_len = 0
        if past is not None:
            past_len = past.shape[3]
            k = np.concatenate([past[0].astype(f32), k], axis=2)
            v = np.concatenate([past[1].astype(f32), v], axis=2)
        out = attend(q, k, v, past_len, mask, attn_bias, a, self._scores_buffer).astype(dtype)
        if len(node.outputs) > 1 and node.outputs[1]:
            return [out, np.stack([k, v]).astype(dtype)]
        return [out]


__all__ = ["Attention", "MultiHeadAttention", "attend", "attention_workspace_bytes", "mha_workspace_bytes",
           "padding_keep"]
