"""The bounded search auto-fit runs with its exact check: gallop away from an estimate, then bisect."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import attrs


@attrs.frozen
class FitCheck:
    """What an exact check may answer instead of a bool: whether the placement fits, and the bytes each
    budgeted provider would hold (weights + planned peak). Auto-fit uses the bytes to aim its next check
    (the part that is not weights barely changes from one layer count to the next)."""

    fits: bool
    used: Mapping[str, int] = attrs.field(factory=dict)  # provider name -> bytes
    # provider name -> the weight bytes the placement uploads there (what auto-fit maximizes at node granularity;
    # a kernel's host-memory inputs, such as Reshape's shape, are not among them)
    weights: Mapping[str, int] = attrs.field(factory=dict)

    def __bool__(self) -> bool:
        return self.fits


def largest_passing(guess: int, upper: int, ok: Callable[[int], bool]) -> int:
    """The largest count in [0, upper] for which `ok(count)` holds, assuming it holds up to some count and
    fails beyond it. Starts at `guess` (the answer is usually a few steps from a good estimate), gallops
    (steps 1, 2, 4, ...) towards the answer and bisects the last step: O(log distance) calls of `ok`.
    A count of 0 is taken when nothing smaller than the guess passes."""
    guess = min(max(guess, 0), upper)
    if ok(guess):
        lo, step = guess, 1  # lo passes
        while lo < upper and ok(min(lo + step, upper)):
            lo, step = min(lo + step, upper), step * 2
        hi = min(lo + step, upper) - 1 if lo < upper else lo
    else:
        hi, step = guess - 1, 1  # hi + 1 does not pass
        while hi > 0 and not ok(max(hi + 1 - step, 0)):
            hi, step = max(hi + 1 - step, 0) - 1, step * 2
        lo = max(hi + 1 - step, 0) if hi > 0 else 0
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo
