"""numpy data buffers a run allocates beyond its planned blocks: its kernels' fresh results and temporaries.

Two measures, `TracedPeak.by` says which one a run used:
- `NUMPY_ALLOCATOR` (precise): `ort_session._numpy_alloc`, a numpy memory handler (NEP 49) set for the
  node loop in the running context only, that counts the data-buffer bytes live through it: the peak over
  the loop, and per node the peak above the bytes live when the node started (temporaries freed inside a
  kernel included). It costs two C calls per node. It is a C extension built at install
  (`_numpy_alloc_build.py`); where it is absent or does not load:
- `TRACEMALLOC_DOMAIN` (a lower bound): tracemalloc traces the loop; numpy reports its data buffers in its
  own domain (`numpy.lib.tracemalloc_domain`), summed at each node boundary: a temporary a kernel frees
  before it returns is not seen.
Nothing is subtracted but the bytes live when the loop started (the pre-allocated buffers, weights, feeds).
`python_bytes` is tracemalloc's peak of every host allocation (Python objects too) over the loop, where
tracemalloc traces it (the fallback, or a caller already tracing); else None."""

from __future__ import annotations

import functools
import logging
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import attrs
import numpy as np

__all__ = ["NUMPY_ALLOCATOR", "TRACEMALLOC_DOMAIN", "TracedPeak", "counting_allocator", "traced_peak"]

NUMPY_ALLOCATOR = "numpy allocator"
TRACEMALLOC_DOMAIN = "tracemalloc numpy domain at node boundaries"
_log = logging.getLogger("ort_session")
_NUMPY_DOMAIN = np.lib.tracemalloc_domain


@functools.cache
def counting_allocator() -> ModuleType | None:
    """The compiled counting allocator, or None (not built, or it does not load: logged once)."""
    try:
        from . import _numpy_alloc
    except ImportError as e:
        _log.info("counting numpy allocator not available (%s); measure_host_allocations uses %s; build it with "
                  "`python packages/ort-session/src/ort_session/_numpy_alloc_build.py`", e, TRACEMALLOC_DOMAIN)
        return None
    return _numpy_alloc


@attrs.define
class TracedPeak:
    """`bytes`: the peak of numpy data buffers live above the level at the start (by the measure `by`);
    `nodes`: node label -> the bytes its kernel held above what was live when it started (nodes with none
    left out); `python_bytes`: tracemalloc's peak of all host allocations, where it traced the block."""

    by: str
    bytes: int = 0
    nodes: dict[str, int] = attrs.field(factory=dict)
    python_bytes: int | None = None
    _counter: Any = attrs.field(default=None, alias="counter")  # the counting allocator's capsule
    _base: int = attrs.field(default=0, alias="base")  # numpy bytes live at the start
    _mark: int = attrs.field(default=0, alias="mark")  # numpy bytes live at the last node boundary

    def node_done(self, label: str) -> None:
        """A node finished: record what it held beyond what was live when it started."""
        if self._counter is not None:
            from . import _numpy_alloc

            current, peak, _ = _numpy_alloc.counts(self._counter)
            _numpy_alloc.reset_peak(self._counter)
            held = peak - self._mark
            self.bytes = max(self.bytes, peak)
        else:
            current = _numpy_domain_bytes()
            held = current - self._mark
            self.bytes = max(self.bytes, current - self._base)
        if held > 0:
            self.nodes[label] = self.nodes.get(label, 0) + held
        self._mark = current


def _numpy_domain_bytes() -> int:
    snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.DomainFilter(True, _NUMPY_DOMAIN)])
    return sum(t.size for t in snapshot.traces)


@contextmanager
def traced_peak(precise: bool = True) -> Iterator[TracedPeak]:
    """Measure the block; call `node_done` after each node. `precise=False` forces the tracemalloc fallback.
    A caller already tracing keeps its trace (only its peak is reset, as `tracemalloc.reset_peak` does)."""
    module = counting_allocator() if precise else None
    was_tracing = tracemalloc.is_tracing()
    started = module is None and not was_tracing
    if started:
        tracemalloc.start()
    if was_tracing or started:
        python_base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
    if module is not None:
        counter, previous = module.install()
        result = TracedPeak(NUMPY_ALLOCATOR, counter=counter)
    else:
        base = _numpy_domain_bytes()
        result = TracedPeak(TRACEMALLOC_DOMAIN, base=base, mark=base)
    try:
        yield result
        if module is not None:
            result.bytes = max(result.bytes, module.counts(counter)[1])  # since the last node boundary
        if was_tracing or started:
            result.python_bytes = max(0, tracemalloc.get_traced_memory()[1] - python_base)
    finally:
        if module is not None:
            module.restore(previous)
            result._counter = None
        if started:
            tracemalloc.stop()
