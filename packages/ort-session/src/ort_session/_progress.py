"""Progress reports that know where they write: on a terminal a bar redrawn in place (`\\r`), in a log
file or a pipe whole lines only, a few per task (no `\\r`, no bar noise).

Library code reports phases through `phase(name)` and counts through `step(label, done, total)`; both do
nothing unless a caller (the `ortrun` command, the conformance runner) installed a `Progress` with
`reporting(progress)`, so sessions made in a program stay silent.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
import time
from collections.abc import Iterator
from typing import TextIO

_current: contextvars.ContextVar[Progress | None] = contextvars.ContextVar("ort_session_progress", default=None)


class Progress:
    """Phases as lines (`… shapes`, then `… shapes: 0.42 s` when it took a while) and counters as a bar on a
    terminal or as lines at every `log_every` percent elsewhere."""

    def __init__(self, stream: TextIO | None = None, *, tty: bool | None = None, log_every: int = 25,
                 slow_s: float = 0.5) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(tty if tty is not None else getattr(self.stream, "isatty", lambda: False)())
        self.log_every, self.slow_s = max(1, log_every), slow_s
        self._last: dict[str, int] = {}
        self._ticks: dict[str, int] = {}

    def line(self, text: str) -> None:
        print(f"… {text}", file=self.stream, flush=True)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self.line(name)
        t = time.perf_counter()
        yield
        took = time.perf_counter() - t
        self._end_ticks()
        if took >= self.slow_s:
            self.line(f"{name}: {took:.2f} s")

    def tick(self, label: str) -> None:
        """One more of an open-ended count (auto-fit trials): redrawn on a terminal, lines at 1, 2, 4, 8, ... in logs."""
        n = self._ticks[label] = self._ticks.get(label, 0) + 1
        if self.tty:
            print(f"\r  {label}: {n}", end="", file=self.stream, flush=True)
        elif n & (n - 1) == 0:
            print(f"  {label}: {n}", file=self.stream, flush=True)

    def _end_ticks(self) -> None:
        if self._ticks and self.tty:
            print(file=self.stream, flush=True)
        self._ticks.clear()

    def step(self, label: str, done: int, total: int, unit: str = "") -> None:
        pct = done * 100 // max(total, 1)
        every = 2 if self.tty else self.log_every
        bucket = pct // every
        if self._last.get(label) == bucket and done != total:
            return
        self._last[label] = bucket
        count = f"({done}/{total}{' ' + unit if unit else ''})"
        if self.tty:
            filled = pct // 5
            end = "\n" if done >= total else ""
            print(f"\r{label} [{'#' * filled}{'.' * (20 - filled)}] {pct:3d}% {count}", end=end, file=self.stream,
                  flush=True)
        else:
            print(f"{label}: {pct}% {count}", file=self.stream, flush=True)
        if done >= total:
            self._last.pop(label, None)


@contextlib.contextmanager
def reporting(progress: Progress | None) -> Iterator[Progress | None]:
    """Make `progress` the reporter of phases and steps inside the block."""
    token = _current.set(progress)
    try:
        yield progress
    finally:
        _current.reset(token)


def current() -> Progress | None:
    return _current.get()


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """A named phase of a long task (loading, shapes, auto-fit trials, planning); silent without a reporter."""
    progress = _current.get()
    if progress is None:
        yield
        return
    with progress.phase(name):
        yield


def step(label: str, done: int, total: int, unit: str = "") -> None:
    progress = _current.get()
    if progress is not None:
        progress.step(label, done, total, unit)


def tick(label: str) -> None:
    progress = _current.get()
    if progress is not None:
        progress.tick(label)
