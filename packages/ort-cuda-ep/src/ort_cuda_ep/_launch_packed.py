"""Host-side launch of PackedAttention and PackedMultiHeadAttention.

PackedAttention: the QKV projection ``input @ weights + bias`` (matmul.cu) into the workspace root's
projection region, then ``packed_attn`` reads Q, K and V in place from it. PackedMultiHeadAttention:
``packed_attn`` on query/key/value (separate or packed [T, H, 3, D]) adding the bias as it reads.
token_offset and cumulative_sequence_length stay on the device (the kernel clamps them)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ._compile import DTYPE_SUFFIX
from ._errors import KernelLaunchError
from ._packed_recipe import (
    PackedDims,
    packed_attention_dims,
    packed_attention_recipe,
    packed_mha_dims,
    packed_mha_recipe,
)
from ._runtime import CudaRuntime, DeviceArray, f32, i32, i64, ptr

__all__ = ["packed_attention", "packed_mha"]

_F16 = (np.dtype(np.float32), np.dtype(np.float16))


def _shapes(inputs: Sequence[Any]) -> list[tuple[int, ...] | None]:
    return [None if t is None else tuple(t.shape) for t in inputs]


def _check_types(op: str, inputs: Sequence[Any], floats: tuple[int, ...]) -> np.dtype:
    t = inputs[floats[0]].dtype
    if t not in _F16 or any(i < len(inputs) and inputs[i] is not None and inputs[i].dtype != t for i in floats):
        raise KernelLaunchError(f"{op}: the float inputs must share float32 or float16, got "
                                f"{[str(x.dtype) for x in inputs if x is not None]!r}")
    return t


def _attn(rt: CudaRuntime, sfx: str, q: int, k: int, v: int, qb: int, kb: int, vb: int, off: Any, cum: Any,
          ab: Any, out: DeviceArray, g: PackedDims, h: int, rows: tuple[int, int, int], heads: tuple[int, int, int],
          scale: float) -> None:
    d, dv = g.hidden // h, g.v_hidden // h
    ab_b = ab_h = 0
    if ab is not None:
        ab_b = 0 if ab.shape[0] == 1 else ab.shape[1] * g.seq * g.seq
        ab_h = 0 if ab.shape[1] == 1 else g.seq * g.seq
    rt.launch("packed_attention", f"packed_attn_{sfx}", (g.token_count * h,), (128,),
              [ptr(q), ptr(k), ptr(v), ptr(qb), ptr(kb), ptr(vb), ptr(off), ptr(cum), ptr(ab), ptr(out),
               i32(g.token_count), i32(g.batch), i32(g.seq), i32(h), i32(d), i32(dv), *map(i64, rows), *map(i32, heads),
               i64(ab_b), i64(ab_h), f32(scale or 1.0 / math.sqrt(d))])


def packed_attention(rt: CudaRuntime, new: Callable[[int, tuple[int, ...], np.dtype], DeviceArray], node: str,
                     inputs: Sequence[Any], attrs: Mapping[str, Any], workspace: Callable[[int], int]) -> DeviceArray:
    from ._launch import _gemm_launch  # the GEMM of MatMul/Gemm (imported here: _launch imports this module)

    x, w, bias, off, cum = inputs[:5]
    ab = inputs[5] if len(inputs) > 5 else None
    t = _check_types("PackedAttention", inputs, (0, 1, 2, 5))
    g = packed_attention_dims(_shapes(inputs), attrs)
    h = int(attrs["num_heads"])
    r = None if g is None else packed_attention_recipe(g.token_count, g.hidden, g.v_hidden, h, t.itemsize)
    if g is None or r is None or off.dtype != np.int32 or cum.dtype != np.int32:
        raise KernelLaunchError(f"PackedAttention: inputs {_shapes(inputs)!r} ({[str(a.dtype) for a in inputs if a is not None]}) "
                                "do not form input [T, Din], weights [Din, hid+hid+vhid], bias, int32 token_offset "
                                "[B, S], cumulative_sequence_length [B + 1], attention_bias [B|1, H|1, S, S]")
    out = new(0, (g.token_count, g.v_hidden), t)
    if g.token_count == 0:
        workspace(0)
        return out
    base = workspace(r.total_bytes)
    total = 2 * g.hidden + g.v_hidden
    _gemm_launch(rt, t, x, w, base + r.projection_offset, bias, g.token_count, total, x.shape[1], x.shape[1], 1, total,
                 1, 1, 0, 0, 0, 0, 1, 1.0, 1.0)
    p, item = base + r.projection_offset, t.itemsize
    d, dv = g.hidden // h, g.v_hidden // h
    _attn(rt, DTYPE_SUFFIX[t], p, p + item * g.hidden, p + item * 2 * g.hidden, 0, 0, 0, off, cum, ab, out, g, h,
          (total, total, total), (d, d, dv), float(attrs.get("scale", 0.0)))
    return out


def packed_mha(rt: CudaRuntime, new: Callable[[int, tuple[int, ...], np.dtype], DeviceArray], node: str,
               inputs: Sequence[Any], attrs: Mapping[str, Any], workspace: Callable[[int], int]) -> DeviceArray:
    q, k, v, bias, off, cum = (list(inputs) + [None] * 7)[:6]
    ab = inputs[6] if len(inputs) > 6 else None
    t = _check_types("PackedMultiHeadAttention", inputs, (0, 1, 2, 3, 6))
    g = packed_mha_dims(_shapes(inputs), attrs)
    h = int(attrs["num_heads"])
    r = None if g is None else packed_mha_recipe(g.token_count, g.hidden, g.v_hidden, h)
    if g is None or r is None or off is None or cum is None or off.dtype != np.int32 or cum.dtype != np.int32:
        raise KernelLaunchError(f"PackedMultiHeadAttention: inputs {_shapes(inputs)!r} do not form query [T, hid] with "
                                "key/value or query [T, H, 3, D], bias [hid+hid+vhid], int32 token_offset [B, S], "
                                "cumulative_sequence_length [B + 1], attention_bias [B|1, H|1, S, S]")
    out = new(0, (g.token_count, g.v_hidden), t)
    workspace(r.total_bytes)  # 0: the fused route keeps its softmax state on chip
    if g.token_count == 0:
        return out
    item, d, dv = t.itemsize, g.hidden // h, g.v_hidden // h
    if g.packed_qkv:  # [T, H, 3, D]: Q, K, V of head h at h*3D, h*3D + D, h*3D + 2D
        row, base = 3 * g.hidden, q.ptr
        qp, kp, vp, rows, heads = base, base + item * d, base + item * 2 * d, (row, row, row), (3 * d, 3 * d, 3 * d)
    else:
        qp, kp, vp, rows, heads = q.ptr, k.ptr, v.ptr, (g.hidden, g.hidden, g.v_hidden), (d, d, dv)
    qb = kb = vb = 0
    if bias is not None:
        qb, kb, vb = bias.ptr, bias.ptr + item * g.hidden, bias.ptr + item * 2 * g.hidden
    _attn(rt, DTYPE_SUFFIX[t], qp, kp, vp, qb, kb, vb, off, cum, ab, out, g, h, rows, heads,
          float(attrs.get("scale", 0.0)))
    return out
