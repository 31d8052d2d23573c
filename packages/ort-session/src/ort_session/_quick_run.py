"""A pre-allocated run every step of which is a C step, replayed with no Python between the feeds and the outputs.

After a run on the static plan's pre-allocated buffers with the planned input shapes, where the C step runner
(`_fast_steps`) computed every node in one call and made every graph output in the run's OUTPUTS buffer, the
session keeps a `QuickRun`: the feeds' names, element types and shapes, one `ort_abi.StepRun` whose value table
starts from a template (the weights and the feeds described once) and each output's place in OUTPUTS. A later run
with feeds of exactly those names, dtypes and shapes (C-contiguous numpy arrays, no RunOptions, no progress
callback, profiling off) then costs: the feed check, one data pointer per feed, one call into C for all the steps,
and one view per output. Anything else, or a step C does not finish alone (it deferred to Python or failed),
takes the executor's path: a failed quick run is run again there from the start, so its error is the one that
path gives, and nothing the run wrote is kept. The promise is unchanged: the steps answer exactly the requests the
plan holds, as in the executor's runs.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

import ort_abi
from ort_graph import to_numpy_dtype

from ._executor import NO_C_STEPS_ENV
from ._fast_steps import OUTPUTS, FastSteps
from ._run_types import RunStats


class QuickRun:
    """The replay of one session's all-C, pre-allocated run (see the module docstring)."""

    def __init__(self, fast: FastSteps, buffers: Any, feeds: list[tuple[str, np.dtype, tuple[int, ...], int]],
                 outputs: dict[str, tuple[int, int, np.dtype, int, tuple[int, ...] | None]], layout_name: str,
                 scopes: Sequence[Callable[[], Any]] = ()) -> None:
        self.fast, self.buffers, self.layout_name = fast, buffers, layout_name
        self._scopes = list(scopes)  # per provider: what to hold around a replay (its threads for C kernels)
        self.feeds = feeds  # (name, dtype, shape, value table entry)
        # graph output -> (value table entry, offset in OUTPUTS, dtype, element type, its static shape or None)
        self.outputs = outputs
        self.steps = len(fast.table.pointers)
        self._base = fast.devices.index(OUTPUTS)
        self._names: dict[tuple[str, ...] | None, list[tuple[str, int, int, np.dtype, int, Any]]] = {}
        self._run: ort_abi.StepRun | None = None
        self._template: Any = None
        self.usable = True  # False once a step deferred to Python: the session stops replaying
        self._bases: list[Any] = [None] * len(fast.devices)  # after the first replay: None, restart keeps them
        self._keep = [k for k, d in enumerate(fast.devices) if d != OUTPUTS]
        self._stats: RunStats | None = None

    @classmethod
    def build(cls, session: Any, arrays: Mapping[str, Any]) -> QuickRun | None:
        """The replay of the run just made with `arrays`, or None when such runs cannot be replayed: not
        pre-allocated, not the planned input shapes, a step or an output the C step runner does not make, or
        anything that watches every run or step (profiling, red zones, capture, a recorder, weight streaming)."""
        ex, memory = session._executor, session.memory
        if (memory.buffers is None or not session.options.pre_allocate or not memory.static
                or session.options.measure_host_allocations or session._profiler.enabled
                or any(w is not None for w in (ex.recorder, ex.streamer, ex.capture, ex.declared_workspace))
                or ex.allocators or os.environ.get(NO_C_STEPS_ENV) == "1" or not ex._exact_shapes(arrays)):
            return None
        layout = memory.layout_for(arrays)
        key = getattr(layout, "plan_key", None)
        if not getattr(layout, "strict", False) or key is None or layout.red_zone_names is not None:
            return None
        cached = ex._fast_cache.get(id(key()))
        fast = cached[1] if cached is not None and cached[0] is key() else None
        total = len(ex.order)
        if fast is None or OUTPUTS not in fast.devices or fast.table.ends.get(0) != total or len(fast.steps) != total:
            return None
        limits = ort_abi.step_limits()
        feeds = []
        for name, arr in arrays.items():
            if (type(arr) is not np.ndarray or not arr.flags.c_contiguous or arr.ndim > limits["rank"]
                    or arr.dtype == object):
                return None
            entry = fast.ids.get(name, -1)  # -1: no step reads it
            feeds.append((name, arr.dtype, arr.shape, entry))
        base = fast.devices.index(OUTPUTS)
        outputs = {}
        for name in ex.graph.outputs:
            entry, where = fast.ids.get(name), fast.blocks.get(name)
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
        return cls(fast, memory.buffers, feeds, outputs, layout.name, scopes)

    def scope(self) -> Any:
        """The context to hold around a replay: each provider's (one provider: its own, no stack)."""
        if len(self._scopes) == 1:
            return self._scopes[0]()
        stack = contextlib.ExitStack()
        for make in self._scopes:
            stack.enter_context(make())
        return stack

    def _start(self, feeds: Mapping[str, np.ndarray], bases: list[np.ndarray]) -> bool:
        """Hold the StepRun for this run, its value table from the template (made by the first run)."""
        run = self._run
        if run is None:
            def deferred(step: int) -> Any:  # a request C does not answer: this replay fails, the executor runs it
                self.usable = False
                raise ort_abi.KernelError(f"step {step} asked the host for something the plan does not hold")

            run = ort_abi.StepRun(self.fast.table, bases, True, deferred)
            if not run.usable:
                run.close()
                return False
            for name, _dtype, _shape, entry in self.feeds:
                if entry >= 0:
                    run.describe(entry, feeds[name])
            self._template, self._run = run.freeze(), run
            return True
        return run.restart(bases, self._template)

    def run(self, session: Any, output_names: Sequence[str] | None, feeds: Any) -> list[np.ndarray] | None:
        """The outputs, or None when this run is not a replay of the kept one (the caller runs it the usual way)."""
        if type(feeds) is not dict or len(feeds) != len(self.feeds) or session._profiler.enabled:
            return None
        for name, dtype, shape, _entry in self.feeds:
            arr = feeds.get(name)
            if type(arr) is not np.ndarray or arr.shape != shape or arr.dtype != dtype or not arr.flags.c_contiguous:
                return None
        wanted = self._wanted(output_names)
        if wanted is None:
            return None
        fast = self.fast
        with self.buffers.run():
            bases: list[Any] = self._bases if self._run is not None else [self.buffers.buffers.get(d) for d in fast.devices]
            out = bases[self._base] = fast.output_buffer()
            if not self._start(feeds, bases):
                return None
            run = self._run
            try:
                for name, _dtype, _shape, entry in self.feeds:
                    if entry >= 0:
                        run.set_data(entry, feeds[name])
                done = run.compute_range(0, self.steps)
                if done != self.steps:  # deferred to Python, or failed: the executor's path says how
                    return None
                result = []
                address = run.base_address(self._base)
                for _name, entry, offset, dtype, elem, static in wanted:
                    shape = static
                    if shape is None:  # symbolic in the model: the shape C described
                        found = run.entry(entry)
                        if found is None or found[0] != elem or found[2] != address + offset:
                            return None
                        shape = found[1]
                    result.append(np.ndarray(shape, dtype, out, offset))  # a view of OUTPUTS (its base)
                planned, workspace = run.planned_values, run.workspace_from_plan
            finally:
                bases[self._base] = None
                run.close(self._keep)  # the host buffers stay bound for the next replay, OUTPUTS does not
        stats = self._stats
        if stats is None or stats.planned_values != planned or stats.workspace_from_plan != workspace:
            stats = self._stats = RunStats(layout=self.layout_name, nodes_run=self.steps, c_steps=self.steps,
                                           planned_values=planned, workspace_from_plan=workspace)
        session._executor.last_stats = stats  # the same counts as the last replay: the same object
        return result

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
