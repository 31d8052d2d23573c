"""ONNX Runtime's pattern planner: an online best-fit over the gaps between live blocks.

It follows the allocate/free trace in program order. Each allocation takes the gap between two
live blocks (in offset order) that wastes the fewest bytes, the lowest such gap on a tie, and
goes after the highest live block when no gap fits. `OnlinePlanner` is that planner driven by an
explicit trace; `plan_online` derives the trace from request lifetimes: at every step, allocate
the blocks that start there (in request order), then free the blocks whose last step it is.
"""

from __future__ import annotations

import bisect

import numpy as np

from ._arrays import Columns
from ._errors import InvalidRequestError, TraceError
from ._types import DEFAULT_ALIGNMENT, align_up

_VECTOR_FROM = 48  # live blocks from which the best-fit scan runs on arrays (the loop is faster below)


class OnlinePlanner:
    """Trace-driven best-fit planner for one device (ORT's `MemPatternPlanner::TraceAllocation`)."""

    def __init__(self) -> None:
        self._live: list[tuple[int, int, int]] = []   # (offset, end, id) sorted by offset
        self._bounds = np.zeros((2, 64), np.int64)       # the offsets and ends of `_live` (columns), for the scan
        self._where: dict[int, tuple[int, int, int]] = {}
        self._freed: set[int] = set()
        self.offsets: dict[int, int] = {}
        self.peak = 0

    def allocate(self, block_id: int, nbytes: int, alignment: int = DEFAULT_ALIGNMENT) -> int:
        """Place a new block; returns its offset. Sizes are rounded up to `alignment`."""
        if block_id in self.offsets:
            raise TraceError(f"block {block_id!r} was already allocated in this trace; ids are single-use")
        if nbytes < 0 or alignment <= 0 or alignment & (alignment - 1):
            raise InvalidRequestError(f"block {block_id!r}: nbytes={nbytes!r}, alignment={alignment!r}; "
                                      "need nbytes >= 0 and a power-of-two alignment")
        size = align_up(nbytes, alignment)
        best = self._best_fit(size, alignment) if len(self._live) < _VECTOR_FROM else self._best_fit_np(size, alignment)
        self.offsets[block_id] = best
        self.peak = max(self.peak, best + size)
        if size:
            item = (best, best + size, block_id)
            i = bisect.bisect_left(self._live, item)
            self._live.insert(i, item)
            n = len(self._live)
            if n > self._bounds.shape[1]:
                self._bounds = np.concatenate([self._bounds, np.zeros_like(self._bounds)], axis=1)
            b = self._bounds
            b[:, i + 1:n] = b[:, i:n - 1].copy()
            b[0, i], b[1, i] = best, best + size
            self._where[block_id] = item
        return best

    def _best_fit(self, size: int, alignment: int) -> int:
        """The lowest gap that wastes the fewest bytes; after the highest live block when none fits."""
        mask = ~(alignment - 1)
        current = 0
        best = -1
        best_waste = 0
        for off, end, _ in self._live:
            start = (current + alignment - 1) & mask
            gap = off - start
            if gap >= size and (best < 0 or gap - size < best_waste):
                best, best_waste = start, gap - size
            if end > current:
                current = end
        return best if best >= 0 else (current + alignment - 1) & mask

    def _best_fit_np(self, size: int, alignment: int) -> int:
        """`_best_fit` over arrays: many live blocks (a decoder's KV outputs, alive to the end) made the
        loop quadratic in the node count."""
        offs, ends = self._bounds[0, :len(self._live)], self._bounds[1, :len(self._live)]
        current = np.zeros(offs.shape[0] + 1, np.int64)  # the highest end before each block (0 before the first)
        np.maximum.accumulate(np.maximum(ends, 0), out=current[1:])
        starts = (current[:-1] + alignment - 1) & ~(alignment - 1)
        waste = offs - starts - size
        fits = np.flatnonzero(waste >= 0)
        if fits.size:
            return int(starts[fits[np.argmin(waste[fits])]])  # argmin: the first (lowest) on a tie
        return (int(current[-1]) + alignment - 1) & ~(alignment - 1)

    def free(self, block_id: int) -> None:
        """End a block's life; its bytes become a gap for later allocations."""
        if block_id not in self.offsets:
            raise TraceError(f"free of block {block_id!r} that was never allocated; allocate it first")
        item = self._where.pop(block_id, None)
        if item is None:
            if block_id in self._freed:
                raise TraceError(f"block {block_id!r} is freed twice; free each block once")
            self._freed.add(block_id)
            return
        i = bisect.bisect_left(self._live, item)
        del self._live[i]
        b = self._bounds
        b[:, i:len(self._live)] = b[:, i + 1:len(self._live) + 1].copy()
        self._freed.add(block_id)


def online_offsets(cols: Columns) -> tuple[np.ndarray, int]:
    """Offsets of `cols` by replaying the allocate-then-free trace its lifetimes imply."""
    n = cols.n
    planner = OnlinePlanner()
    by_first = np.argsort(cols.first, kind="stable").tolist()
    by_last = np.argsort(cols.last, kind="stable").tolist()
    first = cols.first.tolist()
    last = cols.last.tolist()
    size = cols.size.tolist()
    align = cols.align.tolist()
    offsets = np.zeros(n, np.int64)
    j = 0
    i = 0
    while i < n:
        step = first[by_first[i]]
        while j < n and last[by_last[j]] < step:          # frees of earlier steps
            planner.free(by_last[j])
            j += 1
        while i < n and first[by_first[i]] == step:
            k = by_first[i]
            offsets[k] = planner.allocate(k, size[k], align[k])
            i += 1
    return offsets, planner.peak
