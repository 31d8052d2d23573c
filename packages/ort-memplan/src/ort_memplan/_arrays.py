"""Requests as numpy columns, grouped per device, for the vectorised planners and bounds."""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import numpy as np

from ._errors import SizeOverflowError
from ._types import MAX_BYTES, AllocationRequest


@attrs.define(frozen=True, eq=False)
class Columns:
    """One device's requests as parallel int64 arrays (`size` is the reserved, aligned size)."""

    ids: np.ndarray
    first: np.ndarray
    last: np.ndarray
    size: np.ndarray
    align: np.ndarray

    @property
    def n(self) -> int:
        return int(self.ids.shape[0])


def _checked_sizes(requests: Sequence[AllocationRequest], red_zone: int) -> list[int]:
    """Reserved sizes, after proving that every offset a planner can give fits int64: the sum of
    all reserved sizes plus one alignment of padding per block stays within MAX_BYTES."""
    sizes, total = [], 0
    for r in requests:
        size = r.reserved(red_zone)
        total += size + r.alignment
        if total > MAX_BYTES:
            raise SizeOverflowError(
                f"request {r.id!r} ({r.nbytes!r} bytes on device {r.device!r}) brings that device's "
                f"requests to more than {MAX_BYTES!r} bytes (int64), which no byte offset can address; "
                "fix the shape behind the oversized block, or plan fewer/smaller blocks per device")
        sizes.append(size)
    return sizes


def columns(requests: Sequence[AllocationRequest], red_zone: int = 0) -> Columns:
    """One device's requests as int64 columns (SizeOverflowError when they cannot fit int64)."""
    n = len(requests)
    sizes = _checked_sizes(requests, red_zone)
    ids = np.fromiter((r.id for r in requests), dtype=np.int64, count=n)
    first = np.fromiter((r.first for r in requests), dtype=np.int64, count=n)
    last = np.fromiter((r.last for r in requests), dtype=np.int64, count=n)
    size = np.fromiter(sizes, dtype=np.int64, count=n)
    align = np.fromiter((r.alignment for r in requests), dtype=np.int64, count=n)
    return Columns(ids, first, last, size, align)


def by_device(requests: Sequence[AllocationRequest]) -> dict[str, list[AllocationRequest]]:
    groups: dict[str, list[AllocationRequest]] = {}
    for r in requests:
        groups.setdefault(r.device, []).append(r)
    return groups


def unique_sorted(values: np.ndarray) -> np.ndarray:
    """`np.unique(values)` (sorted distinct values, 1-D), without np.unique's first-call import of numpy.ma
    (tens of milliseconds of session initialization)."""
    s = np.sort(np.asarray(values).ravel())
    if s.size < 2:
        return s
    keep = np.empty(s.shape, bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def live_profile(cols: Columns) -> tuple[np.ndarray, np.ndarray]:
    """(steps, live bytes) at every step where some block starts; the maximum lies among them."""
    if cols.n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    steps = unique_sorted(cols.first)
    start = np.searchsorted(steps, cols.first)                 # index of each block's first step
    stop = np.searchsorted(steps, cols.last, side="right")     # one past the last start step it covers
    delta = np.zeros(steps.shape[0] + 1, np.int64)
    np.add.at(delta, start, cols.size)
    np.add.at(delta, stop, -cols.size)
    return steps, np.cumsum(delta[:-1])
