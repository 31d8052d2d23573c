"""com.microsoft GroupQueryAttention and RotaryEmbedding (com.microsoft 1, ai.onnx 23), ORT CPU semantics.

GroupQueryAttention (float32/float16, computed in float32):
- query (B, S, N*H) with key/value (B, S, Nkv*H), or packed QKV (B, S, (N + 2 Nkv) * H) when key/value
  are absent; past_key/past_value (B, Nkv, P, H) (BNSH, the genai layout); seqlens_k (B,) int32 = total
  length - 1 per batch entry; total_sequence_length a scalar int32.
- present length = max(total_sequence_length, P). The step is the first prompt when S == total_sequence_length
  (past rows are not read, new K/V land at row 0); otherwise past rows [0, seqlens_k + 1 - S) are kept and
  the new rows follow. Rows past each entry's total length are zeros.
- do_rotary: Q and K rotated with cos_cache/sin_cache (rotary_dim = 2 * cos_cache.shape[1], half-split or
  interleaved) at positions s (first prompt) or seqlens_k + 1 - S + s, or at position_ids when given.
- scores = scale (default 1/sqrt(H)) * Q K^T; softcap c > 0: c * tanh(scores / c); attention_bias added;
  causal mask; local_window_size w >= 0 keeps the last w key positions of each row's causal range;
  softmax (smooth_softmax / head_sink add exp(sink) to the denominator). qk_output 1 / 2 returns the scores
  (masked positions 0) / the probabilities as output 3, (B, N, S, total_sequence_length).

Workspace: the (B, N, S, P + S) float32 attention scores, `gqa_workspace_bytes`, one pure function of shapes
and attributes used for both the Level-1 estimate and the Level-2 declaration.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import TensorProto

from ort_graph import Node, dtype_name

from ._registry import Decline, InputInfo, OpImpl, attrs_of, register, workspace_nbytes
from ._util import out_dtype

MS = "com.microsoft"
_T = frozenset({TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16})


def requested(node: Node, outs: list[np.ndarray | None]) -> list[np.ndarray | None]:
    """`outs` cut to the node's outputs, None where an output name is '' (not requested: not allocated)."""
    n = max(1, len(node.outputs))
    return [o if i == 0 or (i < len(node.outputs) and node.outputs[i]) else None for i, o in enumerate(outs[:n])]


def apply_rotary(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, interleaved: bool) -> np.ndarray:
    """Rotate the first 2 * cos.shape[-1] features of x (..., H); cos/sin broadcast to (..., rot/2)."""
    half = cos.shape[-1]
    rot = 2 * half
    out = x.copy()
    if interleaved:
        x1, x2 = x[..., 0:rot:2], x[..., 1:rot:2]
        out[..., 0:rot:2] = x1 * cos - x2 * sin
        out[..., 1:rot:2] = x2 * cos + x1 * sin
    else:
        x1, x2 = x[..., :half], x[..., half:rot]
        out[..., :half] = x1 * cos - x2 * sin
        out[..., half:rot] = x2 * cos + x1 * sin
    return out


def apply_rotary_into(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, interleaved: bool, out: np.ndarray,
                      tmp: np.ndarray) -> None:
    """`apply_rotary(x, ...)` written into `out` (x's shape, not overlapping x) with `tmp` (x's shape with
    the last axis cut to cos.shape[-1]) the one temporary."""
    half = cos.shape[-1]
    rot = 2 * half
    if interleaved:
        x1, x2, o1, o2 = x[..., 0:rot:2], x[..., 1:rot:2], out[..., 0:rot:2], out[..., 1:rot:2]
    else:
        x1, x2, o1, o2 = x[..., :half], x[..., half:rot], out[..., :half], out[..., half:rot]
    np.multiply(x1, cos, out=o1)
    np.multiply(x2, sin, out=tmp)
    o1 -= tmp
    np.multiply(x2, cos, out=o2)
    np.multiply(x1, sin, out=tmp)
    o2 += tmp
    if rot < x.shape[-1]:
        out[..., rot:] = x[..., rot:]


# ---------------------------------------------------------------------------------------------------------------
# GroupQueryAttention
# ---------------------------------------------------------------------------------------------------------------


