"""Session glue to ort-memplan: declared workspace (Level 2), the joint activation + workspace plan,
pre-allocated buffers, and the per-shape pattern cache for dynamic models.

Runs get one of three layouts:
- the static plan made at initialization (pre-allocated buffers, or one buffer per device per run), for
  feeds no larger than the planned (max) shapes, extent by extent;
- for larger feed shapes: the cached pattern for that shape key, or, on the first run with that key, a
  trace that is planned and cached when the run ends (refused with pre-allocated buffers).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

import ort_abi
import ort_graph
import ort_memplan
from ort_graph import Model, Node, is_static

from ._boundaries import HOST
from ._device_memory import (
    DeviceWeights,
    arena_allocators,
    device_allocators,
    device_memory_error,
    memory_types_of,
    weight_names_per_device,
)
from ._errors import InvalidInputError, InvalidOptionError
from ._executor import BlockLayout, FreshArrays, LayoutBase, RunStats, block_of
from ._options import SessionOptions


@attrs.define(eq=False)
class PlannedLayout(BlockLayout):
    """Values and workspace at the offsets of the static GraphPlan."""

    gplan: ort_memplan.GraphPlan
    buffers: ort_memplan.ExecutionBuffers | None  # None: allocate per run (memory-pattern mode)
    budgets: Mapping[str, int]
    red_zone_names: Sequence[str] | None = None
    name: str = "pre-allocated"
    slot_ids: dict[int, list[int]] = attrs.field(factory=dict)
    allocators: Mapping[str, ort_abi.Allocator] = attrs.field(factory=dict)  # devices with their own memory
    _live: ort_memplan.ExecutionBuffers | None = attrs.field(default=None, alias="live")
    _guard: Any = attrs.field(default=None, alias="guard")

    @contextlib.contextmanager
    def hold(self, stats: RunStats) -> Iterator[None]:
        bufs = self.buffers
        if bufs is None:  # memory-pattern mode: this run's buffers, freed when it ends
            bufs = self.gplan.buffers(arena_allocators(self.gplan.plan.peak, self.allocators), self.budgets)
            stats.allocations += len(bufs.buffers)
        try:
            with bufs.run():
                self._live = bufs
                if self.red_zone_names is not None and self.gplan.plan.red_zone:
                    self._guard = ort_memplan.RedZoneGuard(bufs, node_names=list(self.red_zone_names))
                try:
                    yield
                finally:
                    self._live, self._guard = None, None
        finally:
            if bufs is not self.buffers:
                bufs.close()

    def _block(self, name: str) -> Any:
        rid = self.gplan.activations.value_ids.get(name)
        if rid is None:
            return None
        return block_of(*self._live.block(rid))

    def workspace(self, node: Node) -> dict[int, Any]:
        out = {}
        for slot_id in self.slot_ids.get(node.index, ()):
            req = self.gplan.slot_requests[(node.index, slot_id)]
            out[slot_id] = block_of(*self._live.block(req.id))
        return out

    def before_step(self, step: int) -> None:
        if self._guard is not None:
            self._guard.before_step(step)

    def after_step(self, step: int, node: Node) -> None:
        if self._guard is not None:
            self._guard.after_step(step, node.name)


@attrs.define(eq=False)
class TracingLayout(LayoutBase):
    """First run of a new shape key: values are fresh arrays; their allocate/free order is recorded."""

    recorder: ort_memplan.TraceRecorder
    ids: dict[str, int]
    device_of_value: Mapping[str, str]
    on_done: Any  # callable(requests) once the trace is planned
    name: str = "tracing"

    @contextlib.contextmanager
    def hold(self, stats: RunStats) -> Iterator[None]:
        with self.recorder:
            yield
        self.on_done(self.recorder.requests())

    def _record(self, name: str, nbytes: int) -> None:
        self.ids.setdefault(name, len(self.ids))
        self.recorder.allocate(self.ids[name], nbytes, self.device_of_value.get(name, "cpu"))

    def place(self, name: str, arr: Any) -> Any | None:
        if isinstance(arr, np.ndarray | np.generic) and arr.dtype != object:
            self._record(name, arr.nbytes)
        return None

    def allocate(self, step: int, name: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray | None:
        self._record(name, int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize)
        return None

    def release(self, step: int, name: str) -> None:
        if name in self.ids:
            self.recorder.free(self.ids[name])


@attrs.define(eq=False)
class CachedLayout(BlockLayout):
    """A shape key seen before: one buffer per device sized by its traced plan, values at their offsets."""

    plan: ort_memplan.MemoryPlan
    ids: Mapping[str, int]
    requests: Sequence[ort_memplan.AllocationRequest]
    allocators: Mapping[str, ort_abi.Allocator] = attrs.field(factory=dict)
    name: str = "cached pattern"
    _bufs: Any = attrs.field(default=None, alias="bufs")

    @contextlib.contextmanager
    def hold(self, stats: RunStats) -> Iterator[None]:
        bufs = ort_memplan.ExecutionBuffers(self.plan, arena_allocators(self.plan.peak, self.allocators),
                                            requests=self.requests)
        stats.allocations += len(bufs.buffers)
        try:
            with bufs.run():
                self._bufs = bufs
                try:
                    yield
                finally:
                    self._bufs = None
        finally:
            bufs.close()

    def _block(self, name: str) -> Any:
        rid = self.ids.get(name)
        if rid is None:
            return None
        return block_of(*self._bufs.block(rid))


@attrs.define(eq=False)
class SessionMemory:
    """The memory side of a session: the static plan, declared workspace, weights, and layouts."""

    model: Model
    gplan: ort_memplan.GraphPlan
    slots: dict[tuple[int, int], int]
    weights: dict[str, int]
    device_budgets: dict[str, int]
    static: bool
    planned_shapes: dict[str, tuple[int, ...]]
    buffers: ort_memplan.ExecutionBuffers | None
    options: SessionOptions
    node_names: list[str]
    device_of_value: dict[str, str]
    allocators: dict[str, ort_abi.Allocator] = attrs.field(factory=dict)  # devices with their own memory
    device_weights: DeviceWeights = attrs.field(factory=DeviceWeights)
    cache: ort_memplan.PatternCache = attrs.field(factory=ort_memplan.PatternCache)
    _traced: dict[Any, tuple[dict[str, int], list[ort_memplan.AllocationRequest]]] = attrs.field(factory=dict, alias="traced")

    def close(self) -> None:
        """Free the pre-allocated buffers and the device weights (each exactly once)."""
        if self.buffers is not None:
            self.buffers.close()
        self.device_weights.close()

    def device_usage(self) -> dict[str, dict[str, int | None]]:
        """Per device with its own memory, measured by its allocator: bytes in use now, the peak since
        the session started, and the capacity it is held to (its budget, None when unlimited)."""
        return {d: {"in_use": a.bytes_in_use, "peak": a.peak_bytes, "capacity": a.capacity,
                    "weights": self.device_weights.nbytes(d)} for d, a in sorted(self.allocators.items())}

    def device_totals(self) -> dict[str, dict[str, int]]:
        """Per device: weights, peak of activations + workspace (planned), workspace declared, total."""
        out: dict[str, dict[str, int]] = {}
        ws: dict[str, int] = {}
        for req in self.gplan.slot_requests.values():
            ws[req.device] = max(ws.get(req.device, 0), req.nbytes)
        for device in sorted(set(self.weights) | set(self.gplan.plan.peak)):
            peak = self.gplan.plan.peak.get(device, 0)
            out[device] = {"weights": self.weights.get(device, 0), "peak_activations_and_workspace": peak,
                           "largest_workspace": ws.get(device, 0), "lower_bound": self.gplan.lower_bound.get(device, 0),
                           "total": self.weights.get(device, 0) + peak}
        return out

    def _within_plan(self, shapes: Mapping[str, tuple[int, ...] | None]) -> bool:
        """Feeds no larger than the planned ones, extent by extent: every value then fits its planned block
        as long as sizes grow with the inputs; one that does not fit is allocated fresh (and counted)."""
        if set(shapes) != set(self.planned_shapes):
            return False
        for name, planned in self.planned_shapes.items():
            got = shapes[name]
            if got is None or len(got) != len(planned) or any(a > b for a, b in zip(got, planned)):
                return False
        return True

    def layout_for(self, feeds: Mapping[str, np.ndarray]) -> Any:
        shapes = {n: tuple(np.shape(a)) if isinstance(a, np.ndarray | np.generic) else None for n, a in feeds.items()}
        if self.static and self._within_plan(shapes):
            slot_ids: dict[int, list[int]] = {}
            for node_index, slot_id in self.gplan.slot_requests:
                slot_ids.setdefault(node_index, []).append(slot_id)
            return PlannedLayout(self.gplan, self.buffers, self.device_budgets,
                                 self.node_names if self.options.red_zones else None,
                                 name="pre-allocated" if self.buffers is not None else "static plan", slot_ids=slot_ids,
                                 allocators=self.allocators)
        if self.buffers is not None:
            raise InvalidInputError(
                f"this session pre-allocated its buffers for input shapes {self.planned_shapes!r}, but the run "
                f"feeds {shapes!r}; pre-allocated runs must use the planned shapes or smaller ones (plan for the "
                "largest shapes you run with max_shapes or free_dimension_overrides, or disable "
                "session.pre_allocate_execution_buffers)")
        if any(not isinstance(a, np.ndarray | np.generic) for a in feeds.values()):
            return FreshArrays()  # sequence / optional inputs: values of data-dependent structure, not planned
        key = ort_memplan.shape_key(feeds)
        cached = self.cache.get(key)
        if cached is not None and key in self._traced:
            ids, requests = self._traced[key]
            return CachedLayout(cached, ids, requests, self.allocators)
        ids: dict[str, int] = {}

        def done(requests: list[ort_memplan.AllocationRequest]) -> None:
            self._traced[key] = (ids, requests)

        return TracingLayout(self.cache.trace(key), ids, self.device_of_value, done)


def _weights_per_device(model: Model, device_of_node: Mapping[int, str], memory_types: Any) -> dict[str, int]:
    inits = model.graph.initializers
    return {d: sum(inits[n].nbytes for n in names)
            for d, names in weight_names_per_device(model.graph, device_of_node, memory_types, HOST).items()}


def plan_memory(model: Model, order: Sequence[Node], kernels: Mapping[int, Any], placement: Any,
                providers: Sequence[Any], options: SessionOptions, algorithm: str = "auto",
                allocate: bool = True) -> SessionMemory:
    """The session's memory plan; with `allocate`, also what initialization allocates: devices with
    their own memory held to their budgets, weights uploaded, buffers pre-allocated (when asked).
    Auto-fit trials plan without allocating."""
    graph = model.graph
    device_by_ep = {p.name: p.device for p in providers}
    device_of_node = {n.index: device_by_ep.get(placement.ep_of[n.index], "cpu") for n in graph.nodes}
    slots: dict[tuple[int, int], int] = {}
    for node in order:
        shapes = ort_abi.workspace_input_shapes(node)
        if not all(s.is_static for s in shapes if s.present):
            continue  # unresolved shapes: the kernel falls back to scratch at run time
        for slot in ort_abi.declare_workspace(kernels[node.index], shapes, node=node.name) or ():
            slots[(node.index, slot.slot_id)] = slot.size_bytes
    memory_types = memory_types_of(providers)
    value_device: dict[str, str] = {}
    for node in order:
        host_outputs = memory_types(node)[1]
        for k, o in enumerate(node.outputs):
            if o:
                value_device[o] = HOST if k in host_outputs else device_of_node[node.index]
    gplan = ort_memplan.plan_graph(graph, order, lambda n: device_of_node[n.index], workspace=slots,
                                   red_zone=options.red_zones, algorithm=algorithm, input_device=HOST,
                                   value_devices=value_device)
    static = not gplan.activations.unknown_sizes
    inputs = [n for n in graph.inputs if n not in graph.initializers]
    planned_shapes = {n: tuple(graph.values[n].shape) for n in inputs if is_static(graph.values[n].shape)}
    static = static and len(planned_shapes) == len(inputs)
    weights = _weights_per_device(model, device_of_node, memory_types)
    budgets = {device_by_ep[ep]: b for ep, b in placement.result.budgets.items() if ep in device_by_ep}
    remaining = {d: max(b - weights.get(d, 0), 0) for d, b in budgets.items()}
    allocators = device_allocators(providers)
    device_weights = DeviceWeights()
    if allocate:
        for device, alloc in allocators.items():  # the device never holds more than its budget, run after run
            alloc.capacity = budgets.get(device, alloc.capacity)
        try:
            device_weights = DeviceWeights.upload(graph, order, device_of_node, allocators, memory_types)
        except ort_abi.AllocationError as e:
            raise device_memory_error("the weights", weights, gplan.plan.peak, budgets, e) from e
    buffers = None
    if options.pre_allocate and allocate:
        if not static:
            device_weights.close()
            unknown = list(gplan.activations.unknown_sizes)[:5]
            origin = ort_graph.first_unresolved_node(graph)  # a node whose outputs no inference resolved
            raise InvalidOptionError(
                f"session.pre_allocate_execution_buffers needs static shapes, but {len(gplan.activations.unknown_sizes)} "
                f"value(s) have unknown sizes, e.g. {unknown!r}; set free_dimension_overrides for the model's "
                "symbolic dimensions (ortrun: --dim name=N)"
                + (f"; {ort_graph.unresolved_hint(origin)}" if origin is not None else ""))
        try:
            buffers = gplan.buffers(arena_allocators(gplan.plan.peak, allocators), remaining)
        except Exception as e:
            device_weights.close()
            if isinstance(e, ort_abi.AllocationError):
                raise device_memory_error("the pre-allocated buffers", weights, gplan.plan.peak, budgets, e) from e
            raise
    return SessionMemory(model=model, gplan=gplan, slots=slots, weights=weights, device_budgets=remaining,
                         static=static, planned_shapes=planned_shapes, buffers=buffers, options=options,
                         node_names=[n.name for n in order], device_of_value=value_device, allocators=allocators,
                         device_weights=device_weights)
