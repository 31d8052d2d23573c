"""`collector_paused()`: Python's cyclic garbage collector held off while a session is built.

Building a session allocates many small objects (the IR, claims, kernels, plans) and frees most of them by
reference counting; the collector's generation thresholds trigger on the allocations alone, so it ran ~140
times during one construction and traversed every live object at its full collections (18-47 ms of a
ppocrv4_det/rec construction). Nothing is left uncollected: garbage cycles made meanwhile
are collected once the collector is back on (its thresholds count the allocations made while it was off).
Nested and concurrent pauses (sessions built in threads) restore the collector once the last one ends, and only
when it was on at the first: a process that turned it off itself keeps it off."""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_depth = 0  # pauses in progress, all threads
_restore = False  # whether the collector was on when the outermost pause began


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    global _depth, _restore
    with _lock:
        if _depth == 0:
            _restore = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _restore:
                gc.enable()