def _gqa_dims(node: Node, q_shape: Sequence, packed: bool) -> tuple[int, int, int]:
    n, nkv = int(node.attr("num_heads", 0)), int(node.attr("kv_num_heads", 0))
    d = q_shape[-1]
    h = d // (n + 2 * nkv) if packed else d // n
    return n, nkv, h


def gqa_workspace_bytes(node: Node, input_shapes: Sequence[tuple[int, ...] | None]) -> list[tuple[int, int]]:
    """The same for estimate and declaration: slot 0 the float32 scores (B, N, S, P + S), slot 4 the mask
    (B, S, P + S) bool, slot 6 the softmax row maxima and sums (2, B, N, S) float32 then a bool per row;
    with do_rotary slot 1 the rotated Q (B, N, S, H), slot 2 the rotated K (B, Nkv, S, H), slot 3 their
    half-width product (B, N, S, rotary_dim / 2) and slot 5 the cos and sin rows gathered at the positions
    (2, B, S, rotary_dim / 2), all float32. A float16 / bfloat16 node (the graph's output 0) computes in float32 in
    slot 7: its query, key and value inputs, present key and value (2, B, Nkv, P + S, H) and output
    (B, S, N * H)."""
    q = input_shapes[0] if input_shapes else None
    if q is None or len(q) != 3:
        return []
    past = input_shapes[3] if len(input_shapes) > 3 else None
    past_len = int(past[2]) if past is not None and len(past) == 4 else 0
    b, s = int(q[0]), int(q[1])
    n = int(node.attr("num_heads", 0))
    slots = [(0, 4 * b * n * s * (past_len + s)), (4, b * s * (past_len + s)), (6, _row_stats_bytes(b, n, s))]
    packed = len(node.inputs) < 2 or not node.inputs[1]
    if _half(node):
        _, nkv, h = _gqa_dims(node, q, packed)
        kv = [input_shapes[i] if len(input_shapes) > i else None for i in (1, 2)]
        if not packed and any(x is None for x in kv):
            return slots
        width = int(q[-1]) + (0 if packed else int(kv[0][-1]) + int(kv[1][-1]))
        slots.append((7, 4 * (b * s * width + 2 * b * nkv * (past_len + s) * h + b * s * n * h)))
    if int(node.attr("do_rotary", 0)):
        n_, nkv, h = _gqa_dims(node, q, packed)
        cos = input_shapes[7] if len(input_shapes) > 7 else None
        half = int(cos[-1]) if cos else h // 2
        slots += [(1, 4 * b * n_ * s * h), (2, 4 * b * nkv * s * h), (3, 4 * b * n_ * s * half),
                  (5, 4 * 2 * b * s * half)]
    return sorted(slots)


def _row_stats_bytes(b: int, n: int, s: int) -> int:
    return 4 * 2 * b * n * s + b * n * s  # (2, B, N, S) float32 maxima and sums, then (B, N, S) bool


def _half(node: Node) -> bool:
    """The graph's output 0 is float16 or bfloat16: the node computes in float32 in its declared slot 7."""
    return out_dtype(node) in (TensorProto.FLOAT16, TensorProto.BFLOAT16)


def _gather_rows_into(cache: np.ndarray, pos: np.ndarray, out: np.ndarray, staging: np.ndarray) -> None:
    """out[...] = cache[pos] as float32 without a gathered temporary: float32 caches are taken straight into
    `out`, others into `staging` (a float32 array of at least out's size) seen in the cache's dtype. Positions
    are checked by the caller (mode="clip" does not buffer `out` as the default mode does)."""
    if cache.dtype == out.dtype:
        np.take(cache, pos, axis=0, out=out, mode="clip")
        return
    rows = staging.reshape(-1).view(np.uint8)[:out.size * cache.dtype.itemsize].view(cache.dtype).reshape(out.shape)
    np.take(cache, pos, axis=0, out=rows, mode="clip")
    np.copyto(out, rows)


def _opt(inputs: list, i: int) -> np.ndarray | None:
    return inputs[i] if len(inputs) > i else None


