"""Numpy emulation of the simple kernels (movement.cu, where.cu, reduce.cu, elementwise.cu's unary and
binary ops) on recorded launches: each does, element for element, what its .cu loop does, with the
bounds of every read and write checked against the allocation. Tests compare the results with
onnx.reference; a GPU run (tests/test_gpu.py) checks the CUDA code does the same."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np

__all__ = ["emulate_simple", "SIMPLE_PREFIXES"]

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_TYPES = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16, "i32": np.int32, "i64": np.int64}
SIMPLE_PREFIXES = ("strided_copy_", "gather_", "cast_", "where_", "isnan_", "reduce_rows_", "unary_", "binary_")
_erf = np.vectorize(math.erf, otypes=[np.float64])
_UNARY: dict[int, Callable[[np.ndarray], np.ndarray]] = {
    0: lambda v: np.maximum(v, 0), 1: lambda v: 1 / (1 + np.exp(-v)), 2: np.tanh, 3: np.negative, 4: np.exp,
    5: np.log, 6: np.sqrt, 7: np.abs, 8: _erf, 9: lambda v: 1 / v,
    10: lambda v: 0.5 * v * (1 + _erf(v * 0.70710678118654752)),
    11: lambda v: 0.5 * v * (1 + np.tanh(0.79788456080286536 * (v + 0.044715 * v * v * v))),
    12: lambda v: v, 13: np.sin, 14: np.cos}
_BINARY: dict[int, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    0: np.add, 1: np.subtract, 2: np.multiply, 3: np.divide, 4: np.power, 5: np.maximum, 6: np.minimum}
Resolve = Callable[[int], tuple[np.ndarray, int]]


def _view(resolve: Resolve, pointer: int, dtype: Any) -> tuple[np.ndarray, int]:
    """The whole allocation as `dtype` elements and the pointer's element index in it (a kernel may
    read before its pointer with a negative stride)."""
    handle, offset = resolve(pointer)
    item = np.dtype(dtype).itemsize
    assert offset % item == 0, "misaligned element pointer"
    return handle[: handle.nbytes // item * item].view(dtype), offset // item


def _index(arr: np.ndarray, at: Any) -> np.ndarray:
    at = np.asarray(at)
    assert at.size == 0 or (at.min() >= 0 and at.max() < arr.size), "a read or write outside the allocation"
    return at


def _offsets(n: int, dims: list[int], *strides: list[int]) -> list[np.ndarray]:
    idx = np.stack(np.unravel_index(np.arange(n), dims), axis=1) if n else np.zeros((0, 6), np.int64)
    return [idx @ np.array(s, np.int64) for s in strides]


def emulate_simple(entry: str, v: list[Any], resolve: Resolve) -> None:
    """Execute one launch of `entry` with argument values `v`; `resolve(pointer) -> (uint8 backing, offset)`."""
    kind, _, sfx = entry.rpartition("_")
    if entry.startswith("strided_copy_b"):
        dt = _UINT[int(entry[-1])]
        (x, x0), (y, y0), n = _view(resolve, v[0], dt), _view(resolve, v[1], dt), v[2]
        sx, sy = _offsets(n, v[3:9], v[9:15], v[15:21])
        y[_index(y, y0 + sy)] = x[_index(x, x0 + sx)]
    elif entry.startswith("gather_b"):
        _, b, it = entry.split("_")
        (x, x0), (idx, i0), (y, y0) = (_view(resolve, v[0], _UINT[int(b[1:])]), _view(resolve, v[1], _TYPES[it]),
                                       _view(resolve, v[2], _UINT[int(b[1:])]))
        outer, n_idx, axis_dim, inner = v[3:7]
        i = np.arange(outer * n_idx * inner)
        k, j, o = i % inner, (i // inner) % n_idx, i // (inner * n_idx)
        at = idx[_index(idx, i0 + j)].astype(np.int64)
        at = np.where(at < 0, at + axis_dim, at)
        ok = (at >= 0) & (at < axis_dim)
        src = x0 + np.where(ok, (o * axis_dim + at) * inner + k, 0)
        y[_index(y, y0 + i)] = np.where(ok, x[_index(x, src)], 0)
    elif entry.startswith("cast_"):
        _, s, d = entry.split("_")
        (x, x0), (y, y0), n = _view(resolve, v[0], _TYPES[s]), _view(resolve, v[1], _TYPES[d]), v[2]
        y[_index(y, y0 + np.arange(n))] = x[_index(x, x0 + np.arange(n))].astype(_TYPES[d])
    elif kind == "where":
        t = _TYPES[sfx]
        (c, c0), (x, x0), (y, y0), (o, o0) = (_view(resolve, v[0], np.uint8), _view(resolve, v[1], t),
                                              _view(resolve, v[2], t), _view(resolve, v[3], t))
        n = v[4]
        sc, sx, sy = _offsets(n, v[5:11], v[11:17], v[17:23], v[23:29])
        pick = c[_index(c, c0 + sc)] != 0
        o[_index(o, o0 + np.arange(n))] = np.where(pick, x[_index(x, x0 + sx)], y[_index(y, y0 + sy)])
    elif kind == "isnan":
        (x, x0), (y, y0), n = _view(resolve, v[0], _TYPES[sfx]), _view(resolve, v[1], np.uint8), v[2]
        y[_index(y, y0 + np.arange(n))] = np.isnan(x[_index(x, x0 + np.arange(n))].astype(np.float32))
    elif kind == "reduce_rows":
        t = _TYPES[sfx]
        (x, x0), (y, y0), rows, cols, scale = _view(resolve, v[0], t), _view(resolve, v[1], t), v[2], v[3], v[4]
        block = x[_index(x, x0 + np.arange(rows * cols))].astype(np.float32).reshape(rows, cols)
        y[_index(y, y0 + np.arange(rows))] = (block.sum(axis=1, dtype=np.float32) * np.float32(scale)).astype(t)
    elif kind == "unary":
        t = _TYPES[sfx]
        (x, x0), (y, y0), n = _view(resolve, v[0], t), _view(resolve, v[1], t), v[2]
        with np.errstate(all="ignore"):
            y[_index(y, y0 + np.arange(n))] = _UNARY[v[3]](x[_index(x, x0 + np.arange(n))].astype(np.float32)).astype(t)
    elif kind == "binary":
        t = _TYPES[sfx]
        (a, a0), (b, b0), (y, y0), n = _view(resolve, v[0], t), _view(resolve, v[1], t), _view(resolve, v[2], t), v[3]
        sa, sb = _offsets(n, v[5:11], v[11:17], v[17:23])
        with np.errstate(all="ignore"):
            res = _BINARY[v[4]](a[_index(a, a0 + sa)].astype(np.float32), b[_index(b, b0 + sb)].astype(np.float32))
        y[_index(y, y0 + np.arange(n))] = res.astype(t)
    else:
        raise AssertionError(f"no emulation for {entry!r}")


# -- compute kernels: matmul.cu, softmax.cu, rms_norm.cu, matmul_nbits.cu ------------------------------
COMPUTE_PREFIXES = ("matmul_", "softmax_", "rms_norm_", "skip_rms_norm_", "mnb4_", "mnb8_")


def _rows(arr: np.ndarray, at: int, count: int) -> np.ndarray:
    return arr[_index(arr, at + np.arange(count))]


def _dequant(bits: int, b: np.ndarray, b0: int, s: np.ndarray, s0: int, zp: np.ndarray | None, z0: int, n_dim: int,
             k_dim: int, block: int, k_blocks: int) -> np.ndarray:
    """[K, N] weights exactly as matmul_nbits.cu's dequant<BITS> computes them (float32)."""
    k, n = np.meshgrid(np.arange(k_dim), np.arange(n_dim), indexing="ij")
    kb = k // block
    row_bytes = k_blocks * block * bits // 8
    if bits == 4:
        byte = b[_index(b, b0 + n * row_bytes + (k >> 1))].astype(np.int64)
        q = np.where(k & 1, byte >> 4, byte & 0xF)
        if zp is None:
            z = np.full_like(q, 8)
        else:
            zb = zp[_index(zp, z0 + n * ((k_blocks + 1) >> 1) + (kb >> 1))].astype(np.int64)
            z = np.where(kb & 1, zb >> 4, zb & 0xF)
    else:
        q = b[_index(b, b0 + n * row_bytes + k)].astype(np.int64)
        z = np.full_like(q, 128) if zp is None else zp[_index(zp, z0 + n * k_blocks + kb)].astype(np.int64)
    return (q - z).astype(np.float32) * s[_index(s, s0 + n * k_blocks + kb)].astype(np.float32)


