"""Session profiling (`SessionOptions.enable_profiling`): a Chrome / Perfetto trace in ONNX Runtime's layout.

The file is a JSON array of complete events (`"ph": "X"`, microseconds), as ONNX Runtime writes it:
category "Session" for the initialization phases (`model_loading`, `shape_resolution`, `fusions`,
`placement`, `kernel_creation`, `memory_planning`, `session_initialization`) and each `model_run`;
category "Node" for every node a run executed, named `<node>_kernel_time` with `op_name` and
`provider` in `args`. Open it in chrome://tracing or ui.perfetto.dev.
"""

from __future__ import annotations

import datetime
import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from ort_graph import Node


class Profiler:
    """Collects events from `start()` (session construction) until `end()` writes them."""

    def __init__(self, enabled: bool, prefix: str) -> None:
        self.enabled, self.prefix = enabled, prefix
        self.start_time_ns = time.time_ns()  # wall clock, as get_profiling_start_time_ns reports it
        self._origin = time.perf_counter_ns()
        self._phase_start = self._origin
        self._events: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def _us(self, t_ns: int) -> int:
        return (t_ns - self._origin) // 1000

    def _add(self, event: dict[str, Any]) -> None:
        with self._lock:
            self._events.append(event)

    def _event(self, cat: str, name: str, start_ns: int, end_ns: int, args: dict[str, Any] | None = None) -> None:
        if self.enabled:
            self._add({"cat": cat, "pid": os.getpid(), "tid": threading.get_native_id(), "dur": max(0, (end_ns - start_ns) // 1000),
                       "ts": self._us(start_ns), "ph": "X", "name": name, "args": args or {}})

    def phase(self, name: str) -> None:
        """End the initialization phase that began at the previous call (or at construction)."""
        now = time.perf_counter_ns()
        self._event("Session", name, self._phase_start, now)
        self._phase_start = now

    def initialized(self) -> None:
        self._event("Session", "session_initialization", self._origin, time.perf_counter_ns())

    def run_hook(self, order: Sequence[Node], tag: str,
                 chained: Callable[[int, int], None] | None
                 ) -> tuple[Callable[[int, int], None] | None, Callable[[], None], Callable[[], None] | None]:
        """(the progress callback for the executor, a function to call when the run ends, one the executor calls
        just before its first node). The callback times each node from the previous node's end (the first from
        that call: feed checks, layouts and thread scopes are the run's, not its first node's) and calls
        `chained` too."""
        if not self.enabled:
            return chained, lambda: None, None
        started = last = time.perf_counter_ns()

        def begin() -> None:
            nonlocal last
            last = time.perf_counter_ns()

        def progress(done: int, total: int) -> None:
            nonlocal last
            now = time.perf_counter_ns()
            node = order[done - 1]
            self._event("Node", f"{node.name}_kernel_time", last, now,
                        {"op_name": node.op_type, "provider": node.ep or "CPUExecutionProvider", "node_index": done - 1})
            last = now
            if chained is not None:
                chained(done, total)

        def finished() -> None:
            self._event("Session", "model_run", started, time.perf_counter_ns(), {"run_tag": tag} if tag else {})
        return progress, finished, begin

    def end(self) -> str:
        """Write the trace to `<prefix>_<date>_<time>.json` in the working directory and stop profiling;
        the file name, or '' when profiling was not enabled (as ONNX Runtime)."""
        if not self.enabled:
            return ""
        stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
        path = f"{self.prefix}_{stamp}.json"
        with self._lock:
            events, self._events = self._events, []
            self.enabled = False
        with open(path, "w", encoding="utf-8") as f:
            json.dump(events, f, indent=0)
        return path


__all__ = ["Profiler"]
