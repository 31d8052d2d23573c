"""Numpy emulation of conv.cu and packed_attention.cu on recorded launches, as their kernels compute
(float32 products and sums, outputs rounded to the storage type), every read and write bounds-checked
against its allocation. The GPU checks (tests/test_gpu.py) hold the CUDA code to the same results."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._emulate import _TYPES, Resolve, _index, _view

__all__ = ["emulate_conv", "emulate_packed_attention", "CONV_PACKED_PREFIXES"]

CONV_PACKED_PREFIXES = ("conv2d_", "packed_attn_")


def emulate_conv(entry: str, v: list[Any], grid: tuple[int, int, int], resolve: Resolve) -> None:
    t = _TYPES[entry.rpartition("_")[2]]
    (x, x0), (w, w0), (y, y0) = _view(resolve, v[0], t), _view(resolve, v[1], t), _view(resolve, v[3], t)
    bias = _view(resolve, v[2], t) if v[2] else None
    C, H, W, OC, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw, groups, m0, rows = v[4:21]
    icg, ocg = C // groups, OC // groups
    K = icg * KH * KW
    assert grid[0] * 64 >= ocg and grid[1] * 64 >= rows and grid[1] <= 65535 and grid[2] == groups, (
        f"{entry}: grid {grid!r} does not cover {rows} rows x {ocg} channels x {groups} groups")
    m = m0 + np.arange(rows, dtype=np.int64)[:, None]
    n, rem = m // (OH * OW), m % (OH * OW)
    oh, ow = rem // OW, rem % OW
    k = np.arange(K, dtype=np.int64)[None, :]
    ic, kh, kw = k // (KH * KW), (k % (KH * KW)) // KW, k % KW
    ih, iw = oh * sh - ph + kh * dh, ow * sw - pw + kw * dw
    inside = (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
    for g in range(groups):
        src = ((n * C + g * icg + ic) * H + np.where(inside, ih, 0)) * W + np.where(inside, iw, 0)
        a = np.where(inside, x[_index(x, x0 + src)].astype(np.float32), np.float32(0))
        oc = g * ocg + np.arange(ocg, dtype=np.int64)
        b = w[_index(w, w0 + oc[None, :] * K + np.arange(K)[:, None])].astype(np.float32)  # [K, OCg]
        out = a @ b
        if bias is not None:
            out = out + bias[0][_index(bias[0], bias[1] + oc)].astype(np.float32)[None, :]
        dst = (n * OC + oc[None, :]) * (OH * OW) + rem
        y[_index(y, y0 + dst)] = out.astype(t)


def emulate_packed_attention(entry: str, v: list[Any], grid: tuple[int, int, int], resolve: Resolve) -> None:
    t = _TYPES[entry.rpartition("_")[2]]
    T, B, S, H, D, Dv, q_row, k_row, v_row, q_head, k_head, v_head, ab_b, ab_h, scale = v[10:25]
    assert grid[0] == T * H, f"{entry}: grid {grid!r} for {T} tokens x {H} heads"
    (q, q0), (k, k0), (vv, v0), (o, o0) = (_view(resolve, p, t) for p in (v[0], v[1], v[2], v[9]))
    qb, kb, vb, ab = (_view(resolve, p, t) if p else None for p in (v[3], v[4], v[5], v[8]))
    (off, f0), (cum, c0) = _view(resolve, v[6], np.int32), _view(resolve, v[7], np.int32)
    f32 = np.float32

    def bias_row(b: Any, h: int, n: int) -> np.ndarray:
        return np.zeros(n, f32) if b is None else b[0][_index(b[0], b[1] + h * n + np.arange(n))].astype(f32)

    for i in range(T):
        pos = int(off[_index(off, f0 + i)])
        for h in range(H):
            dst = o0 + i * H * Dv + h * Dv + np.arange(Dv)
            if not 0 <= pos < B * S:
                o[_index(o, dst)] = np.zeros(Dv, t)
                continue
            b, s = pos // S, pos % S
            c = cum[_index(cum, c0 + np.array([b, b + 1]))].astype(np.int64)
            begin = min(max(int(c[0]), 0), T)
            n = max(min(int(c[1] - c[0]), S, T - begin), 0)
            qv = (q[_index(q, q0 + i * q_row + h * q_head + np.arange(D))].astype(f32) + bias_row(qb, h, D)) * f32(scale)
            keys = np.arange(begin, begin + n, dtype=np.int64)[:, None]
            kk = k[_index(k, k0 + keys * k_row + h * k_head + np.arange(D))].astype(f32) + bias_row(kb, h, D)
            vals = vv[_index(vv, v0 + keys * v_row + h * v_head + np.arange(Dv))].astype(f32)
            if n == 0:
                o[_index(o, dst)] = np.zeros(Dv, t)
                continue
            score = kk @ qv
            if ab is not None:
                score = score + ab[0][_index(ab[0], ab[1] + b * ab_b + h * ab_h + s * S + np.arange(n))].astype(f32)
            p = np.exp(score - score.max())
            o[_index(o, dst)] = ((p @ vals) / p.sum() + bias_row(vb, h, Dv)).astype(t)
