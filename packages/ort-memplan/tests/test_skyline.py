"""The skyline best-fit: the heap-and-slices implementation equals a plain quadratic reference."""

from __future__ import annotations

import numpy as np
import pytest

import ort_memplan as mp
from ort_memplan import AllocationRequest as R
from ort_memplan._arrays import Columns, columns
from ort_memplan._skyline import skyline_offsets
from ort_memplan.bench import random_requests


def reference_skyline(cols: Columns, prefer: str = "duration") -> tuple[np.ndarray, int]:
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


@pytest.mark.parametrize("n, seed", [(50, 0), (400, 1), (2000, 2)])
@pytest.mark.parametrize("prefer", ["duration", "size"])
def test_fast_skyline_matches_reference(n: int, seed: int, prefer: str) -> None:
    reqs = random_requests(n, seed)
    cols = columns(reqs)
    fast_off, fast_peak = skyline_offsets(cols, prefer)
    ref_off, ref_peak = reference_skyline(cols, prefer)
    assert fast_peak == ref_peak
    assert np.array_equal(fast_off, ref_off)


def test_skyline_fills_the_lowest_window_with_the_longest_block() -> None:
    reqs = [R(0, 256, 0, 9), R(1, 512, 0, 4), R(2, 512, 5, 9), R(3, 256, 2, 3)]
    p = mp.plan(reqs, "skyline")
    mp.validate(p, reqs)
    assert p.offsets[0] == 0                     # the longest lifetime goes first, at the bottom
    assert p.offsets[1] == p.offsets[2] == 256   # then the two halves side by side on top of it
    assert p.peak["cpu"] == 1024 == p.lower_bound["cpu"]
