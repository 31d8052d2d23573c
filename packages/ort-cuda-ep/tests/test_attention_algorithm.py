"""The split-K algorithm of attention.cu, emulated in numpy step for step (128-key chunks, online
softmax per split, normalized partials + LSE, then the combine), against plain softmax attention.
This checks the split ranges, the causal offset and the LSE merge on a machine without a GPU."""

from __future__ import annotations

import numpy as np
import pytest

from ort_cuda_ep import attention_recipe

CHUNK = 128


def _split_kernel(q, k, v, qi, k_begin, k_end, causal, L, Sq, scale):
    if causal:
        k_end = min(k_end, qi + 1)  # unidirectional without a past input: key j visible iff j <= qi
    m, denom, acc = -np.inf, 0.0, np.zeros(q.shape[-1], np.float64)
    for kc in range(k_begin, k_end, CHUNK):
        j = np.arange(kc, min(kc + CHUNK, k_end))
        scores = (k[j] @ (q * scale)).astype(np.float64)
        m_new = max(m, scores.max())
        p = np.exp(scores - m_new)
        corr = 0.0 if m == -np.inf else np.exp(m - m_new)
        denom = denom * corr + p.sum()
        acc = acc * corr + p @ v[j]
        m = m_new
    if denom > 0:
        return acc / denom, m + np.log(denom)
    return np.zeros_like(acc), -np.inf


def emulate(q, k, v, heads, causal, sms):
    B, Sq, hid = q.shape
    L, D = k.shape[1], hid // heads
    r = attention_recipe(B, Sq, L, heads, D, sms)
    kps = r.blocks_per_split * r.block_n if r.num_splits > 1 else max(L, 1)
    out = np.zeros((B, Sq, heads, D))
    scale = 1 / np.sqrt(D)
    qh, kh, vh = (t.reshape(B, -1, heads, D) for t in (q, k, v))
    for b in range(B):
        for h in range(heads):
            for qi in range(Sq):
                parts = [_split_kernel(qh[b, qi, h], kh[b, :, h], vh[b, :, h], qi, s * kps, min(L, (s + 1) * kps),
                                       causal, L, Sq, scale) for s in range(r.num_splits)]
                lses = np.array([p[1] for p in parts])
                mx = lses.max()
                w = np.exp(lses - mx) if mx != -np.inf else np.zeros_like(lses)
                w = w / w.sum() if w.sum() > 0 else w
                out[b, qi, h] = sum(wi * p[0] for wi, p in zip(w, parts, strict=True))
    return out.reshape(B, Sq, hid), r.num_splits


def reference(q, k, v, heads, causal):
    B, Sq, hid = q.shape
    L, D = k.shape[1], hid // heads
    qh, kh, vh = (t.reshape(B, -1, heads, D).transpose(0, 2, 1, 3).astype(np.float64) for t in (q, k, v))
    s = qh @ kh.transpose(0, 1, 3, 2) / np.sqrt(D)
    if causal:
        mask = np.arange(L)[None, :] > np.arange(Sq)[:, None]
        s = np.where(mask, -np.inf, s)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return (p @ vh).transpose(0, 2, 1, 3).reshape(B, Sq, hid)


@pytest.mark.parametrize("b,sq,kv,heads,d,causal,sms,min_splits", [
    (1, 1, 2048, 2, 64, False, 108, 8),   # decode: many splits
    (1, 1, 1100, 1, 128, False, 24, 3),   # head 128 -> 128-key blocks, uneven last split
    (1, 700, 700, 1, 32, True, 24, 1),    # causal prefill
    (2, 3, 700, 2, 32, False, 108, 2),
    (1, 40, 40, 4, 16, True, 132, 1),
    (1, 2, 64, 2, 64, False, 108, 1),     # one block: no split
])
def test_split_emulation_matches_softmax_attention(b, sq, kv, heads, d, causal, sms, min_splits):
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((b, n, heads * d)).astype(np.float32) for n in (sq, kv, kv))
    got, splits = emulate(q, k, v, heads, causal, sms)
    assert splits >= min_splits
    np.testing.assert_allclose(got, reference(q, k, v, heads, causal), rtol=1e-9, atol=1e-9)
