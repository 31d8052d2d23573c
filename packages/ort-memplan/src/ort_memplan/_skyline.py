"""Skyline best-fit (Sekiyama et al., 2018, "Profile-guided memory optimization for DNNs").

Time is the x axis (each block's lifetime is fixed), offset the y axis. Keep the skyline: for
every step, the offset below which memory is taken. Repeatedly take the lowest window (a maximal
run of steps at the skyline's lowest height, leftmost on a tie) and put there the unplaced block
whose lifetime lies inside the window, preferring the longest lifetime (then the largest size);
when none fits, lift the window to its lower neighbour.

Windows come from a heap (stale entries skipped); the blocks that may fit a window are a slice
of the unplaced blocks sorted by first step (compacted as blocks get placed), filtered by last
step with numpy when the slice is large and in plain Python when it is small.
"""

from __future__ import annotations

import bisect
import heapq

import numpy as np

from ._arrays import Columns, unique_sorted

_NUMPY_FROM = 32
_BIG = np.iinfo(np.int64).max


def skyline_offsets(cols: Columns, prefer: str = "duration") -> tuple[np.ndarray, int]:
    """Offsets for `cols` by skyline best-fit; `prefer` is 'duration' or 'size' within a window."""
    n = cols.n
    offsets = np.zeros(n, np.int64)
    live = np.flatnonzero(cols.size > 0)
    if live.shape[0] == 0:
        return offsets, 0
    coords = unique_sorted(np.concatenate([cols.first[live], cols.last[live] + 1]))
    f = np.searchsorted(coords, cols.first[live])
    e = np.searchsorted(coords, cols.last[live] + 1)          # exclusive end
    size = cols.size[live]
    if prefer == "duration":
        prio = np.lexsort((f, -size, -(e - f)))
    else:
        prio = np.lexsort((f, -(e - f), -size))
    rank = np.empty(prio.shape[0], np.int64)
    rank[prio] = np.arange(prio.shape[0])
    by_first = np.lexsort((rank, f))
    # unplaced blocks sorted by first step: F, E, R (rank), K (index into live)
    F, E, R, K = f[by_first], e[by_first], rank[by_first], by_first
    placed = np.zeros(F.shape[0], bool)
    n_placed_here = 0
    size_l = size.tolist()
    align_l = cols.align[live].tolist()
    idx_l = live.tolist()
    horizon = int(coords.shape[0])
    seg: dict[int, list[int]] = {0: [horizon, 0]}      # start -> [end, height]
    starts = [0]
    heap = [(0, 0, horizon)]
    remaining = int(F.shape[0])
    peak = 0

    def push_merged(s: int) -> None:
        # merge segment at s with equal-height neighbours and push the result
        i = bisect.bisect_left(starts, s)
        end, h = seg[s]
        if i + 1 < len(starts):
            ns = starts[i + 1]
            if seg[ns][1] == h:
                end = seg.pop(ns)[0]
                del starts[i + 1]
        if i > 0:
            ps = starts[i - 1]
            if seg[ps][1] == h:
                del seg[s]
                del starts[i]
                s = ps
        seg[s] = [end, h]
        heapq.heappush(heap, (h, s, end))

    while remaining:
        h, s, end = heapq.heappop(heap)
        cur = seg.get(s)
        if cur is None or cur[0] != end or cur[1] != h:
            continue
        lo = int(np.searchsorted(F, s))
        hi = int(np.searchsorted(F, end))
        j = -1
        if hi - lo >= _NUMPY_FROM:
            ok = ~placed[lo:hi] & (E[lo:hi] <= end)
            if ok.any():
                j = lo + int(np.argmin(np.where(ok, R[lo:hi], _BIG)))
        elif hi > lo:
            best = _BIG
            for t in range(lo, hi):
                if not placed[t] and E[t] <= end and R[t] < best:
                    best, j = R[t], t
        if j < 0:
            i = bisect.bisect_left(starts, s)
            left = seg[starts[i - 1]][1] if i > 0 else None
            right = seg[end][1] if end in seg else None
            seg[s][1] = min(x for x in (left, right) if x is not None)
            push_merged(s)
            continue
        placed[j] = True
        remaining -= 1
        n_placed_here += 1
        k = int(K[j])
        a = align_l[k]
        off = (h + a - 1) & ~(a - 1)
        top = off + size_l[k]
        offsets[idx_l[k]] = off
        if top > peak:
            peak = top
        bf, be = int(F[j]), int(E[j])
        # split [s, end) at h into [s, bf) h, [bf, be) top, [be, end) h
        i = bisect.bisect_left(starts, s)
        del seg[s]
        del starts[i]
        pieces = [(s, bf, h), (bf, be, top), (be, end, h)]
        for ps, pe, ph in pieces:
            if ps < pe:
                seg[ps] = [pe, ph]
                bisect.insort(starts, ps)
        for ps, pe, ph in pieces:
            if ps < pe and ps in seg and seg[ps] == [pe, ph]:
                push_merged(ps)
        if n_placed_here * 4 > F.shape[0] and F.shape[0] > 64:
            keep = ~placed
            F, E, R, K = F[keep], E[keep], R[keep], K[keep]
            placed = np.zeros(F.shape[0], bool)
            n_placed_here = 0
    return offsets, peak
