"""Planning algorithms over one device's requests, and `plan`, which runs them per device.

- ``greedy_by_size``: best-fit in decreasing size (TensorFlow Lite's greedy-by-size).
- ``online``: ONNX Runtime's trace-following best-fit (see `_online`).
- ``greedy_by_breadth``: best-fit, blocks of the busiest steps first (largest first within).
- ``skyline``: skyline best-fit (Sekiyama et al. 2018), see `_skyline`.
- ``auto`` (default): several orders through the same best-fit placement, ``online``, skyline
  best-fit (longest-first and largest-first), a short local search that moves the block setting
  the peak to the front, and the smallest result kept per device. It includes both baselines,
  so it is never worse than either. Above 20k requests on a device it tries only ``online``,
  ``greedy_by_size`` and longest-first skyline, so that 100k requests plan in seconds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from ._arrays import Columns, by_device, columns, live_profile, unique_sorted
from ._errors import InvalidRequestError
from ._online import online_offsets
from ._place import place_in_order
from ._skyline import skyline_offsets
from ._types import AllocationRequest, MemoryPlan, buffer_margin, check_unique, lead_guard

Order = Callable[[Columns], np.ndarray]
_LOCAL_SEARCH_WORK = 200_000   # local-search rounds x requests per device
_ALL_ORDERS_UP_TO = 20_000     # above this many requests on a device, auto tries fewer orders
_LARGE_ORDERS = ("greedy_by_size",)


def _order_size(c: Columns) -> np.ndarray:
    return np.lexsort((c.ids, c.first, -(c.last - c.first), -c.size))


def _order_duration(c: Columns) -> np.ndarray:
    return np.lexsort((c.ids, c.first, -c.size, -(c.last - c.first)))


def _order_area(c: Columns) -> np.ndarray:
    area = c.size.astype(np.float64) * (c.last - c.first + 1)
    return np.lexsort((c.ids, -c.size, -area))


def _order_first(c: Columns) -> np.ndarray:
    return np.lexsort((c.ids, -c.size, c.first))


def _order_breadth(c: Columns) -> np.ndarray:
    """Key each block by the largest live total over its lifetime (a sparse-table range max)."""
    steps, live = live_profile(c)
    if steps.shape[0] == 0:
        return np.arange(c.n)
    lo = np.searchsorted(steps, c.first)
    hi = np.searchsorted(steps, c.last, side="right") - 1
    table = [live]
    span = 1
    while span * 2 <= live.shape[0]:
        prev = table[-1]
        table.append(np.maximum(prev[:-span], prev[span:]))
        span *= 2
    length = hi - lo + 1
    level = np.floor(np.log2(length)).astype(np.int64)
    key = np.zeros(c.n, np.int64)
    for lv in unique_sorted(level).tolist():
        m = level == lv
        t = table[lv]
        key[m] = np.maximum(t[lo[m]], t[hi[m] - (1 << lv) + 1])
    return np.lexsort((c.ids, c.first, -c.size, -key))


ORDERS: dict[str, Order] = {
    "greedy_by_size": _order_size,
    "greedy_by_breadth": _order_breadth,
    "greedy_by_area": _order_area,
    "greedy_by_duration": _order_duration,
    "greedy_by_first": _order_first,
}
ALGORITHMS = ("auto", "online", *ORDERS, "skyline")


def _plan_device(c: Columns, algorithm: str) -> tuple[np.ndarray, int, str, dict[str, int]]:
    """(offsets, peak, winner, peaks per candidate) for one device's columns."""
    if algorithm == "online":
        off, peak = online_offsets(c)
        return off, peak, "online", {"online": peak}
    if algorithm in ORDERS:
        off, peak = place_in_order(c, ORDERS[algorithm](c))
        return off, peak, algorithm, {algorithm: peak}
    if algorithm == "skyline":
        off, peak = skyline_offsets(c, "duration")
        return off, peak, algorithm, {algorithm: peak}
    tried: dict[str, int] = {}
    off, peak = online_offsets(c)
    tried["online"] = peak
    best: tuple[np.ndarray, int, str] = (off, peak, "online")
    # no plan goes below the most bytes live at once: a candidate that reaches it ends the search (a later one
    # could only tie, and ties keep the earlier)
    bound = int(live_profile(c)[1].max()) if c.n else 0
    if best[1] <= bound:
        return best[0], best[1], best[2], tried
    seed: tuple[np.ndarray, np.ndarray, int] | None = None   # best ordered plan: (order, offsets, peak)
    names = list(ORDERS) if c.n <= _ALL_ORDERS_UP_TO else list(_LARGE_ORDERS)
    for name in names:
        order = ORDERS[name](c)
        off, peak = place_in_order(c, order)
        tried[name] = peak
        if peak < best[1]:
            best = (off, peak, name)
        if seed is None or peak < seed[2]:
            seed = (order, off, peak)
        if best[1] <= bound:
            return best[0], best[1], best[2], tried
    for prefer in ("duration", "size") if c.n <= _ALL_ORDERS_UP_TO else ("duration",):
        name = f"skyline_by_{prefer}"
        off, peak = skyline_offsets(c, prefer)
        tried[name] = peak
        if peak < best[1]:
            best = (off, peak, name)
        if best[1] <= bound:
            return best[0], best[1], best[2], tried
    rounds = min(32, _LOCAL_SEARCH_WORK // max(c.n, 1)) if c.n <= _ALL_ORDERS_UP_TO else 0
    if seed is not None and best[1] > bound and rounds > 0:
        off, peak = _local_search(c, seed, rounds, bound)
        tried["local_search"] = peak
        if peak < best[1]:
            best = (off, peak, "local_search")
    return best[0], best[1], best[2], tried


def _local_search(c: Columns, seed: tuple[np.ndarray, np.ndarray, int], rounds: int,
                  bound: int) -> tuple[np.ndarray, int]:
    """Repeatedly move the block that sets the peak to the front of the order; keep the best plan."""
    current, off, peak = seed
    best_off, best_peak = off, peak
    for _ in range(rounds):
        top = int(np.argmax(off + c.size))
        current = np.concatenate([[top], current[current != top]])
        off, peak = place_in_order(c, current)
        if peak < best_peak:
            best_off, best_peak = off, peak
            if best_peak <= bound:
                break
    return best_off, best_peak


def plan(requests: Iterable[AllocationRequest], algorithm: str = "auto", *, red_zone: int = 0) -> MemoryPlan:
    """Offsets for `requests`, planned per device with `algorithm` (one of `ALGORITHMS`).

    `red_zone` reserves that many guard bytes before (rounded up to the alignment) and after every block, and
    `buffer_margin(red_zone)` bytes at both ends of each device's buffer (debugging; see `RedZoneGuard`).
    """
    if algorithm not in ALGORITHMS:
        raise InvalidRequestError(f"unknown algorithm {algorithm!r}; choose one of {ALGORITHMS!r}")
    if red_zone < 0:
        raise InvalidRequestError(f"red_zone={red_zone!r} is negative; pass 0 (off) or a byte count")
    reqs = check_unique(requests)
    offsets: dict[int, int] = {}
    peaks: dict[str, int] = {}
    bounds: dict[str, int] = {}
    tried: dict[str, int] = {}
    winners: list[str] = []
    for device, group in sorted(by_device(reqs).items()):
        cols = columns(group, red_zone)
        off, peak, winner, cand = _plan_device(cols, algorithm)
        margin = buffer_margin(red_zone)
        if red_zone:  # the data starts after the block's lead guard, the blocks after the buffer's margin
            off = off + margin + np.fromiter((lead_guard(red_zone, r.alignment) for r in group), np.int64, len(group))
        offsets.update(zip(cols.ids.tolist(), off.tolist(), strict=True))
        peaks[device] = int(peak) + 2 * margin
        bounds[device] = (int(live_profile(cols)[1].max()) if cols.n else 0) + 2 * margin
        for name, p in cand.items():
            tried[name] = tried.get(name, 0) + int(p)
        winners.append(f"{device}={winner}")
    name = algorithm if algorithm != "auto" else f"auto[{','.join(winners)}]"
    return MemoryPlan(offsets=offsets, peak=peaks, lower_bound=bounds, algorithm=name,
                      red_zone=red_zone, candidates=tried)
