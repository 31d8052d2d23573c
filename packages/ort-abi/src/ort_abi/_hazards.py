"""A device-side model of asynchronous host-to-device copies, for the devices that only pretend to be
one (the simulated GPU, the emulating CUDA driver): each copy is deferred until something is ordered
after it, and every access is checked by address range, independently of the session's `OrderGuard`.

- `copy(stream, key, lo, hi, apply)`: a copy into [lo, hi) of allocation `key`, issued on `stream`; its
  bytes land (`apply()`) only when it completes. Refused (`StreamOrderError`) while a kernel that read
  an overlapping range on another stream is not ordered before it (a slot overwritten while read).
- `launch(stream, ranges, what)`: a kernel reading `ranges`; first the copies issued earlier on its own
  stream complete (in-order queue), then any overlapping copy still pending is a `StreamOrderError` (a
  kernel reading bytes whose copy has not completed: on hardware it would read stale data).
- `record(stream)` / `wait(stream, mark)`: events. A wait completes the copies the mark covers (the
  waiting stream's later work runs after them) and orders the waiting stream after them.
- `complete(mark)` (host waits on an event), `synchronize()` (everything done).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Any

import attrs

from ._streams import StreamOrderError

__all__ = ["HazardTracker", "Mark", "buffer_range"]


@attrs.frozen
class Mark:
    """A recorded event: everything issued on `stream` up to its `count`-th piece of work."""

    stream: Hashable
    count: int


@attrs.define
class _Copy:
    stream: Hashable
    count: int
    key: Hashable
    lo: int
    hi: int
    apply: Callable[[], None]
    what: str


@attrs.define
class _Read:
    stream: Hashable
    count: int
    key: Hashable
    lo: int
    hi: int
    what: str


@attrs.define(eq=False)
class HazardTracker:
    counts: dict[Hashable, int] = attrs.field(factory=dict)
    waited: dict[Hashable, dict[Hashable, int]] = attrs.field(factory=dict)  # stream -> {other: count}
    pending: list[_Copy] = attrs.field(factory=list)
    reads: list[_Read] = attrs.field(factory=list)
    copy_streams: set[Hashable] = attrs.field(factory=set)
    completed: int = 0

    def _issue(self, stream: Hashable) -> int:
        self.counts[stream] = self.counts.get(stream, 0) + 1
        return self.counts[stream]

    def ordered(self, stream: Hashable, other: Hashable, count: int) -> bool:
        """Whether work issued now on `stream` runs after the first `count` pieces of work on `other`."""
        return stream == other or self.waited.get(stream, {}).get(other, 0) >= count

    def record(self, stream: Hashable) -> Mark:
        return Mark(stream, self.counts.get(stream, 0))

    def wait(self, stream: Hashable, mark: Mark) -> None:
        self.complete(mark)
        if mark.stream != stream:
            seen = self.waited.setdefault(stream, {})
            seen[mark.stream] = max(seen.get(mark.stream, 0), mark.count)
        self._prune()

    def complete(self, mark: Mark) -> None:
        """The copies issued on `mark.stream` up to the mark are done: their bytes land now."""
        done = [c for c in self.pending if c.stream == mark.stream and c.count <= mark.count]
        for c in done:
            c.apply()
        self.completed += len(done)
        self.pending = [c for c in self.pending if not (c.stream == mark.stream and c.count <= mark.count)]

    def synchronize(self) -> None:
        for stream, count in list(self.counts.items()):
            self.complete(Mark(stream, count))
        self.reads.clear()

    def copy(self, stream: Hashable, key: Hashable, lo: int, hi: int, apply: Callable[[], None], what: str) -> None:
        for r in self.reads:
            if r.key == key and r.lo < hi and lo < r.hi and not self.ordered(stream, r.stream, r.count):
                raise StreamOrderError(
                    f"{what} on stream {stream!r} overwrites bytes [{lo:#x}, {hi:#x}) that {r.what} on stream "
                    f"{r.stream!r} reads and is not known to have finished: the copy stream must wait on an event "
                    "recorded after the last kernel that reads them")
        self.copy_streams.add(stream)
        self.pending.append(_Copy(stream, self._issue(stream), key, lo, hi, apply, what))

    def launch(self, stream: Hashable, ranges: Iterable[tuple[Hashable, int, int]], what: str) -> None:
        self.complete(Mark(stream, self.counts.get(stream, 0)))  # its own stream's copies ran before it
        ranges = list(ranges)
        for key, lo, hi in ranges:
            for c in self.pending:
                if c.key == key and c.lo < hi and lo < c.hi:
                    raise StreamOrderError(
                        f"{what} on stream {stream!r} reads bytes [{lo:#x}, {hi:#x}) while {c.what} into them on "
                        f"stream {c.stream!r} has not completed: the kernel's stream must wait on the copy's event "
                        "first")
        count = self._issue(stream)
        if self.copy_streams:
            self.reads.extend(_Read(stream, count, key, lo, hi, what) for key, lo, hi in ranges)

    def _prune(self) -> None:
        """Forget the reads every copy stream is ordered after (no later copy can overrun them)."""
        self.reads = [r for r in self.reads
                      if not all(self.ordered(s, r.stream, r.count) for s in self.copy_streams)]

    def pending_bytes(self) -> int:
        return sum(c.hi - c.lo for c in self.pending)


def buffer_range(buffer: Any) -> tuple[Hashable, int, int]:
    """The (allocation, first byte, end) a `DeviceBuffer` (owned or a view) covers."""
    root = buffer.root
    return id(root), buffer.offset, buffer.offset + buffer.nbytes
