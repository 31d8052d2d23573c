"""Memory patterns cached per feed-shape key, as ONNX Runtime's MemoryPatternGroup cache.

A static model is planned once at initialization (`PatternCache.plan_static`). A dynamic one has
no plan for a new shape key: its first run allocates dynamically while a `TraceRecorder` records
every allocate and free, and `finish()` plans that trace and stores the plan for the key, so every
later run with the same feed shapes gets the cached plan.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ._errors import InvalidRequestError, TraceError
from ._planners import plan
from ._types import DEFAULT_ALIGNMENT, AllocationRequest, MemoryPlan

ShapeKey = tuple[tuple[str, tuple[int, ...]], ...]


def shape_key(feeds: Mapping[str, Any]) -> ShapeKey:
    """The cache key of a feed: (name, shape) pairs sorted by name; values are arrays or shapes."""
    out = []
    for name in sorted(feeds):
        v = feeds[name]
        shape = getattr(v, "shape", v)
        try:
            dims = tuple(int(d) for d in shape)
        except (TypeError, ValueError) as e:
            raise InvalidRequestError(
                f"feed {name!r}: {shape!r} is not a concrete shape; pass an array or a tuple of ints") from e
        out.append((name, dims))
    return tuple(out)


class PatternCache:
    """Plans keyed by feed shapes. Thread-safe; planning uses `algorithm` (default 'auto')."""

    def __init__(self, algorithm: str = "auto") -> None:
        self.algorithm = algorithm
        self._plans: dict[ShapeKey, Any] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def plan_static(self, key: ShapeKey, requests: Iterable[AllocationRequest]) -> MemoryPlan:
        """Plan `requests` now (a static model at initialization) and cache the plan under `key`."""
        p = plan(requests, self.algorithm)
        self.put(key, p)
        return p

    def put(self, key: ShapeKey, p: Any) -> None:
        """Cache any plan object under `key` (a MemoryPlan, or a session's GraphPlan)."""
        with self._lock:
            self._plans[key] = p

    def get(self, key: ShapeKey) -> Any:
        """The cached plan for `key`, or None (then trace this run with `trace(key)`)."""
        with self._lock:
            p = self._plans.get(key)
            if p is None:
                self.misses += 1
            else:
                self.hits += 1
            return p

    def trace(self, key: ShapeKey) -> TraceRecorder:
        """A recorder for a run with `key`; its `finish()` plans the trace and caches it."""
        return TraceRecorder(self, key)

    def __contains__(self, key: object) -> bool:
        return key in self._plans

    def __len__(self) -> int:
        return len(self._plans)

    def keys(self) -> list[ShapeKey]:
        with self._lock:
            return list(self._plans)


class TraceRecorder:
    """Records a run's allocate/free events; each event is one time step of the trace.

    A block allocated at event a and freed at event f is live over steps [a, f - 1]; a block never
    freed stays live until the end. Replanning that trace reproduces what the run needed.
    """

    def __init__(self, cache: PatternCache | None, key: ShapeKey | None) -> None:
        self._cache = cache
        self._key = key
        self._clock = 0
        self._open: dict[int, tuple[int, int, str, int]] = {}   # id -> (nbytes, first, device, align)
        self._done: list[AllocationRequest] = []
        self._seen: set[int] = set()
        self._finished: MemoryPlan | None = None

    def allocate(self, block_id: int, nbytes: int, device: str = "cpu",
                 alignment: int = DEFAULT_ALIGNMENT) -> None:
        if block_id in self._seen:
            raise TraceError(f"block {block_id!r} is allocated twice in this trace; ids are single-use")
        self._seen.add(block_id)
        self._open[block_id] = (nbytes, self._clock, device, alignment)
        self._clock += 1

    def free(self, block_id: int) -> None:
        item = self._open.pop(block_id, None)
        if item is None:
            raise TraceError(f"free of block {block_id!r}, which is not live in this trace; "
                             "free each allocated block once")
        nbytes, first, device, align = item
        self._done.append(AllocationRequest(block_id, nbytes, first, max(first, self._clock - 1),
                                            device, align))
        self._clock += 1

    def requests(self) -> list[AllocationRequest]:
        """The trace as requests (blocks still live run to the last step)."""
        end = max(self._clock - 1, 0)
        still = [AllocationRequest(i, nb, f, max(f, end), d, a) for i, (nb, f, d, a) in self._open.items()]
        return sorted([*self._done, *still], key=lambda r: (r.first, r.id))

    def finish(self) -> MemoryPlan:
        """Plan the recorded trace; stores it in the cache under the key (once)."""
        if self._finished is not None:
            return self._finished
        algorithm = self._cache.algorithm if self._cache is not None else "auto"
        p = plan(self.requests(), algorithm)
        if self._cache is not None and self._key is not None:
            self._cache.put(self._key, p)
        self._finished = p
        return p

    def __enter__(self) -> TraceRecorder:
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        if exc_type is None:
            self.finish()


def requests_from_trace(events: Sequence[tuple[str, int] | tuple[str, int, int]]) -> list[AllocationRequest]:
    """Requests from ('alloc', id, nbytes) / ('free', id) events, as `TraceRecorder` builds them."""
    rec = TraceRecorder(None, None)
    for ev in events:
        if ev[0] == "alloc":
            rec.allocate(ev[1], ev[2])  # type: ignore[misc]
        elif ev[0] == "free":
            rec.free(ev[1])
        else:
            raise TraceError(f"unknown trace event {ev!r}; use ('alloc', id, nbytes) or ('free', id)")
    return rec.requests()
