"""Flash-decoding workspace recipe: ONNX Runtime's split heuristic, buffer sizes and layout.

The split count follows onnxruntime's flash ``num_splits_heuristic`` /
``get_num_splits_and_buffer_sizes`` (contrib_ops/cuda/bert/flash_attention/flash_api.cc):
the key length is cut into blocks (256 keys for head size <= 64, 128 for <= 128, else 64);
no split when batch x heads x query-blocks >= 0.8 x SMs (float32 comparison); otherwise the
efficiency ``n_waves / ceil(n_waves)`` of each *eligible* split count (one that changes the
number of blocks per split) is computed in float32 and the smallest split count whose
efficiency is >= 0.85 x the best one (a double comparison, as the runtime does) is chosen,
capped at min(128, SMs, key blocks). One split means no split buffers (ORT returns 0).

Workspace (one slot, every region 256-byte aligned, as the kernel uses it):
softmax LSE ``4*B*H*Sq`` | split LSE ``4*S*B*H*Sq`` | split outputs ``4*S*B*H*Sq*round32(D)``.
"""

from __future__ import annotations

import attrs
import numpy as np

from ._checked import MAX_DIM, add, align_up, dim, mul, span

__all__ = [
    "MAX_SPLITS",
    "AttentionRecipe",
    "attention_block_n",
    "num_splits_heuristic",
    "attention_recipe",
    "attention_workspace_envelope",
    "get_num_splits_and_buffer_sizes",
]

MAX_SPLITS = 128
_F32 = np.float32
_SPLIT_THRESHOLD = _F32(0.8)
_ENVELOPE_ROWS = 1 << 21  # (distinct batch*heads*m-blocks) x (distinct key blocks) enumerated exactly


def attention_block_n(head_size: int) -> int:
    """Keys per block in the split-KV kernel (must match the kernel's dispatch)."""
    return 256 if head_size <= 64 else (128 if head_size <= 128 else 64)


