"""gqa.cu's three kernels transliterated to numpy (same index math, block/split/chunk structure and float32
arithmetic), run on the arguments of a recorded launch (``ort_cuda_ep.testing``'s emulating runtime and driver)."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["emulate_gqa"]


# -- gqa.cu in numpy -----------------------------------------------------------------------------------
_GQA_CHUNK = 128  # keys per online-softmax step (GQA_THREADS)
_F32 = np.float32


def _rotated(x: np.ndarray, base: np.ndarray, d: np.ndarray, half: int, interleaved: int, cos: np.ndarray | None,
             sin: np.ndarray | None, c0: np.ndarray) -> np.ndarray:
    """gqa.cu ``rotated`` for many elements: x[base + d] with its rotary partner, float32."""
    xd = x[base + d].astype(_F32)
    if half <= 0:
        return xd
    out = xd.copy()
    rot = d < 2 * half
    if interleaved:
        i = np.where(rot, d >> 1, 0)
        odd = (d & 1) == 1
        c, s = cos[c0 + i].astype(_F32), sin[c0 + i].astype(_F32)  # type: ignore[index]
        partner = np.where(odd, base + d - 1, base + d + 1)
        xp = x[np.where(rot, partner, base + d)].astype(_F32)
        val = np.where(odd, xd * c + xp * s, xd * c - xp * s)
    else:
        first = d < half
        i = np.where(first, d, d - half)
        c, s = cos[c0 + np.where(rot, i, 0)].astype(_F32), sin[c0 + np.where(rot, i, 0)].astype(_F32)  # type: ignore[index]
        xp = x[np.where(rot, np.where(first, base + d + half, base + i), base + d)].astype(_F32)
        val = np.where(first, xd * c - xp * s, xd * c + xp * s)
    out[rot] = val[rot]
    return out


def _total_len(seqlens: np.ndarray, b: np.ndarray, T: int) -> np.ndarray:
    return np.clip(seqlens[b].astype(np.int64) + 1, 0, T)


def emulate_gqa(entry: str, values: list[Any], at) -> None:
    """Execute one launch of gqa.cu as the kernel does. ``at(pointer, dtype)`` returns device memory from
    ``pointer`` on as a writable 1-D numpy array of ``dtype`` (null pointers are never asked for)."""
    import ml_dtypes

    storage = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}.get(entry.rsplit("_", 1)[1], np.float32)
    v = values
    if entry.startswith("gqa_present_"):
        (nk, nv, new_row, k_off, v_off, pk, pv, sl, cs, sn, ok, ov, B, Hkv, S, P, T, D, half, inter, rows) = v
        n = B * Hkv * T * D
        if n == 0:
            return
        idx = np.arange(n, dtype=np.int64)
        d, r = idx % D, idx // D
        t, bh = r % T, r // T
        hk, b = bh % Hkv, bh // Hkv
        Tb = _total_len(at(sl, np.int32), b, T)
        Pb = Tb - np.minimum(Tb, S)
        kv, vv = np.zeros(n, _F32), np.zeros(n, _F32)
        past = (t < Pb) & (t < P)
        if past.any():
            src = (bh * P + t) * D + d
            kv[past] = at(pk, storage)[src[past]].astype(_F32)
            vv[past] = at(pv, storage)[src[past]].astype(_F32)
        new = (t >= Pb) & (t < Tb)
        if new.any():
            row = (b * S + (t - Pb)) * new_row
            pos = np.maximum(np.minimum(t, rows - 1), 0)
            cos, sin = (at(cs, storage), at(sn, storage)) if half > 0 else (None, None)
            kr = (row + k_off + hk * D)[new]
            kv[new] = _rotated(at(nk, storage), kr, d[new], half, inter, cos, sin, (pos * half)[new])
            vv[new] = at(nv, storage)[(row + v_off + hk * D + d)[new]].astype(_F32)
        at(ok, storage)[:n] = kv.astype(storage)
        at(ov, storage)[:n] = vv.astype(storage)
    elif entry.startswith("gqa_attn_"):
        (q, q_row, kc, vc, sl, cs, sn, o, lse_out, lse_acc, o_acc, B, H, Hkv, S, T, D, Dr, scale, half, inter, rows,
         splits, per_split) = v
        qm, km, vm, om = at(q, storage), at(kc, storage), at(vc, storage), at(o, storage)
        lse_final = at(lse_out, np.float32)
        cos, sin = (at(cs, storage), at(sn, storage)) if half > 0 else (None, None)
        seqlens = at(sl, np.int32)
        lse_m = at(lse_acc, np.float32) if splits > 1 else None
        oacc_m = at(o_acc, np.float32) if splits > 1 else None
        dd = np.arange(D, dtype=np.int64)
        for blk in range(B * H * S * splits):
            split, qrow = blk % splits, blk // splits
            s, bh = qrow % S, qrow // S
            h, b = bh % H, bh // H
            hk = h // (H // Hkv)
            Tb = int(_total_len(seqlens, np.array([b]), T)[0])
            Pb = Tb - min(Tb, S)
            pos = max(min(Pb + s, rows - 1), 0)
            qs = _rotated(qm, np.full(D, (b * S + s) * q_row + h * D), dd, half, inter, cos, sin,
                          np.full(D, pos * half)) * _F32(scale)
            visible = min(Pb + s + 1, Tb)
            k_begin = split * per_split
            k_end = min(k_begin + per_split, visible)
            kbase = (b * Hkv + hk) * T * D
            m, lsum, acc = -np.inf, _F32(0), np.zeros(D, _F32)
            for c in range(k_begin, k_end, _GQA_CHUNK):
                j = np.arange(c, min(c + _GQA_CHUNK, k_end), dtype=np.int64)
                keys = km[kbase + j[:, None] * D + dd].astype(_F32)
                vals = vm[kbase + j[:, None] * D + dd].astype(_F32)
                scores = keys @ qs
                m_new = _F32(max(m, scores.max()))
                p = np.exp(scores - m_new).astype(_F32)
                corr = _F32(0) if m == -np.inf else _F32(np.exp(_F32(m) - m_new))
                lsum = _F32(lsum * corr + p.sum(dtype=_F32))
                acc = (acc * corr + p @ vals).astype(_F32)
                m = m_new
            inv = _F32(1) / lsum if lsum > 0 else _F32(0)
            lse = _F32(m) + np.log(lsum) if lsum > 0 else -np.inf
            if splits == 1:
                start = (b * S + s) * H * D + h * D
                om[start:start + D] = (acc * inv).astype(storage)
                lse_final[qrow] = lse
            else:
                srow = split * B * H * S + qrow
                oacc_m[srow * Dr:(srow + 1) * Dr] = np.concatenate([acc * inv, np.zeros(Dr - D, _F32)])  # type: ignore[index]
                lse_m[srow] = lse  # type: ignore[index]
    elif entry.startswith("gqa_combine_"):
        lse_acc, o_acc, o, lse_out, B, H, S, D, Dr, splits = v
        nrows = B * H * S
        lse = at(lse_acc, np.float32)[: splits * nrows].reshape(splits, nrows)
        parts = at(o_acc, np.float32)[: splits * nrows * Dr].reshape(splits, nrows, Dr)[:, :, :D]
        mx = lse.max(axis=0)
        with np.errstate(invalid="ignore"):
            e = np.where(np.isfinite(mx)[None, :], np.exp(lse - mx[None, :]), 0).astype(_F32)
        total = e.sum(axis=0, dtype=_F32)
        w = np.where(total > 0, e / np.where(total > 0, total, 1), 0).astype(_F32)
        with np.errstate(divide="ignore"):
            at(lse_out, np.float32)[:nrows] = np.where(total > 0, mx + np.log(np.where(total > 0, total, 1)), -np.inf)
        out = np.einsum("kr,krd->rd", w, parts).astype(_F32)  # row = (b*H + h)*S + s
        b, h, s = np.unravel_index(np.arange(nrows), (B, H, S))
        dst = ((b * S + s) * H * D + h * D)[:, None] + np.arange(D)
        at(o, storage)[dst] = out.astype(storage)
    else:
        raise AssertionError(f"{entry!r} is not a gqa.cu entry point")
