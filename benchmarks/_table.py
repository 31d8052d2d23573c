"""Plain-text tables and the section record every benchmark module returns."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs


def fmt_bytes(n: int | float | None) -> str:
    """Binary units, three significant figures; '-' for None."""
    if n is None:
        return "-"
    n = float(n)
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{sign}{n:.0f} {unit}" if unit == "B" else f"{sign}{n:.3g} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def fmt_ratio(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def fmt_seconds(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:.0f} us"
    if s < 1:
        return f"{s * 1e3:.1f} ms"
    return f"{s:.2f} s"


@attrs.define
class Table:
    """One printed table: a title, column headers, rows of already formatted cells, and notes."""

    title: str
    headers: Sequence[str]
    rows: list[Sequence[str]] = attrs.field(factory=list)
    notes: list[str] = attrs.field(factory=list)

    def add(self, *cells: Any) -> None:
        if len(cells) != len(self.headers):
            raise ValueError(f"row {cells!r} has {len(cells)} cells; table {self.title!r} has "
                             f"{len(self.headers)} columns {list(self.headers)!r}")
        self.rows.append([str(c) for c in cells])

    def render(self) -> str:
        widths = [len(h) for h in self.headers]
        for row in self.rows:
            widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]

        def line(cells: Sequence[str]) -> str:
            # first column left-aligned (a name), the rest right-aligned (numbers)
            return "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                             for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

        out = [self.title, line(self.headers), "  ".join("-" * w for w in widths)]
        out += [line(r) for r in self.rows]
        out += [f"  {n}" for n in self.notes]
        return "\n".join(out)


@attrs.define
class Section:
    """What one benchmark module returns: tables to print and raw records for the JSON file."""

    name: str
    tables: list[Table] = attrs.field(factory=list)
    records: list[dict[str, Any]] = attrs.field(factory=list)
    notes: list[str] = attrs.field(factory=list)
    failures: list[str] = attrs.field(factory=list)  # broken guarantees, printed as loud FAIL lines
    seconds: float = 0.0


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - t0


def interleaved_times(contenders: Mapping[str, Callable[[], Any]], repeats: int, warmup: int = 1,
                      settle: int = 1, block: int = 1, pause: float = 0.0) -> dict[str, list[float]]:
    """Wall times of each contender, run in rounds so that machine noise hits all of them alike.
    `warmup` untimed rounds first; in each round every contender makes `settle` untimed calls, then `block`
    timed ones (`repeats` timed calls in all, rounded up to whole blocks), so threads another contender left
    spinning (BLAS, OpenMP, onnxruntime's pool) do not land in its time: for runs of a few milliseconds one
    settle call is too short for that (measured: a 2-thread decode step 14.5 ms interleaved call by call,
    7.7 ms with 3 settle calls and blocks of 5, 7.2-7.4 ms run alone). `pause` seconds are slept before each
    contender's turn, so the workers the previous one left spinning go idle first instead of taking a core from
    it (the settle calls alone did not absorb that for 2-thread decode steps of 3-6 ms: onnxruntime measured
    2.8-3.1 ms beside us, 3.4-3.6 ms alone)."""
    for _ in range(warmup):
        for fn in contenders.values():
            fn()
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(-(-repeats // block)):
        for name, fn in contenders.items():
            if pause:
                time.sleep(pause)
            for _ in range(settle):
                fn()
            for _ in range(block):
                t0 = time.perf_counter()
                fn()
                samples[name].append(time.perf_counter() - t0)
    return samples


def child_json(script: str, args: Sequence[str], timeout: float = 600,
               env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run `python script *args` in a fresh process (environment `env`, else this one's); the JSON object its
    last stdout line prints, or {"error": its last stderr line}."""
    try:
        r = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"over {timeout:.0f} s"}
    if r.returncode != 0:
        return {"error": (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1][:200]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def median(xs: Sequence[float]) -> float:
    return statistics.median(xs)
