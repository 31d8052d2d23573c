"""com.microsoft SparseAttention (Phi-3-small block-sparse attention), ONNX Runtime CPU semantics.

The KV cache is a max-length buffer (B, Nkv, M, H): entry b holds key_total_sequence_lengths[b] tokens after
the step, the new S tokens at rows [total_b - S, total_b) (ONNX Runtime updates past_key in place; this kernel
returns the updated buffer as present_key). Query row s sits at absolute position p = total_b - S + s and
attends key positions j <= p inside the block layout of its head: head h uses layout h % num_layout, whose
CSR block mask (block_row_indices, block_col_indices) allows block (p // sparse_block_size, j // block).
Rotary (do_rotary) rotates Q and K at their absolute positions. Matches onnxruntime for one batch entry and
for batches of equal lengths; for ragged batches onnxruntime 1.32's CPU kernel gives the shorter entries
other attention outputs (not explained by its documentation), which this kernel does not imitate.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import TensorProto

from ort_graph import Node, dtype_name

from ._registry import Decline, InputInfo, OpImpl, attrs_of, register
from .ops_extra_attention import apply_rotary, requested

MS = "com.microsoft"
_T = frozenset({TensorProto.FLOAT, TensorProto.FLOAT16})


def dense_block_masks(rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """(num_layout, blocks, blocks) boolean masks from the CSR rows/cols (padding columns are -1)."""
    n_layout, n_blocks = rows.shape[0], rows.shape[1] - 1
    mask = np.zeros((n_layout, n_blocks, n_blocks), bool)
    for lay in range(n_layout):
        counts = np.diff(rows[lay])
        r = np.repeat(np.arange(n_blocks), counts)
        c = cols[lay, : int(rows[lay, -1])]
        ok = c >= 0
        mask[lay, r[ok], c[ok]] = True
    return mask


@register("SparseAttention", domain=MS)
class SparseAttention(OpImpl):
    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        a = attrs_of(node)
        n, nkv = int(a.get("num_heads", 0)), int(a.get("kv_num_heads", 0))
        if n <= 0 or nkv <= 0 or n % nkv:
            return Decline(rejected=f"num_heads={n!r}, kv_num_heads={nkv!r}",
                           accepts="num_heads a positive multiple of kv_num_heads", remedy="fix the head counts")
        if int(a.get("sparse_block_size", 0)) not in (16, 32, 64, 128):
            return Decline(rejected=f"sparse_block_size={a.get('sparse_block_size')!r}", accepts="16, 32, 64, 128",
                           remedy="fix sparse_block_size")
        for i in (0, 1, 2, 3, 4, 9, 10):
            if i < len(inputs) and inputs[i].present and inputs[i].dtype and inputs[i].dtype not in _T:
                return Decline(rejected=f"input {i} dtype {dtype_name(inputs[i].dtype)}", accepts="float32, float16")
        if int(a.get("do_rotary", 0)) and not (len(inputs) > 10 and inputs[9].present and inputs[10].present):
            return Decline(rejected="do_rotary=1 without cos_cache/sin_cache", accepts="both caches",
                           remedy="give cos_cache and sin_cache")
        return None

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        a = attrs_of(node)
        f = np.float32
        query = inputs[0]
        key, value = (inputs[1], inputs[2]) if len(inputs) > 2 and inputs[1] is not None else (None, None)
        past_k, past_v = inputs[3], inputs[4]
        rows, cols = np.asarray(inputs[5], np.int64), np.asarray(inputs[6], np.int64)
        totals = np.asarray(inputs[8], np.int64).reshape(-1)
        n, nkv = int(a["num_heads"]), int(a["kv_num_heads"])
        b, s, d = query.shape
        h = d // (n + 2 * nkv) if key is None else d // n
        qf = query.astype(f)
        if key is None:
            q, k, v = qf[..., : n * h], qf[..., n * h: (n + nkv) * h], qf[..., (n + nkv) * h:]
        else:
            q, k, v = qf, key.astype(f), value.astype(f)
        q = q.reshape(b, s, n, h).transpose(0, 2, 1, 3)
        k = k.reshape(b, s, nkv, h).transpose(0, 2, 1, 3)
        v = v.reshape(b, s, nkv, h).transpose(0, 2, 1, 3)
        past = totals - s  # (B,)
        pos = past[:, None] + np.arange(s)[None, :]  # absolute positions (B, S)
        if int(a.get("do_rotary", 0)):
            cs, sn = inputs[9].astype(f)[pos][:, None], inputs[10].astype(f)[pos][:, None]
            inter = bool(int(a.get("rotary_interleaved", 0)))
            q, k = apply_rotary(q, cs, sn, inter), apply_rotary(k, cs, sn, inter)
        present_k, present_v = past_k.astype(f).copy(), past_v.astype(f).copy()
        for bi in range(b):  # the new rows land after each entry's past
            present_k[bi, :, past[bi]: past[bi] + s] = k[bi]
            present_v[bi, :, past[bi]: past[bi] + s] = v[bi]
        m = present_k.shape[2]
        group = n // nkv
        scale = float(a.get("scale", 0.0)) or 1.0 / float(np.sqrt(h))
        scores = np.matmul(q.reshape(b, nkv, group, s, h), present_k[:, :, None].swapaxes(-1, -2)).reshape(b, n, s, m)
        scores *= f(scale)
        masks = dense_block_masks(rows, cols)
        block = int(a["sparse_block_size"])
        col = np.arange(m)
        layout = np.arange(n) % masks.shape[0]
        qb = np.minimum(pos // block, masks.shape[1] - 1)  # (B, S)
        kb = np.minimum(col // block, masks.shape[2] - 1)  # (M,)
        allowed = masks[layout[None, :, None, None], qb[:, None, :, None], kb[None, None, None, :]]  # (B, N, S, M)
        allowed &= col[None, None, None, :] <= pos[:, None, :, None]
        scores = np.where(allowed, scores, -np.inf)
        mx = scores.max(axis=-1, keepdims=True)
        e = np.exp(scores - np.where(np.isfinite(mx), mx, 0))
        probs = e / np.maximum(e.sum(axis=-1, keepdims=True), np.finfo(np.float32).tiny)
        out = np.matmul(probs.reshape(b, nkv, group, s, m), present_v[:, :, None]).reshape(b, n, s, h)
        out = out.transpose(0, 2, 1, 3).reshape(b, s, n * h).astype(query.dtype)
        return requested(node, [out, present_k.astype(past_k.dtype), present_v.astype(past_v.dtype)])


__all__ = ["SparseAttention", "dense_block_masks"]
