"""A run on a fixed layout every step of which is a C step, replayed with no Python between feeds and outputs.

After a run on the static plan (`PlannedLayout`: pre-allocated buffers, or the plan's buffers made per run from
the retained host arena), or on the pattern traced for its feed shapes (`CachedLayout`: a model whose symbolic
dims no max shape bounds, the feed shapes after the first run of them), where the C step runner (`_fast_steps`) computed every node in one call and made every
graph output in the run's OUTPUTS buffer, the session keeps a `QuickRun`: the feeds' names and element types, one
`ort_abi.StepRun` whose value table starts from a template (the weights and the first replay's feeds described
once) and each output's place in OUTPUTS. A later run with feeds of those names and dtypes (C-contiguous numpy
arrays, no RunOptions, no progress callback, profiling off) is replayed: feed shapes seen before cost a tuple
lookup (a new shape key is checked once, by `validate_feeds` and the memory layout, as the executor's path checks
it: the same errors; shapes outside the static plan, or other than the traced pattern's, go there), the template's shapes one data pointer per feed
(others a description per feed), then one call into C for all the steps and one view per output. A kernel that
fails (or returns success without a needed output) raises what the executor raises for it. A step C does not
finish alone (it deferred to Python) sends the run to the executor's path, which runs it again from the start;
nothing the replay wrote is kept. The promise is unchanged: the steps answer exactly the requests the plan
holds, as in the executor's runs.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

import ort_abi
from ort_graph import to_numpy_dtype

from ._executor import NO_C_STEPS_ENV
from ._fast_steps import OUTPUTS, FastSteps
from ._feeds import validate_feeds
from ._layouts import CachedLayout, PlannedLayout, fresh_buffers
from ._run_types import RunStats
from ._run_values import check_produced, raise_failure

_UNSEEN = object()  # a shape key not checked yet


class QuickRun:
    """The replay of one session's all-C runs on its static plan or a traced pattern (see the module docstring)."""

    def __init__(self, fast: FastSteps, layout: PlannedLayout | CachedLayout, feeds: list[tuple[str, np.dtype, int]],
                 outputs: dict[str, tuple[int, int, np.dtype, int, tuple[int, ...] | None]],
                 scopes: Sequence[Callable[[], Any]] = ()) -> None:
        self.fast, self.layout = fast, layout  # one layout object, held by one replay at a time (`_lock`)
        self._lock = threading.Lock()  # a second concurrent run takes the executor's path
        self._fixed = getattr(layout, "buffers", None) is not None  # the same host buffers every run: they stay bound
        self._scopes = list(scopes)  # per provider: what to hold around a replay (its threads for C kernels)
        self.feeds = feeds  # (name, dtype, value table entry)
        self.key: Any = None  # the static plan (`PlannedLayout.plan_key`) the shapes must be planned by
        self._shapes: dict[tuple, bool | None] = {}  # feed shapes checked -> exact (the planned ones), None: not replayed
        self._template_shapes: tuple | None = None  # the feed shapes the template describes
        # graph output -> (value table entry, offset in OUTPUTS, dtype, element type, its static shape or None)
        self.outputs = outputs
        self.steps = len(fast.table.pointers) - len(fast.table.body_steps)  # the graph's nodes
        self._base = fast.devices.index(OUTPUTS)
        self._names: dict[tuple[str, ...] | None, list[tuple[str, int, int, np.dtype, int, Any]]] = {}
        self._run: ort_abi.StepRun | None = None
        self._template: Any = None
        self.usable = True  # False once a step of the planned shapes deferred to Python: the session stops replaying
        self._deferred = False
        self._bases: list[Any] = [None] * len(fast.devices)  # after the first replay: None, restart keeps them
        self._keep = [k for k, d in enumerate(fast.devices) if d != OUTPUTS]
        self._last_stats: RunStats | None = None

    @classmethod
    def build(cls, session: Any, arrays: Mapping[str, Any]) -> QuickRun | None:
        """The replay of the run just made with `arrays`, or None when such runs cannot be replayed: not on the
        static plan, a step or an output the C step runner does not make, or anything that watches every run or
        step (profiling, red zones, capture, a recorder, weight streaming, host allocation measuring)."""
        ex, memory = session._executor, session.memory
        if (session.options.measure_host_allocations or session._profiler.enabled
                or any(w is not None for w in (ex.recorder, ex.streamer, ex.capture, ex.declared_workspace))
                or ex.allocators or os.environ.get(NO_C_STEPS_ENV) == "1"):
            return None
        layout = memory.layout_for(arrays)  # the static plan, or the pattern traced for these feed shapes
        if type(layout) not in (PlannedLayout, CachedLayout) or getattr(layout, "red_zone_names", None) is not None:
            return None
        key = layout.plan_key()
        cached = ex._fast_cache.get(id(key))
        fast = cached[1] if cached is not None and cached[0] is key else None
        total = len(ex.order)
        # every node a step of one run (control-flow bodies' steps come after them: `_fast_control`)
        if (fast is None or OUTPUTS not in fast.devices or fast.table.ends.get(0) != total
                or len(fast.steps) != total + len(fast.table.body_steps)):
            return None
        limits = ort_abi.step_limits()
        feeds = []
        for name, arr in arrays.items():
            if (type(arr) is not np.ndarray or not arr.flags.c_contiguous or arr.ndim > limits["rank"]
                    or arr.dtype == object):
                return None
            entry = fast.ids.get(name, -1)  # -1: no step reads it
            feeds.append((name, arr.dtype, entry))
        base = fast.devices.index(OUTPUTS)
        outputs = {}
        for name in ex.graph.outputs:
            entry, where = fast.ids.get(name), fast.block(name)
            if entry is None or where is None or where[0] != base or name in arrays:
                return None
            value = ex.graph.values[name]
            elem = int(value.dtype or 0)
            # a static shape is the one C made (on a run with the planned shapes C answers no other request)
            static = tuple(value.shape) if value.shape is not None and all(type(d) is int for d in value.shape) else None
            outputs[name] = (entry, where[1], to_numpy_dtype(elem), elem, static)
        # a provider's C-only scope where it has one (an all-C run needs no BLAS limit), else its run scope
        scopes = [getattr(p, "c_run_scope", None) or (lambda p=p: ort_abi.provider_run_scope(p))
                  for p in session.providers]
        quick = cls(fast, layout, feeds, outputs, scopes)
        quick.key = key
        quick._shapes[tuple(a.shape for a in arrays.values())] = ex._exact_shapes(arrays)
        return quick

    def _check(self, session: Any, feeds: dict[str, np.ndarray], shapes: tuple) -> bool | None:
        """A new shape key: the executor path's checks (its errors raised as they are), then whether the static
        plan holds these shapes (None: another layout, the executor's path runs them) and are the planned ones."""
        arrays, _ = validate_feeds(session.model.graph, feeds, session._declared_inputs, session._passed_feeds,
                                   session._constants)
        layout = session.memory.layout_for(arrays)
        same = (type(layout) is type(self.layout) and layout.plan_key() is self.key and layout.name == self.layout.name
                and getattr(layout, "red_zone_names", None) is None)
        exact = session._executor._exact_shapes(arrays) if same else None
        if len(self._shapes) >= 16:  # a few shape keys (a decode loop has one per length)
            self._shapes.pop(next(iter(self._shapes)), None)
        self._shapes[shapes] = exact
        return exact

    def scope(self) -> Any:
        """The context to hold around a replay: each provider's (one provider: its own, no stack)."""
        if len(self._scopes) == 1:
            return self._scopes[0]()
        stack = contextlib.ExitStack()
        for make in self._scopes:
            stack.enter_context(make())
        return stack

    def _start(self, feeds: Mapping[str, np.ndarray], bases: list[np.ndarray], shapes: tuple, exact: bool) -> bool:
        """Hold the StepRun for this run, its value table from the template (made by the first replay) with the
        feeds described in it: their data pointers alone where the template has their shapes."""
        run = self._run
        if run is None:
            def deferred(step: int) -> Any:  # a request C does not answer: this replay fails, the executor runs it
                self._deferred = True
                raise ort_abi.KernelError(f"step {step} asked the host for something the plan does not hold")

            run = ort_abi.StepRun(self.fast.table, bases, exact, deferred)
            if not run.usable:
                run.close()
                return False
            for name, _dtype, entry in self.feeds:
                if entry >= 0:
                    run.describe(entry, feeds[name])
            self._template, self._template_shapes, self._run = run.freeze(), shapes, run
            return True
        if not run.restart(bases, self._template, exact):
            return False
        if shapes == self._template_shapes:
            for name, _dtype, entry in self.feeds:
                if entry >= 0:
                    run.set_data(entry, feeds[name])
        else:
            for name, _dtype, entry in self.feeds:
                if entry >= 0:
                    run.describe(entry, feeds[name])
        return True

    def run(self, session: Any, output_names: Sequence[str] | None, feeds: Any) -> list[np.ndarray] | None:
        """The outputs, or None when this run is not a replay of the kept one (the caller runs it the usual way)."""
        if type(feeds) is not dict or len(feeds) != len(self.feeds) or session._profiler.enabled:
            return None
        shapes = []
        for name, dtype, _entry in self.feeds:
            arr = feeds.get(name)
            if type(arr) is not np.ndarray or arr.dtype != dtype or not arr.flags.c_contiguous:
                return None
            shapes.append(arr.shape)
        key = tuple(shapes)
        exact = self._shapes.get(key, _UNSEEN)
        if exact is _UNSEEN:
            exact = self._check(session, feeds, key)
        wanted = self._wanted(output_names)
        if exact is None or wanted is None:
            return None
        if not self._lock.acquire(blocking=False):
            return None
        try:
            return self._replay(session, feeds, key, exact, wanted)
        finally:
            self._lock.release()

    def _replay(self, session: Any, feeds: dict[str, np.ndarray], key: tuple, exact: bool,
                wanted: list[tuple[str, int, int, np.dtype, int, Any]]) -> list[np.ndarray] | None:
        layout = self.layout
        session.memory.declare_for(layout)  # another feed shape traced since: the kernels declare for this one
        stats = RunStats(layout=layout.name)
        if self._fixed:
            return self._on(session, layout.buffers, feeds, key, exact, wanted, stats)
        # this run's buffers from the arenas (the retained host buffer: no allocation), as the layout's `hold`
        # makes them, given back at the end
        bufs = layout.new_run_buffers()
        stats.allocations += fresh_buffers(bufs)
        try:
            return self._on(session, bufs, feeds, key, exact, wanted, stats)
        finally:
            bufs.close()

    def _on(self, session: Any, bufs: Any, feeds: dict[str, np.ndarray], key: tuple, exact: bool,
            wanted: list[tuple[str, int, int, np.dtype, int, Any]], stats: RunStats) -> list[np.ndarray] | None:
        fast = self.fast
        with bufs.run():  # the buffers' one-run lock (pre-allocated: what `hold` takes; no red-zone guard here)
            host = bufs.buffers
            bases: list[Any] = (self._bases if self._fixed and self._run is not None
                                else [host.get(d) for d in fast.devices])
            out = bases[self._base] = fast.output_buffer()
            self._deferred = False
            if not self._start(feeds, bases, key, exact):  # no free pool context
                bases[self._base] = None
                return None
            run = self._run
            try:
                if not self._compute(session._executor, run, key, exact):
                    return None
                result = []
                address = run.base_address(self._base)
                for _name, entry, offset, dtype, elem, static in wanted:
                    shape = static if exact else None
                    if shape is None:  # symbolic in the model, or not the planned shapes: the shape C described
                        found = run.entry(entry)
                        if found is None or found[0] != elem or found[2] != address + offset:
                            return None
                        shape = found[1]
                    result.append(np.ndarray(shape, dtype, out, offset))  # a view of OUTPUTS (its base)
                stats.planned_values, stats.workspace_from_plan = run.planned_values, run.workspace_from_plan
            finally:
                bases[self._base] = None
                run.close(self._keep if self._fixed else ())  # pre-allocated host buffers stay bound
        stats.nodes_run = stats.c_steps = self.steps
        last = self._last_stats  # the same counts as the last replay: its RunStats again (one object less a run)
        if last is not None and (last.planned_values, last.workspace_from_plan, last.allocations) == (
                stats.planned_values, stats.workspace_from_plan, stats.allocations):
            stats = last
        session._executor.last_stats = self._last_stats = stats
        return result

    def _compute(self, executor: Any, run: ort_abi.StepRun, key: tuple, exact: bool) -> bool:
        """Every step, in as few calls into C as the steps allow. A failed kernel or one that returned success
        without a needed output raises what the executor raises for it (the run is not made twice: a kernel is
        called once per run); False when a step needs the executor (C deferred to Python, an input C cannot
        describe), which then runs the whole run."""
        step, total, ids = 0, self.steps, self.fast.ids

        def produced(j: int, name: str) -> bool:
            return name in ids and run.entry(ids[name]) is not None

        while step < total:
            step += run.compute_range(step, total - step)
            if step == total:
                return True
            rc = run.last
            if self._deferred or rc == ort_abi.STEP_NOT_STARTED:
                control = self.fast.table.kernels[step] is ort_abi.CONTROL_KERNEL
                if self._deferred or control:  # these shapes need a Python context: never replayed again
                    self._shapes[key] = None  # (a control-flow step C did not finish: its node's Python kernel)
                    self.usable = self.usable and not exact
                return False
            node = executor.order[step]
            if rc == ort_abi.STEP_FAILED:
                try:
                    ort_abi.check_compute(run.status, None, node=node.name, library=self.fast.table.kernels[step].library)
                except Exception as e:
                    raise_failure(node, e, None)
            facts = executor._facts[node.index]
            if facts.needed:  # STEP_INCOMPLETE: an output C did not publish was never produced
                check_produced(node, facts, produced)
            step += 1
        return True

    def _wanted(self, output_names: Sequence[str] | None) -> list[tuple[str, int, int, np.dtype, int, Any]] | None:
        key = None if output_names is None else tuple(output_names)
        wanted = self._names.get(key)
        if wanted is None:
            names = list(self.outputs) if key is None else list(key)
            if any(n not in self.outputs for n in names) or len(set(names)) != len(names):
                return None  # unknown or repeated names: the executor's path reports or handles them
            wanted = [(n, *self.outputs[n]) for n in names]
            if len(self._names) < 8:
                self._names[key] = wanted
        return wanted

    def close(self) -> None:
        if self._run is not None:
            self._run.close()
            self._run = None


__all__ = ["QuickRun"]