@register("GroupQueryAttention", domain=MS)
class GroupQueryAttention(OpImpl):
    """Grouped-query attention with KV cache, rotary, local window, softcap, bias and head sinks."""

    _UNSUPPORTED_INPUTS = {12: "k_scale", 13: "v_scale", 14: "q_norm_weight", 15: "k_norm_weight",
                           16: "query_seqlens"}

    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        a = attrs_of(node)
        n, nkv = int(a.get("num_heads", 0)), int(a.get("kv_num_heads", 0))
        if n <= 0 or nkv <= 0 or n % nkv:
            return Decline(rejected=f"num_heads={n!r}, kv_num_heads={nkv!r}",
                           accepts="positive num_heads that is a multiple of kv_num_heads",
                           remedy="fix the head count attributes")
        for name, ok in (("k_quant_type", "NONE"), ("v_quant_type", "NONE")):
            if str(a.get(name, "NONE")).upper() != ok:
                return Decline(rejected=f"{name}={a[name]!r} (quantized KV cache)", accepts=f"{name}='NONE'",
                               remedy="use a float KV cache or run this node on ONNX Runtime")
        if int(a.get("sliding_window_cache", 0)):
            return Decline(rejected=f"sliding_window_cache={a['sliding_window_cache']!r}", accepts="0",
                           remedy="export without it or run this node on ONNX Runtime")
        if int(a.get("qk_output", 0)) not in (0, 1, 2):
            return Decline(rejected=f"qk_output={a['qk_output']!r}", accepts="0, 1 (before softmax), 2 (after)",
                           remedy="fix qk_output")
        if int(a.get("causal", 1)) != 1:
            return Decline(rejected=f"causal={a['causal']!r}", accepts="causal=1",
                           remedy="use MultiHeadAttention for bidirectional attention")
        for i, what in self._UNSUPPORTED_INPUTS.items():
            if i < len(inputs) and inputs[i].present:
                return Decline(rejected=f"input {i} ({what}) present", accepts=f"{what} absent",
                               remedy="run this node on ONNX Runtime or export without it")
        for i in (0, 1, 2, 3, 4, 7, 8, 10, 11):
            if i < len(inputs) and inputs[i].present and inputs[i].dtype and inputs[i].dtype not in _T:
                return Decline(rejected=f"input {i} dtype {dtype_name(inputs[i].dtype)}", accepts="float32, float16")
        q = inputs[0]
        packed = len(inputs) < 2 or not inputs[1].present
        if packed and len(inputs) > 2 and inputs[2].present:
            return Decline(rejected="value present without key", accepts="key and value both present or both absent",
                           remedy="give both key and value, or pack Q/K/V into the query input")
        if q.shape is not None:
            if len(q.shape) != 3:
                return Decline(rejected=f"query rank {len(q.shape)} (shape {q.shape!r})", accepts="rank-3 query",
                               remedy="reshape the query to (batch, sequence, hidden)")
            d = q.shape[2]
            if isinstance(d, int) and d % (n + 2 * nkv if packed else n):
                return Decline(rejected=f"query hidden size {d!r}",
                               accepts=f"a multiple of {(n + 2 * nkv) if packed else n} (heads{' incl. packed K/V' if packed else ''})",
                               remedy="fix num_heads/kv_num_heads")
        if not packed and inputs[1].shape is not None and q.shape is not None:
            ks, qs = inputs[1].shape, q.shape
            if len(ks) == 3 and isinstance(ks[1], int) and isinstance(qs[1], int) and ks[1] != qs[1]:
                return Decline(rejected=f"key sequence length {ks[1]!r} != query sequence length {qs[1]!r}",
                               accepts="key/value with the query's sequence length (self-attention)",
                               remedy="run cross-attention on ONNX Runtime")
        if int(a.get("do_rotary", 0)) and not (len(inputs) > 8 and inputs[7].present and inputs[8].present):
            return Decline(rejected="do_rotary=1 without cos_cache/sin_cache", accepts="both caches with do_rotary=1",
                           remedy="give cos_cache and sin_cache inputs")
        return None

    def workspace_bytes(self, node: Node, input_shapes: Sequence[tuple[int, ...] | None]) -> list[tuple[int, int]]:
        return gqa_workspace_bytes(node, input_shapes)

    writes_output = True  # float32: output, present key and value computed in their blocks

    def _score_buffer(self, shape: tuple[int, ...], slot: int = 0, dtype: type = np.float32) -> np.ndarray:
        dt = np.dtype(dtype)
        nbytes = dt.itemsize * int(np.prod(shape))
        scratch = getattr(self, "scratch", None)
        if scratch is not None:
            buf = scratch(slot, nbytes)
            if buf is not None:
                arr = buf if isinstance(buf, np.ndarray) else np.frombuffer(buf, dtype=np.uint8)
                return arr.reshape(-1).view(np.uint8)[:nbytes].view(dt).reshape(shape)
        return np.empty(shape, dtype=dt)

    def _stage(self, query: np.ndarray, key: np.ndarray | None, value: np.ndarray | None, past_len: int, n: int,
               nkv: int, h: int) -> dict[str, np.ndarray | None]:
        """Slot 7 of a float16 node carved into float32 arrays: query, key and value (upcast here), present key
        and value (B, Nkv, P + S, H) and the output (B, S, N * H)."""
        b, s = query.shape[0], query.shape[1]
        shapes = {"query": query.shape, "key": None if key is None else key.shape,
                  "value": None if value is None else value.shape,
                  "present_key": (b, nkv, past_len + s, h), "present_value": (b, nkv, past_len + s, h),
                  "output": (b, s, n * h)}
        total = sum(int(np.prod(shape)) for shape in shapes.values() if shape is not None)
        flat = self._score_buffer((total,), 7)
        carved: dict[str, np.ndarray | None] = {}
        at = 0
        for name, shape in shapes.items():
            if shape is None:
                carved[name] = None
                continue
            size = int(np.prod(shape))
            carved[name] = flat[at:at + size].reshape(shape)
            at += size
        for name, src in (("query", query), ("key", key), ("value", value)):
            if src is not None:
                np.copyto(carved[name], src)
        return carved

    def _round_into(self, node: Node, index: int, staged: np.ndarray, dtype: np.dtype) -> np.ndarray | None:
        """A float32 result rounded into output `index`'s block (None when the output is not requested)."""
        if index >= len(node.outputs) or not node.outputs[index]:
            return None
        out = self.output(index, staged.shape, dtype)
        np.copyto(out, staged, casting="same_kind")
        return out

    def _present(self, node: Node, index: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """Present key / value: its output block when float32 and requested (zeroed), else a fresh array."""
        if dtype == np.float32 and index < len(node.outputs) and node.outputs[index]:
            out = self.output(index, shape, dtype)
            out.fill(0)
            return out
        return np.zeros(shape, dtype=np.float32)

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        a = attrs_of(node)
        query, key, value = inputs[0], _opt(inputs, 1), _opt(inputs, 2)
        past_k, past_v = _opt(inputs, 3), _opt(inputs, 4)
        seqlens = np.asarray(inputs[5]).reshape(-1).astype(np.int64)
        total = int(np.asarray(inputs[6]).reshape(-1)[0])
        cos, sin, pos_in = _opt(inputs, 7), _opt(inputs, 8), _opt(inputs, 9)
        bias, sink = _opt(inputs, 10), _opt(inputs, 11)
        packed = key is None
        n, nkv, h = _gqa_dims(node, query.shape, packed)
        b, s = query.shape[0], query.shape[1]
        f32 = np.float32
        staged = (query.dtype == np.float16 or query.dtype.name == "bfloat16") and _half(node)  # float32 in slot 7, rounded into the blocks
        past_len = past_k.shape[2] if past_k is not None else 0
        stage = self._stage(query, key, value, past_len, n, nkv, h) if staged else None
        if staged:
            qf, kf, vf = stage["query"], stage["key"], stage["value"]
        else:
            qf = query.astype(f32, copy=False)
            kf, vf = (None, None) if packed else (key.astype(f32, copy=False), value.astype(f32, copy=False))
        if packed:
            q = qf[..., : n * h]
            k = qf[..., n * h: (n + nkv) * h]
            v = qf[..., (n + nkv) * h: (n + 2 * nkv) * h]
        else:
            q, k, v = qf, kf, vf
        q = q.reshape(b, s, n, h).transpose(0, 2, 1, 3)
        k = k.reshape(b, s, nkv, h).transpose(0, 2, 1, 3)
        v = v.reshape(b, s, nkv, h).transpose(0, 2, 1, 3)

        present_len = max(total, past_len)
        total_b = seqlens + 1
        first_prompt = s == total  # else token generation (S == 1) or a subsequent prompt chunk
        if not first_prompt and s != 1 and b != 1:
            raise ValueError(f"GroupQueryAttention {node.name!r}: sequence_length {s!r} with total_sequence_length "
                             f"{total!r} is a subsequent prompt, which needs batch_size 1 (got {b!r}); "
                             "feed the prompt in one step or one batch entry at a time")
        past_b = np.zeros(b, dtype=np.int64) if first_prompt else total_b - s
        if (past_b < 0).any() or (past_b > past_len).any():
            raise ValueError(f"GroupQueryAttention {node.name!r}: seqlens_k {seqlens.tolist()!r} does not fit "
                             f"past length {past_len!r} and sequence length {s!r}; seqlens_k must be past + new - 1")

        if int(a.get("do_rotary", 0)):
            if pos_in is not None:
                pos = np.broadcast_to(np.asarray(pos_in, dtype=np.int64).reshape(-1, s), (b, s))
            else:
                pos = past_b[:, None] + np.arange(s)[None, :]
            half = cos.shape[-1]
            if pos.size and (pos.min() < 0 or pos.max() >= cos.shape[0]):
                raise ValueError(f"GroupQueryAttention {node.name!r}: rotary positions {pos.tolist()!r} outside the "
                                 f"cos/sin caches of {cos.shape[0]!r} rows; give position_ids (or seqlens_k) below "
                                 "the caches' length, or export longer caches")
            tmp = self._score_buffer((b, n, s, half), 3)
            cf, sf = self._score_buffer((2, b, s, half), 5)
            _gather_rows_into(cos, pos, cf, tmp)
            _gather_rows_into(sin, pos, sf, tmp)
            cf, sf = cf[:, None], sf[:, None]  # (B, 1, S, rot/2)
            inter = bool(int(a.get("rotary_interleaved", 0)))
            qr, kr = self._score_buffer((b, n, s, h), 1), self._score_buffer((b, nkv, s, h), 2)
            apply_rotary_into(q, cf, sf, inter, qr, tmp)
            apply_rotary_into(k, cf, sf, inter, kr, tmp[:, :nkv])
            q, k = qr, kr

        kv_dtype = past_k.dtype if past_k is not None else query.dtype
        if staged and present_len <= past_len + s:
            present_k, present_v = (stage[name][:, :, :present_len] for name in ("present_key", "present_value"))
            present_k.fill(0)
            present_v.fill(0)
        else:
            present_k = self._present(node, 1, (b, nkv, present_len, h), kv_dtype)
            present_v = self._present(node, 2, (b, nkv, present_len, h), kv_dtype)
        for bi in range(b):  # per batch entry: past rows kept, new rows appended (a copy, not a loop over elements)
            p = int(past_b[bi])
            if p:
                present_k[bi, :, :p] = past_k[bi, :, :p]
                present_v[bi, :, :p] = past_v[bi, :, :p]
            end = min(p + s, present_len)
            present_k[bi, :, p:end] = k[bi, :, : end - p]
            present_v[bi, :, p:end] = v[bi, :, : end - p]

        group = n // nkv
        scale = float(a.get("scale", 0.0)) or 1.0 / float(np.sqrt(h))
        kk = present_k.reshape(b, nkv, 1, present_len, h)
        scores = self._score_buffer((b, nkv, group, s, present_len))
        np.matmul(q.reshape(b, nkv, group, s, h), kk.swapaxes(-1, -2), out=scores)
        scores = scores.reshape(b, n, s, present_len)
        scores *= f32(scale)
        softcap = float(a.get("softcap", 0.0))
        if softcap > 0:
            np.tanh(scores / f32(softcap), out=scores)
            scores *= f32(softcap)
        if bias is not None:
            cols = min(present_len, bias.shape[-1])
            scores[..., :cols] += bias.astype(f32)[..., :cols]

        # causal / window mask: row s of entry b sees [lo, eff) with eff = min(past_b + s + 1, total_b)
        eff = np.minimum(past_b[:, None] + np.arange(s)[None, :] + 1, total_b[:, None])  # (B, S)
        masked = self._score_buffer((b, s, present_len), 4, np.bool_)
        w = int(a.get("local_window_size", -1))
        for (bi, row), end in np.ndenumerate(eff):  # row by row: a broadcast compare buffers both operands
            masked[bi, row, :end] = False
            masked[bi, row, end:] = True
            if w >= 0:
                masked[bi, row, :max(int(end) - w, 0)] = True
        masked = masked[:, None]  # (B, 1, S, T)
        qk_mode = int(a.get("qk_output", 0))
        qk = np.where(masked, f32(0), scores)[..., :total].astype(query.dtype) if qk_mode == 1 else None
        np.copyto(scores, f32(-np.inf), where=masked)
        stats_buf = self._score_buffer((_row_stats_bytes(b, n, s),), 6, np.uint8)
        row_stats = stats_buf[:8 * b * n * s].view(f32).reshape(2, b, n, s, 1)  # the row maxima, then the sums
        flags = stats_buf[8 * b * n * s:].view(np.bool_).reshape(b, n, s, 1)
        m = scores.max(axis=-1, keepdims=True, out=row_stats[0])
        use_sink = sink is not None or int(a.get("smooth_softmax", 0))
        if use_sink:
            sk = (sink.astype(f32) if sink is not None else np.zeros(n, f32)).reshape(1, n, 1, 1)
            np.maximum(m, sk, out=m)
        np.copyto(m, f32(0), where=np.logical_not(np.isfinite(m, out=flags), out=flags))
        scores -= m
        probs = np.exp(scores, out=scores)  # in place: the declared workspace holds scores, then probabilities
        den = probs.sum(axis=-1, keepdims=True, out=row_stats[1])
        if use_sink:
            den += np.exp(sk - m)
        np.divide(probs, den, out=probs, where=np.greater(den, 0, out=flags))  # rows summing to 0 (or NaN) kept
        if qk_mode == 2:
            qk = probs[..., :total].astype(query.dtype)
        vv = present_v.reshape(b, nkv, 1, present_len, h)
        p5 = probs.reshape(b, nkv, group, s, present_len)
        if query.dtype == f32 or staged:  # straight into the (B, S, N*H) block, seen as (B, Nkv, group, S, H)
            out = self.output(0, (b, s, n * h), f32) if not staged else stage["output"]
            np.matmul(p5, vv, out=out.reshape(b, s, nkv, group, h).transpose(0, 2, 3, 1, 4))
            if staged:
                out = self._round_into(node, 0, out, query.dtype)
                present_k = self._round_into(node, 1, present_k, kv_dtype)
                present_v = self._round_into(node, 2, present_v, kv_dtype)
        else:
            out = np.matmul(p5, vv).reshape(b, n, s, h)
            out = out.transpose(0, 2, 1, 3).reshape(b, s, n * h).astype(query.dtype)
        if staged:  # rounded into their blocks above (None where not requested)
            return requested(node, [out, present_k, present_v, qk])
        results = [out, present_k.astype(kv_dtype, copy=False), present_v.astype(kv_dtype, copy=False), qk]
        return requested(node, results)


# ---------------------------------------------------------------------------------------------------------------
# RotaryEmbedding
# ---------------------------------------------------------------------------------------------------------------


class _RotaryBase(OpImpl):
    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        cache_idx = (2, 3) if self.domain == MS else (1, 2)
        for i in (0,) + cache_idx:
            if i < len(inputs) and inputs[i].dtype and inputs[i].dtype not in _T:
                return Decline(rejected=f"input {i} dtype {dtype_name(inputs[i].dtype)}", accepts="float32, float16")
        x = inputs[0]
        if x.shape is not None and len(x.shape) not in (3, 4):
            return Decline(rejected=f"input rank {len(x.shape)}", accepts="rank 3 (B, S, hidden) or 4 (B, N, S, H)",
                           remedy="reshape the input")
        needs_heads = self.domain == "" or int(node.attr("rotary_embedding_dim", 0)) > 0
        if x.shape is not None and len(x.shape) == 3 and not int(node.attr("num_heads", 0)) and needs_heads:
            return Decline(rejected="3-D input without num_heads" + (
                f" (rotary_embedding_dim={node.attr('rotary_embedding_dim')!r})" if self.domain else ""),
                accepts="num_heads set for 3-D input", remedy="set the num_heads attribute")
        if int(node.attr("is_packed_batching", 0)):
            return Decline(rejected="is_packed_batching=1", accepts="is_packed_batching=0",
                           remedy="run ragged batches on ONNX Runtime")
        return None

    writes_output = True  # float32: into the output block, the half-width product in workspace slot 0

    def workspace_bytes(self, node: Node, input_shapes: Sequence[tuple[int, ...] | None]) -> list[tuple[int, int]]:
        """Slot 0: float32 of half the input's elements, at least the (..., rotary_dim / 2) product."""
        x = input_shapes[0] if input_shapes else None
        if x is None:
            return []
        return [(0, workspace_nbytes((max(int(np.prod(x, dtype=np.int64)) // 2, 1),), np.float32))]

    def _rotate(self, node: Node, x: np.ndarray, cos: np.ndarray, sin: np.ndarray,
                pos: np.ndarray | None, bsnh_4d: bool) -> np.ndarray:
        a = attrs_of(node)
        nh, rot_attr = int(a.get("num_heads", 0)), int(a.get("rotary_embedding_dim", 0))
        f32 = np.float32
        if x.ndim == 4:
            xs = x.transpose(0, 2, 1, 3) if not bsnh_4d else x  # to (B, S, N, H)
        else:
            bsz, seq, hid = x.shape
            head = hid // nh if nh else 2 * cos.shape[-1]
            xs = x.reshape(bsz, seq, hid // head, head)
        bsz, seq = xs.shape[0], xs.shape[1]
        rot = rot_attr or xs.shape[-1]
        if pos is not None:
            cs, sn = cos.astype(f32, copy=False)[pos], sin.astype(f32, copy=False)[pos]  # (B, S, rot/2)
        else:
            cs, sn = cos.astype(f32, copy=False), sin.astype(f32, copy=False)
        cs, sn = cs[..., : rot // 2], sn[..., : rot // 2]
        inter = bool(int(a.get("interleaved", 0)))
        if x.dtype == f32:  # into the output block, seen in the (B, S, N, H) layout of xs
            out = self.output(0, x.shape, f32)
            if x.ndim == 4:
                os = out.transpose(0, 2, 1, 3) if not bsnh_4d else out
            else:
                os = out.reshape(xs.shape)
            tmp = self.workspace(0, (*xs.shape[:-1], rot // 2), f32)
            apply_rotary_into(xs, cs[:, :, None], sn[:, :, None], inter, os, tmp)
            return out
        y = apply_rotary(xs.astype(f32), cs[:, :, None], sn[:, :, None], inter)
        if x.ndim == 4:
            y = y.transpose(0, 2, 1, 3) if not bsnh_4d else y
        return y.reshape(x.shape).astype(x.dtype)


@register("RotaryEmbedding", domain=MS)
class RotaryEmbeddingContrib(_RotaryBase):
    """com.microsoft RotaryEmbedding(input, position_ids, cos_cache, sin_cache); 4-D input is (B, N, S, H)."""

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        x, pos, cos, sin = inputs[0], inputs[1], inputs[2], inputs[3]
        seq = x.shape[2] if x.ndim == 4 else x.shape[1]
        pos = np.asarray(pos, dtype=np.int64)
        if pos.size == 1:
            pos = np.broadcast_to(pos.reshape(1, 1) + np.arange(seq)[None, :], (x.shape[0], seq))
        return [self._rotate(node, x, cos, sin, pos, bsnh_4d=False)]


@register("RotaryEmbedding", since=23)
class RotaryEmbedding23(_RotaryBase):
    """ai.onnx RotaryEmbedding-23(X, cos_cache, sin_cache, position_ids?); 4-D input is (B, N, S, H)."""

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        x, cos, sin = inputs[0], inputs[1], inputs[2]
        pos = _opt(inputs, 3)
        return [self._rotate(node, x, cos, sin, None if pos is None else np.asarray(pos, np.int64), bsnh_4d=False)]


__all__ = ["GroupQueryAttention", "RotaryEmbedding23", "RotaryEmbeddingContrib", "apply_rotary", "gqa_workspace_bytes",
           "requested"]