def _splits_for_blocks(bnm: int, n_blocks: np.ndarray, sm_count: int) -> np.ndarray:
    """The heuristic for one batch*heads*m-blocks value over many key-block counts (vectorized)."""
    n_blocks = np.asarray(n_blocks, dtype=np.int64).reshape(-1)
    out = np.ones(n_blocks.shape, dtype=np.int64)
    if _F32(bnm) >= _SPLIT_THRESHOLD * _F32(sm_count):
        return out
    cap = min(MAX_SPLITS, sm_count)
    s = np.arange(1, cap + 1, dtype=np.int64)
    n_waves = (bnm * s).astype(_F32) / _F32(sm_count)
    eff = (n_waves / np.ceil(n_waves)).astype(_F32)  # float32 throughout, as the runtime computes it
    nb = n_blocks[:, None]
    prev = np.maximum(s - 1, 1)
    eligible = (s[None, :] <= nb) & ((s[None, :] == 1) | ((nb + s - 1) // s != (nb + prev - 1) // prev))
    eff_e = np.where(eligible, eff[None, :], _F32(0.0))
    best = eff_e.max(axis=1).astype(np.float64)
    ok = eligible & (eff.astype(np.float64)[None, :] >= 0.85 * best[:, None])
    any_ok = ok.any(axis=1)
    out[any_ok] = ok[any_ok].argmax(axis=1) + 1
    return out


def num_splits_heuristic(batch: int, seq_q: int, seq_kv: int, num_heads: int, head_size: int, sm_count: int) -> int:
    """The split count the runtime picks (1 = no split)."""
    n_blocks = -(-seq_kv // attention_block_n(head_size))
    m_blocks = -(-seq_q // 64)
    return int(_splits_for_blocks(batch * num_heads * m_blocks, np.array([n_blocks]), sm_count)[0])


def get_num_splits_and_buffer_sizes(batch: int, seq_q: int, seq_kv: int, num_heads: int, head_size: int,
                                    sm_count: int) -> tuple[int, int, int]:
    """onnxruntime's triple: (num_splits, split-LSE bytes, split-output bytes), (0, 0, 0) without a split."""
    splits = num_splits_heuristic(batch, seq_q, seq_kv, num_heads, head_size, sm_count)
    if splits <= 1:
        return 0, 0, 0
    d_r = -(-head_size // 32) * 32
    return splits, 4 * splits * batch * seq_q * num_heads, 4 * splits * batch * seq_q * num_heads * d_r


@attrs.define(frozen=True)
class AttentionRecipe:
    """Workspace of one attention call; offsets are bytes from the start of the slot."""

    num_splits: int  # chosen by the heuristic; 1 = no split kernel, no split buffers
    head_size_rounded: int
    block_n: int
    blocks_per_split: int
    lse_offset: int
    lse_bytes: int
    lse_accum_offset: int
    lse_accum_bytes: int
    out_accum_offset: int
    out_accum_bytes: int
    total_bytes: int


def attention_recipe(batch: object, seq_q: object, seq_kv: object, num_heads: object, head_size: object,
                     sm_count: object, split_heads: object = None) -> AttentionRecipe | None:
    """Exact workspace for one static shape, or None if any input is malformed or overflows.

    ``split_heads`` (default ``num_heads``) is the head count the split heuristic sees: GroupQueryAttention's
    fast decode selects the split count by KV heads while its buffers hold every query head."""
    b, sq, skv, h, d, sms = (dim(v) for v in (batch, seq_q, seq_kv, num_heads, head_size, sm_count))
    hs = h if split_heads is None else dim(split_heads)
    if None in (b, sq, skv, h, d, sms, hs) or d == 0 or sms == 0 or (h and not hs):
        return None
    d_r = -(-d // 32) * 32
    block_n = attention_block_n(d)
    n_blocks = -(-skv // block_n)
    rows = mul(b, h, sq)
    if rows is None or rows > MAX_DIM or mul(b, h, -(-sq // 64)) is None:
        return None
    if rows == 0:  # empty output: the kernel does not run
        return AttentionRecipe(1, d_r, block_n, n_blocks, 0, 0, 0, 0, 0, 0, 0)
    splits = num_splits_heuristic(b, sq, skv, hs, d, sms)
    lse = mul(4, rows)
    if splits > 1:
        lse_acc, out_acc = mul(4, splits, rows), mul(4, splits, rows, d_r)
    else:
        lse_acc, out_acc = 0, 0
    lse_acc_off = align_up(lse)
    out_acc_off = align_up(add(lse_acc_off, lse_acc)) if splits > 1 else lse_acc_off
    total = add(out_acc_off, out_acc) if splits > 1 else lse
    if None in (lse, lse_acc, out_acc, lse_acc_off, out_acc_off, total):
        return None
    bps = -(-n_blocks // splits) if n_blocks else 0
    return AttentionRecipe(splits, d_r, block_n, bps, 0, lse, lse_acc_off, lse_acc, out_acc_off, out_acc, total)


def _bytes(rows: int, splits: int, d_r: int) -> int | None:
    if rows == 0:
        return 0
    if splits <= 1:
        return mul(4, rows)
    lse_acc_off = align_up(mul(4, rows))
    out_off = align_up(add(lse_acc_off, mul(4, splits, rows)))
    return add(out_off, mul(4, splits, rows, d_r))


def attention_workspace_envelope(batch: object, seq_q: object, seq_kv: object, num_heads: object,
                                 head_size: object, sm_count: object, split_heads: object = None) -> int | None:
    """The largest workspace over every shape in the ranges (each an int or an inclusive ``(lo, hi)``).

    The split count is not monotonic in the key length (batch 1, query 1, 2 heads, head 64,
    108 SMs: 13,824 keys -> 54 splits, 13,825 -> 28), so the value at the maximum shape is not
    an upper bound. This enumerates every (batch*heads*query-blocks, key-blocks) pair that can
    split; batch and query length enter the buffers monotonically within one pair. When that
    enumeration would exceed ~2M rows, it returns the bound with the largest split count
    allowed (still never below any shape's need). ``split_heads`` as in ``attention_recipe``.
    """
    bs, qs, ks = span(batch), span(seq_q), span(seq_kv)
    h, d, sms = dim(num_heads), dim(head_size), dim(sm_count)
    hs = h if split_heads is None else dim(split_heads)
    if None in (bs, qs, ks, h, d, sms, hs) or d == 0 or sms == 0 or (h and not hs):
        return None
    if attention_recipe(bs[1], qs[1], ks[1], h, d, sms, hs) is None:  # overflow at the top of the range
        return None
    d_r = -(-d // 32) * 32
    block_n = attention_block_n(d)
    nb_lo, nb_hi = -(-ks[0] // block_n), -(-ks[1] // block_n)
    m_lo, m_hi = -(-qs[0] // 64), -(-qs[1] // 64)
    best = _bytes(bs[1] * h * qs[1], 1, d_r)  # no split, largest shape (monotonic there)
    limit = float(_SPLIT_THRESHOLD * _F32(sms))
    # (bnm -> largest (batch*heads*seq_q) rows among shapes with that bnm) for shapes that may split
    candidates: dict[int, int] = {}
    for b in range(max(bs[0], 1), bs[1] + 1):
        if h == 0 or b * hs * max(m_lo, 1) >= limit:
            break
        for m in range(max(m_lo, 1), m_hi + 1):
            bnm = b * hs * m
            if bnm >= limit:
                break
            sq = min(64 * m, qs[1])
            candidates[bnm] = max(candidates.get(bnm, 0), b * h * sq)
    if not candidates:
        return best
    nbs = np.arange(nb_lo, nb_hi + 1, dtype=np.int64)
    exact = len(candidates) * len(nbs) <= _ENVELOPE_ROWS
    for bnm, rows in candidates.items():
        if exact:
            splits = max(int(_splits_for_blocks(bnm, chunk, sms).max()) for chunk in np.array_split(nbs, max(1, len(nbs) // 4096)))
        else:
            splits = min(MAX_SPLITS, sms, nb_hi)
        got = _bytes(rows, splits, d_r)
        if got is None:
            return None
        best = max(best, got)
    return best
