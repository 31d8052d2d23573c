"""The placement engine: best-fit over the gaps left by time-overlapping blocks, in a given order.

Placing requests one at a time in some order, each at the smallest gap (between blocks already
placed that share a step with it) that fits, is TensorFlow Lite's greedy-by-size when the order
is decreasing size. Finding those blocks fast is the work: time is cut into buckets about one
typical lifetime wide, with coarser levels (16x wider each) above; a block is filed in the
buckets it touches at the lowest level where it touches few, and a query reads its time range
at every level (a very long query scans all placed blocks with numpy instead). Small candidate sets are handled in
plain Python (numpy's per-call overhead dominates there), large ones with numpy.
"""

from __future__ import annotations

import numpy as np

from ._arrays import Columns, unique_sorted

_LONG_BUCKETS = 8      # a block touching more buckets than this goes one level up
_FANOUT = 16           # each level's buckets are this many times wider than the one below
_QUERY_SCAN = 64       # a query spanning more level-0 buckets scans all placed blocks with numpy
_INT64_MAX = np.iinfo(np.int64).max
_NUMPY_FROM = 48       # candidate count from which the numpy path is cheaper


def place_in_order(cols: Columns, order: np.ndarray) -> tuple[np.ndarray, int]:
    """Offsets (aligned to each request) for `cols`, placing in `order`; returns (offsets, peak)."""
    n = cols.n
    offsets = np.zeros(n, np.int64)
    if n == 0:
        return offsets, 0
    coords = unique_sorted(np.concatenate([cols.first, cols.last]))
    f_all = np.searchsorted(coords, cols.first)
    l_all = np.searchsorted(coords, cols.last)
    # Bucket levels: widths w, 16w, 256w, ... A block is filed at the lowest level where it
    # touches at most _LONG_BUCKETS + 1 buckets; a query reads its range at every level.
    width0 = max(1, int(np.median(l_all - f_all + 1)))
    horizon = int(coords.shape[0])
    widths = [width0]
    while horizon // widths[-1] > _LONG_BUCKETS:
        widths.append(widths[-1] * _FANOUT)
    levels: list[list[list[int]]] = [[[] for _ in range(horizon // w + 1)] for w in widths]
    # placed blocks, by placement index k: numpy columns and python mirrors for scalar access
    pf = np.zeros(n, np.int64)
    pl = np.zeros(n, np.int64)
    po = np.zeros(n, np.int64)
    pe = np.zeros(n, np.int64)
    pf_l: list[int] = []
    pl_l: list[int] = []
    po_l: list[int] = []
    pe_l: list[int] = []
    k = 0
    peak = 0
    f_list = f_all.tolist()
    l_list = l_all.tolist()
    s_list = cols.size.tolist()
    a_list = cols.align.tolist()
    wl = list(zip(widths, levels, strict=True))
    for i in order.tolist():
        s = s_list[i]
        if s == 0:
            continue
        f, last, a = f_list[i], l_list[i], a_list[i]
        mask_a = ~(a - 1)
        if last // width0 - f // width0 > _QUERY_SCAN:
            cand = np.flatnonzero((pf[:k] <= last) & (pl[:k] >= f)) if k else np.zeros(0, np.int64)
            off = _best_fit_np(po[cand], pe[cand], s, a, mask_a)
        else:
            near: list[int] = []
            for w, buckets in wl:
                for b in range(f // w, last // w + 1):
                    near.extend(buckets[b])
            if len(near) < _NUMPY_FROM:
                items = [(po_l[j], pe_l[j]) for j in near if pf_l[j] <= last and pl_l[j] >= f]
                off = _best_fit_py(items, s, a, mask_a)
            else:
                c = np.array(near, np.int64)
                c = c[(pf[c] <= last) & (pl[c] >= f)]
                off = _best_fit_np(po[c], pe[c], s, a, mask_a)
        offsets[i] = off
        end = off + s
        if end > peak:
            peak = end
        pf[k], pl[k], po[k], pe[k] = f, last, off, end
        pf_l.append(f)
        pl_l.append(last)
        po_l.append(off)
        pe_l.append(end)
        for w, buckets in wl:
            b0, b1 = f // w, last // w
            if b1 - b0 <= _LONG_BUCKETS or w == widths[-1]:
                for b in range(b0, b1 + 1):
                    buckets[b].append(k)
                break
        k += 1
    return offsets, peak


def _best_fit_py(items: list[tuple[int, int]], s: int, a: int, mask_a: int) -> int:
    items.sort()
    current = 0
    best_off = -1
    best_waste = -1
    for o, e in items:
        st = (current + a - 1) & mask_a
        gap = o - st
        if gap >= s and (best_off < 0 or gap - s < best_waste):
            best_off, best_waste = st, gap - s
        if e > current:
            current = e
    if best_off >= 0:
        return best_off
    return (current + a - 1) & mask_a


def _best_fit_np(o: np.ndarray, e: np.ndarray, s: int, a: int, mask_a: int) -> int:
    if o.shape[0] == 0:
        return 0
    idx = np.argsort(o, kind="stable")
    o = o[idx]
    run = np.maximum.accumulate(e[idx])
    starts = np.empty_like(run)
    starts[0] = 0
    starts[1:] = run[:-1]
    starts = (starts + (a - 1)) & mask_a
    waste = o - starts - s
    fits = waste >= 0
    if fits.any():
        j = int(np.argmin(np.where(fits, waste, _INT64_MAX)))
        return int(starts[j])
    return (int(run[-1]) + a - 1) & mask_a
