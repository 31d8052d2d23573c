"""Skyline best-fit (Sekiyama et al., 2018, "Profile-guided memory optimization for DNNs").

Time is the x axis (each block's lifetime is fixed), offset the y axis. Keep the skyline: for
every step, the offset below which memory is taken. Repeatedly take the lowest window (a maximal
run of steps at the skyline's lowest height) and put there the unplaced block whose lifetime lies
inside the window, preferring the longest lifetime (then the largest size); when none fits, lift
the window to its lower neighbour. Quadratic in the worst case, so `auto` uses it on small sets.
"""

from __future__ import annotations

import numpy as np

from ._arrays import Columns


def skyline_offsets(cols: Columns, prefer: str = "duration") -> tuple[np.ndarray, int]:
    """Offsets for `cols` by skyline best-fit; `prefer` is 'duration' or 'size' within a window."""
    n = cols.n
    offsets = np.zeros(n, np.int64)
    live = np.flatnonzero(cols.size > 0)
    if live.shape[0] == 0:
        return offsets, 0
    coords = np.unique(np.concatenate([cols.first[live], cols.last[live] + 1]))
    f = np.searchsorted(coords, cols.first[live])
    e = np.searchsorted(coords, cols.last[live] + 1)          # exclusive end
    size = cols.size[live]
    align = cols.align[live]
    span = e - f
    if prefer == "duration":
        prio = np.lexsort((f, -size, -span))
    else:
        prio = np.lexsort((f, -span, -size))
    pf, pe, ps, pa, pidx = f[prio], e[prio], size[prio], align[prio], live[prio]
    todo = np.ones(pf.shape[0], bool)
    remaining = int(pf.shape[0])
    segs: list[list[int]] = [[0, int(coords.shape[0]), 0]]   # [start, end, height], sorted, covering
    peak = 0
    while remaining:
        k = min(range(len(segs)), key=lambda i: (segs[i][2], segs[i][0]))
        s, end, h = segs[k]
        fits = todo & (pf >= s) & (pe <= end)
        j = int(np.argmax(fits))
        if not fits[j]:
            left = segs[k - 1][2] if k > 0 else None
            right = segs[k + 1][2] if k + 1 < len(segs) else None
            up = min(x for x in (left, right) if x is not None)
            segs[k][2] = up
            _merge(segs, k)
            continue
        todo[j] = False
        remaining -= 1
        a = int(pa[j])
        off = (h + a - 1) & ~(a - 1)
        top = off + int(ps[j])
        offsets[pidx[j]] = off
        peak = max(peak, top)
        bf, be = int(pf[j]), int(pe[j])
        new = [[s, bf, h], [bf, be, top], [be, end, h]]
        segs[k:k + 1] = [x for x in new if x[0] < x[1]]
        _merge(segs, max(k - 1, 0))
    return offsets, peak


def _merge(segs: list[list[int]], k: int) -> None:
    """Merge equal-height neighbours around index k."""
    i = max(k - 1, 0)
    stop = min(k + 3, len(segs))
    while i < stop - 1 and i < len(segs) - 1:
        if segs[i][2] == segs[i + 1][2]:
            segs[i][1] = segs[i + 1][1]
            del segs[i + 1]
            stop -= 1
        else:
            i += 1
