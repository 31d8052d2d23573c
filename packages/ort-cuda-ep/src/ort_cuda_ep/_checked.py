"""Checked integer arithmetic for workspace recipes: a malformed or overflowing shape gives None."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["MAX_BYTES", "MAX_DIM", "ALIGNMENT", "dim", "mul", "add", "align_up", "Span", "span"]

MAX_BYTES = (1 << 63) - 1  # what a size_t-backed allocation request and a signed offset can both hold
MAX_DIM = (1 << 31) - 1  # kernels index one dimension with a 32-bit int
ALIGNMENT = 256  # every workspace region starts on a 256-byte boundary (cudaMalloc's alignment)


def dim(value: object) -> int | None:
    """A non-negative dimension that a kernel can index, else None (symbolic, negative, bool, huge)."""
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            import numpy as np

            if isinstance(value, np.integer):
                value = int(value)
            else:
                return None
        except ImportError:  # pragma: no cover - numpy is a dependency
            return None
    if value < 0 or value > MAX_DIM:
        return None
    return value


def mul(*factors: int | None) -> int | None:
    out = 1
    for f in factors:
        if f is None or f < 0:
            return None
        out *= f
        if out > MAX_BYTES:
            return None
    return out


def add(*terms: int | None) -> int | None:
    out = 0
    for t in terms:
        if t is None or t < 0:
            return None
        out += t
        if out > MAX_BYTES:
            return None
    return out


def align_up(value: int | None, alignment: int = ALIGNMENT) -> int | None:
    if value is None:
        return None
    return add(value, (-value) % alignment)


Span = tuple[int, int]


def span(value: int | Iterable[int]) -> Span | None:
    """``7`` -> ``(7, 7)``; ``(1, 4096)`` -> ``(1, 4096)``; anything malformed -> None."""
    if isinstance(value, tuple | list):
        if len(value) != 2:
            return None
        lo, hi = dim(value[0]), dim(value[1])
    else:
        lo = hi = dim(value)
    if lo is None or hi is None or lo > hi:
        return None
    return lo, hi