def emulate_compute(entry: str, v: list[Any], grid: tuple[int, ...], resolve: Resolve) -> None:
    """Execute one launch of a compute kernel as its .cu code does (float32 math, outputs rounded to the
    storage type); `grid` is the launch grid (matmul's z is its batch count)."""
    kind, _, sfx = entry.rpartition("_")
    t = _TYPES[sfx]
    if kind == "matmul":
        (a, a0), (b, b0), (c, c0) = (_view(resolve, p, t) for p in v[:3])
        bias = _view(resolve, v[3], t) if v[3] else None
        M, N, K, a_m, a_k, b_k, b_n, ba, bb, bc, bias_m, bias_n, batch_bias, alpha, beta = v[4:19]
        m, k, n = np.arange(M)[:, None], np.arange(K)[None, :], np.arange(N)[None, :]
        for z in range(grid[2] if len(grid) > 2 else 1):
            am = a[_index(a, a0 + z * ba + m * a_m + k * a_k)].astype(np.float32)
            bm = b[_index(b, b0 + z * bb + np.arange(K)[:, None] * b_k + n * b_n)].astype(np.float32)
            out = np.float32(alpha) * (am @ bm)
            if bias is not None:
                arr, at = bias
                out = out + np.float32(beta) * arr[_index(arr, at + z * batch_bias + m * bias_m + n * bias_n)].astype(np.float32)
            c[_index(c, c0 + z * bc + m * N + n)] = out.astype(t)
    elif kind == "softmax":
        (x, x0), (y, y0), rows, cols = _view(resolve, v[0], t), _view(resolve, v[1], t), v[2], v[3]
        xr = _rows(x, x0, rows * cols).astype(np.float32).reshape(rows, cols)
        e = np.exp(xr - xr.max(axis=1, keepdims=True))
        y[_index(y, y0 + np.arange(rows * cols))] = (e / e.sum(axis=1, keepdims=True)).astype(t).reshape(-1)
    elif kind in ("rms_norm", "skip_rms_norm"):
        skip = kind == "skip_rms_norm"
        xs = (v[0], v[1], v[2], v[3]) if skip else (v[0], None, None, v[1])
        y_p, inv_p, sum_p = (v[4], v[5], v[6]) if skip else (v[2], v[3], 0)
        rows, cols, eps = (v[7], v[8], v[9]) if skip else (v[4], v[5], v[6])
        x, x0 = _view(resolve, xs[0], t)
        s = _rows(x, x0, rows * cols).astype(np.float32).reshape(rows, cols)
        if skip:
            sk, k0 = _view(resolve, xs[1], t)
            s = s + _rows(sk, k0, rows * cols).astype(np.float32).reshape(rows, cols)
            if xs[2]:
                bi, i0 = _view(resolve, xs[2], t)
                s = s + _rows(bi, i0, cols).astype(np.float32)
            s = s.astype(t).astype(np.float32)  # the sum is rounded to T first, as a stored residual would be
        sc, c0 = _view(resolve, xs[3], t)
        r = (1.0 / np.sqrt((s * s).sum(axis=1, dtype=np.float32) / np.float32(cols) + np.float32(eps))).astype(np.float32)
        y, y0 = _view(resolve, y_p, t)
        y[_index(y, y0 + np.arange(rows * cols))] = (s * r[:, None] * _rows(sc, c0, cols).astype(np.float32)).astype(t).reshape(-1)
        if inv_p:
            inv, i0 = _view(resolve, inv_p, np.float32)
            inv[_index(inv, i0 + np.arange(rows))] = r
        if sum_p:
            so, o0 = _view(resolve, sum_p, t)
            so[_index(so, o0 + np.arange(rows * cols))] = s.astype(t).reshape(-1)
    elif kind in ("mnb4_gemv", "mnb8_gemv", "mnb4_tiled", "mnb8_tiled"):
        # both paths: float32 weights from dequant<BITS>, float32 products and sums, Y rounded to T
        bits = 4 if kind.startswith("mnb4") else 8
        (a, a0), (b, b0), (s, s0) = _view(resolve, v[0], t), _view(resolve, v[1], np.uint8), _view(resolve, v[2], t)
        zp, z0 = _view(resolve, v[3], np.uint8) if v[3] else (None, 0)
        bias = _view(resolve, v[4], t) if v[4] else None
        (y, y0), M, N, K, block, k_blocks = _view(resolve, v[5], t), *v[6:11]
        if kind.endswith("gemv"):
            assert M <= 8 and grid[0] * 4 >= N, f"{entry}: M={M} or grid {grid!r} does not cover the output"
        else:  # one 64x64 output tile per block: grid (column tiles, row tiles) must cover Y
            assert len(grid) > 1 and grid[0] * 64 >= N and grid[1] * 64 >= M and grid[1] <= 65535, (
                f"{entry}: grid {grid!r} does not cover a [{M}, {N}] output")
        w = _dequant(bits, b, b0, s, s0, zp, z0, N, K, block, k_blocks)
        out = _rows(a, a0, M * K).astype(np.float32).reshape(M, K) @ w
        if bias is not None:
            out = out + _rows(bias[0], bias[1], N).astype(np.float32)
        y[_index(y, y0 + np.arange(M * N))] = out.astype(t).reshape(-1)
    else:
        raise AssertionError(f"no emulation for {entry!r}")


