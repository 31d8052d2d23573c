"""Host allocations a run makes beyond its planned blocks, measured with `tracemalloc`.

numpy reports its data buffers to tracemalloc, so the traced peak over a run's node loop is what its
kernels allocated on the host beyond the buffers that existed before (the pre-allocated execution
buffers, the weights, the feeds): their results and temporaries. Tracing costs time (every
allocation is recorded), so a session measures only when asked (`measure_host_allocations`)."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager

import attrs

__all__ = ["TracedPeak", "traced_peak"]


@attrs.define
class TracedPeak:
    """`bytes`: the highest traced memory above the level at the start, once the block has ended."""

    bytes: int = 0


@contextmanager
def traced_peak() -> Iterator[TracedPeak]:
    """Trace the block; a caller already tracing keeps its trace (only the peak is reset, as
    `tracemalloc.reset_peak` does)."""
    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start()
    result = TracedPeak()
    base = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    try:
        yield result
        result.bytes = max(0, tracemalloc.get_traced_memory()[1] - base)
    finally:
        if started:
            tracemalloc.stop()
