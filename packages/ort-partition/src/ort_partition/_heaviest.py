"""The heaviest contiguous segment that fits, found exactly: node-granularity auto-fit puts on the device the
run of candidates whose weight bytes are the largest among all runs the exact check passes, so that a larger
budget never places fewer weight bytes (the runs that fit a budget fit every larger one).

Two facts make it exact without checking every run: a run's weight bytes only grow when it grows, and a run
that does not fit makes every run containing it not fit (more nodes: more weights, more activations). The best
run starts at a candidate that reads a weight (leading weightless nodes add no weight; the tie-breakers put
them back). Starts are visited from the last one backwards; a start is skipped without a check when even its
longest possible run (up to the end that an earlier failure bounds) cannot beat the best so far, and otherwise
costs one check (the shortest run from it that would beat the best), and a galloping search only when that
passes. So the checks are about one per weight-reading candidate, not one per run."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ._accounting import weight_bytes, weight_names


def reads_weights(node: Any) -> list[tuple[str, int]]:
    """(initializer, bytes) of each non-empty weight `node` reads, each once."""
    out = []
    for name in weight_names(node):
        nbytes = weight_bytes(node, name)
        if nbytes > 0:
            out.append((name, nbytes))
    return out


def _first_heavier(weights: Sequence[list[tuple[str, int]]], start: int, cap: int, floor: int) -> int | None:
    """The smallest end in (start, cap] whose run [start, end) reads more than `floor` weight bytes (each
    initializer once); None when even [start, cap) does not."""
    seen: set[str] = set()
    total = 0
    for end in range(start + 1, cap + 1):
        for name, nbytes in weights[end - 1]:
            if name not in seen:
                seen.add(name)
                total += nbytes
        if total > floor:
            return end
    return None


def heavier_segment(weights: Sequence[list[tuple[str, int]]], floor: int,
                                    ok: Callable[[int, int], bool], failed: Callable[[int, int], bool],
                    longest: Callable[[int, int, int], Any], weight_of: Callable[[Any], int]) -> Any | None:
    """The segment with the most device weight bytes (see the module doc) when it holds more than `floor`
    (the best segment found so far), else None.

    `weights[i]`: what candidate i reads ((name, bytes), each once); `ok(start, end)`: the exact check of the
    run [start, end); `failed(start, end)`: whether that run was checked and does not fit; `longest(start, end,
    cap)`: the longest run from `start` that fits (its Segment, extended backwards as far as it fits), knowing
    [start, end) does and [start, cap + 1) does not; `weight_of(segment)`: the
    weight bytes it puts on the device (reported by the check; they never exceed what the nodes read)."""
    best = None
    cap = len(weights)  # no run from a start <= the last failure's start ends after cap
    for start in reversed([i for i, w in enumerate(weights) if w]):
        if start >= cap:
            continue
        end = _first_heavier(weights, start, cap, floor)
        if end is None:
            continue
        if not ok(start, end):
            cap = end - 1
            continue
        seg = longest(start, end, cap)
        if weight_of(seg) > floor:
            best, floor = seg, weight_of(seg)
        if failed(start, seg.end + 1):  # the search from `start` stopped there: that end did not fit
            cap = min(cap, seg.end)
    return best