def emulate_attention(entry: str, v: list[Any], resolve: Resolve) -> None:
    """attention.cu (MultiHeadAttention, split-K over the keys) as its kernels compute it: each (row,
    split) block's softmax over its visible keys, then the LSE-weighted merge of the splits."""
    kind, _, sfx = entry.rpartition("_")
    t = _TYPES[sfx]
    if kind == "attn_split":
        (q, q0), (k, k0), (vv, v0), (o, o0) = (_view(resolve, p, t) for p in v[:4])
        lse, lse0 = _view(resolve, v[4], np.float32)
        lse_acc = _view(resolve, v[5], np.float32) if v[5] else None
        o_acc = _view(resolve, v[6], np.float32) if v[6] else None
        B, H, Sq, L, D, Dr, scale, offset, splits, kps = v[7:17]
        Q = _rows(q, q0, B * Sq * H * D).astype(np.float32).reshape(B, Sq, H, D) * np.float32(scale)
        K = _rows(k, k0, B * L * H * D).astype(np.float32).reshape(B, L, H, D)
        V = _rows(vv, v0, B * L * H * D).astype(np.float32).reshape(B, L, H, D)
        rows = B * H * Sq
        for split in range(splits):
            for b in range(B):
                for h in range(H):
                    for qi in range(Sq):
                        begin, end = split * kps, min(L, split * kps + kps)
                        if offset >= 0:
                            end = min(end, qi + offset + 1)
                        row = (b * H + h) * Sq + qi
                        out, row_lse = np.zeros(D, np.float32), np.float32(-np.inf)
                        if end > begin:
                            s = K[b, begin:end, h] @ Q[b, qi, h]
                            m = s.max()
                            p = np.exp(s - m)
                            out = (p @ V[b, begin:end, h]) / p.sum()
                            row_lse = m + np.log(p.sum())
                        if splits == 1:
                            o[_index(o, o0 + ((b * Sq + qi) * H + h) * D + np.arange(D))] = out.astype(t)
                            lse[_index(lse, lse0 + row)] = row_lse
                        else:
                            acc, a0 = o_acc
                            padded = np.zeros(Dr, np.float32)
                            padded[:D] = out
                            acc[_index(acc, a0 + (split * rows + row) * Dr + np.arange(Dr))] = padded
                            la, l0 = lse_acc
                            la[_index(la, l0 + split * rows + row)] = row_lse
    elif kind == "attn_combine":
        (la, l0), (acc, a0) = _view(resolve, v[0], np.float32), _view(resolve, v[1], np.float32)
        (o, o0), (lse, lse0) = _view(resolve, v[2], t), _view(resolve, v[3], np.float32)
        B, H, Sq, D, Dr, splits = v[4:10]
        rows = B * H * Sq
        lv = la[_index(la, l0 + np.arange(splits * rows))].reshape(splits, rows)
        parts = acc[_index(acc, a0 + np.arange(splits * rows * Dr))].reshape(splits, rows, Dr)[:, :, :D]
        mx = lv.max(axis=0)
        e = np.where(np.isfinite(mx), np.exp(lv - np.where(np.isfinite(mx), mx, 0)), 0).astype(np.float32)
        total = e.sum(axis=0)
        w = np.where(total > 0, e / np.where(total > 0, total, 1), 0)
        out = np.einsum("sr,srd->rd", w, parts).astype(np.float32)
        r = np.arange(rows)
        b, h, qi = r // (H * Sq), (r // Sq) % H, r % Sq
        dst = o0 + ((b * Sq + qi) * H + h)[:, None] * D + np.arange(D)[None, :]
        o[_index(o, dst)] = out.astype(t)
        lse[_index(lse, lse0 + r)] = np.where(total > 0, mx + np.log(np.where(total > 0, total, 1)), -np.inf)
    else:
        raise AssertionError(f"no emulation for {entry!r}")
