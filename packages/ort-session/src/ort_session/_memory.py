"""The session's memory: declared workspace (Level 2), the joint activation + workspace plan, one
`DeviceMemoryStage` per device, pre-allocated buffers, and the per-shape pattern cache for dynamic models.

Data goes down once: the placement's budgets (bytes per provider) -> `plan_memory` -> one stage per device
(budget, allocator, weights, planned peak) -> the layouts and the executor, which read the stages.

Which layout a run gets, checked in `layout_for` before any kernel runs:
- The memory promise: a session with device budgets, or with pre-allocated buffers, promises that runs
  do not run out of memory, which holds only for feeds no larger than the shapes it planned for. A feed
  of another rank, or with an extent larger than the planned one (the resolved shape, after
  free_dimension_overrides / max_shapes), is refused with `FeedExceedsPlanError` naming the input, its
  shape and the planned maximum. Extents the plan left symbolic cannot be checked (and cannot be held
  to a budget either): plan them with free_dimension_overrides or max_shapes.
- Feeds no larger than the planned shapes, extent by extent, run from the static plan made at
  initialization (pre-allocated buffers, or one buffer per device per run).
- Without a promise, other feed shapes use the cached pattern for their shape key, or, on the first run
  with that key, a trace of values and declared workspace that is planned and cached when the run ends.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

import ort_abi
import ort_graph
import ort_memplan
from ort_graph import Model, Node, is_static

from ._boundaries import HOST
from ._device_memory import (
    DeviceMemoryStage,
    DeviceWeights,
    device_allocators,
    device_memory_error,
    graph_body_weights,
    memory_types_of,
    weight_names_per_device,
    weight_nbytes,
)
from ._errors import FeedExceedsPlanError, InvalidInputError, InvalidOptionError
from ._layouts import (
    CachedLayout,
    PlannedLayout,
    TracedPattern,
    TracingLayout,
    arenas,
    value_blocks,
    workspace_shapes,
)
from ._options import PRE_ALLOCATE, STATIC_WORKSPACE, SessionOptions, _truthy
from ._prepack import (
    node_prepacked,
    packed_per_device,
    prepack_weights,
    prepacked_bytes,
    releasable,
    released_per_device,
    releases_packed,
)
from ._promise import (
    ALLOW_UNPLANNED_SHAPES,
    check_budgeted_values_planned,
    check_plan_within_budgets,
    largest_blocks_text,
)
from ._run_types import FreshArrays

__all__ = ["RED_ZONES_ENV", "SessionMemory", "declared_slots", "plan_memory", "red_zone_bytes"]

RED_ZONES_ENV = "ORT_LOWMEM_RED_ZONES"  # debug: guard bytes after every planned block, without code changes


def red_zone_bytes(options: SessionOptions) -> int:
    """Guard bytes after every planned block: the `red_zones` option, else ORT_LOWMEM_RED_ZONES, else 0."""
    if options.red_zones:
        return int(options.red_zones)
    raw = os.environ.get(RED_ZONES_ENV, "").strip()
    try:
        n = int(raw or 0)
    except ValueError as e:
        raise InvalidOptionError(f"{RED_ZONES_ENV}={raw!r} is not a byte count; set it to e.g. 64 (guard bytes after "
                                 "every planned block), or unset it") from e
    if n < 0:
        raise InvalidOptionError(f"{RED_ZONES_ENV}={raw!r} is negative; set it to e.g. 64, or 0 to turn red zones off")
    return n


@attrs.define(eq=False)
class SessionMemory:
    """The memory side of a session: the static plan, declared workspace, one stage per device, the
    uploaded weights, and the layout each run gets."""

    model: Model
    gplan: ort_memplan.GraphPlan
    slots: dict[tuple[int, int], int]
    stages: dict[str, DeviceMemoryStage]
    static: bool
    planned_shapes: dict[str, tuple[int, ...]]  # inputs whose planned shape is concrete
    input_limits: dict[str, tuple[Any, ...]]  # every input's planned shape (symbolic extents unchecked)
    buffers: ort_memplan.ExecutionBuffers | None
    options: SessionOptions
    node_names: list[str]
    device_of_value: dict[str, str]
    device_of_node: dict[int, str]
    kernels: Mapping[int, Any]
    device_weights: DeviceWeights = attrs.field(factory=DeviceWeights)
    streaming: Any = None  # _streaming.StreamingPlan (None: no streamed layers); its slots are run-long blocks
    prepacked: dict[str, int] = attrs.field(factory=dict)  # device -> bytes of pre-packed weights (in `weights`)
    released: dict[str, int] = attrs.field(factory=dict)  # device -> bytes of weights read packed only (not counted)
    dropped: frozenset[str] = frozenset()  # initializers released after packing: their consumers get no value
    cache: ort_memplan.PatternCache = attrs.field(factory=ort_memplan.PatternCache)
    _slot_ids: dict[int, list[int]] = attrs.field(factory=dict, alias="slot_ids")
    _value_blocks: dict[str, tuple[str, int, int]] | None = attrs.field(default=None, alias="value_blocks")
    _traced: dict[Any, TracedPattern] = attrs.field(factory=dict, alias="traced")
    _within: dict[tuple, bool] = attrs.field(factory=dict, alias="within")  # feed shapes -> promise kept, `_within_plan`
    _inplace: dict[str, tuple[str, ...]] | None = attrs.field(default=None, alias="inplace")  # made once
    _declared_for: Any = attrs.field(default=None, alias="declared_for")  # the plan key of the kernels' declarations

    def __attrs_post_init__(self) -> None:
        for node_index, slot_id in self.gplan.slot_requests:
            self._slot_ids.setdefault(node_index, []).append(slot_id)
        self._declared_for = self.gplan  # initialization declared every kernel's workspace for the static plan

    def declare_for(self, layout: Any) -> None:
        """Declare each kernel's workspace again for `layout`'s shapes when the kernels' last declarations were
        for another layout. A kernel keeps its last declaration and sizes its workspace requests by it, so after a
        trace of other feed shapes a run on an earlier pattern, or on the static plan, would ask for more (or less)
        than the blocks planned for it, and take scratch (in a replay: stop it). An identity check per run."""
        key = layout.plan_key() if isinstance(layout, PlannedLayout | CachedLayout) else None
        if key is None or key is self._declared_for:
            return
        nodes = {n.index: n for n in self.model.graph.nodes}
        if isinstance(layout, CachedLayout):
            for index, shapes in layout.pattern.declared.items():
                if index in nodes:
                    ort_abi.declare_workspace(self.kernels[index], shapes, node=nodes[index].name)
        else:
            for index in self._slot_ids:
                if index in nodes:
                    declared_slots(nodes[index], self.kernels[index])
        self._declared_for = key

    @property
    def inplace_candidates(self) -> dict[str, tuple[str, ...]]:
        """output -> the inputs a traced pattern may write it over (`ort_memplan.inplace_candidates`, in the plan's
        execution order)."""
        if self._inplace is None:
            steps = self.gplan.activations.node_steps
            order = sorted(self.model.graph.nodes, key=lambda n: steps.get(n.index, len(steps)))
            self._inplace = ort_memplan.inplace_candidates(self.model.graph, order, self.device_of_value)
        return self._inplace

    # -- views of the stages (the names callers used before the stages existed) ----------------------
    @property
    def weights(self) -> dict[str, int]:
        return {d: s.weights for d, s in self.stages.items() if s.weights}

    @property
    def allocators(self) -> dict[str, ort_abi.Allocator]:
        """Devices with their own memory -> their allocator."""
        return {d: s.allocator for d, s in self.stages.items() if s.allocator is not None}

    def allocator_of_node(self) -> dict[int, ort_abi.Allocator]:
        """Node index -> its device's allocator, for the nodes on a device with its own memory (the executor's)."""
        return {i: self.stages[d].allocator for i, d in self.device_of_node.items()
                if d in self.stages and self.stages[d].allocator is not None}

    @property
    def device_budgets(self) -> dict[str, int]:
        """Per device with a budget: what it leaves for activations and workspace."""
        return {d: s.activation_budget for d, s in self.stages.items() if s.activation_budget is not None}

    @property
    def holds_promise(self) -> bool:
        """Device budgets or pre-allocated buffers: runs must fit what was planned, so larger feeds are refused."""
        return self.buffers is not None or any(s.budget is not None for s in self.stages.values())

    def close(self) -> None:
        """Free the pre-allocated buffers and the device weights (each exactly once)."""
        if self.buffers is not None:
            self.buffers.close()
        for stage in self.stages.values():
            stage.release_host()
        self.device_weights.close()

    def device_usage(self) -> dict[str, dict[str, int | None]]:
        """Per device with its own memory, measured by its allocator: bytes in use now, the peak since
        the session started, and the capacity it is held to (its budget, None when unlimited)."""
        return {d: s.usage(self.device_weights) for d, s in sorted(self.stages.items()) if s.allocator is not None}

    def device_totals(self) -> dict[str, dict[str, int]]:
        """Per device: weights, peak of activations + workspace (planned), workspace declared, total. The
        weight-streaming slots are run-long blocks of the plan: in the peak, and shown apart as well."""
        out: dict[str, dict[str, int]] = {}
        ws: dict[str, int] = {}
        for req in self.gplan.slot_requests.values():
            ws[req.device] = max(ws.get(req.device, 0), req.nbytes)
        weights = self.weights
        slots = {d: s.streaming_slots for d, s in self.stages.items() if s.streaming_slots}
        for device in sorted(set(weights) | set(self.gplan.plan.peak) | set(slots)):
            peak = self.gplan.plan.peak.get(device, 0)
            out[device] = {"weights": weights.get(device, 0), "peak_activations_and_workspace": peak,
                           "largest_workspace": ws.get(device, 0), "lower_bound": self.gplan.lower_bound.get(device, 0),
                           "streaming_slots": slots.get(device, 0),
                           "prepacked_weights": self.prepacked.get(device, 0),
                           "released_weights": self.released.get(device, 0),
                           "workspace_layout": self.gplan.workspace_layout.get(device, "packed"),
                           "total": weights.get(device, 0) + peak}
        return out

    def declared_workspace(self, node: Node, args: Sequence[Any]) -> dict[int, int]:
        """Slot id -> bytes the node's kernel declares (Level 2) for this run's input shapes: what strict
        workspace verification holds its runtime requests to."""
        slots = ort_abi.declare_workspace(self.kernels[node.index], workspace_shapes(node, args), node=node.name)
        return {slot.slot_id: slot.size_bytes for slot in slots or ()}

    # -- what a run gets --------------------------------------------------------------------------
    def _check_promise(self, shapes: Mapping[str, tuple[int, ...] | None]) -> None:
        """Refuse a feed of another rank or larger than its planned shape (extents the plan left symbolic
        are not checked): the budgets and buffers were planned for those shapes, not for larger ones."""
        for name, planned in self.input_limits.items():
            got = shapes.get(name)
            if got is None:
                continue  # sequences / optional values: data-dependent, not planned
            if len(got) == len(planned) and not any(isinstance(p, int) and g > p for g, p in zip(got, planned)):
                continue
            if self.buffers is not None:
                why = ("pre-allocated its execution buffers" if self.options.pre_allocate else
                       f"pre-allocated its static workspace with the activations ({STATIC_WORKSPACE})")
            else:
                why = f"holds device budgets {sorted(d for d, s in self.stages.items() if s.budget is not None)!r}"
            rank = "" if len(got) == len(planned) else f" (rank {len(got)}, planned rank {len(planned)})"
            raise FeedExceedsPlanError(
                f"input {name!r} has shape {got!r}{rank}, larger than the planned maximum {planned!r}; this session "
                f"{why} and promises that runs fit the memory it planned, which holds only for feeds no larger than "
                "the planned shapes, so the run is refused before any kernel runs. Plan for the largest shapes you "
                f"run, e.g. max_shapes={{{name!r}: {list(got)!r}}} (ortrun: --max-shape "
                f"{ort_graph.format_shape(name, got)}) or free_dimension_overrides (ortrun: --dim NAME=N)",
                input_name=name, shape=got, planned=planned)

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
        key = tuple(shapes.items())
        within = self._within.get(key)  # shapes seen before: the promise held for them, and they fit or not
        if within is None:
            if self.holds_promise:
                self._check_promise(shapes)
            within = self._within_plan(shapes)
            if len(self._within) >= 16:  # a few shape keys; runs may share the dict
                self._within.pop(next(iter(self._within), None), None)
            self._within[key] = within
        strict_buffers = self.options.pre_allocate  # static workspace pre-allocation keeps a counted fallback:
        if self.static and within:  # other shapes are traced and cached, like without it
            strict = strict_buffers
            name = "pre-allocated" if strict else "static workspace" if self.buffers is not None else "static plan"
            if self._value_blocks is None:
                self._value_blocks = value_blocks(self.gplan)
            return PlannedLayout(self.gplan, self.buffers, self.stages,
                                 self.node_names if self.gplan.plan.red_zone else None,
                                 name=name, slot_ids=self._slot_ids, strict=strict, blocks=self._value_blocks)
        if self.buffers is not None and strict_buffers:
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
            return CachedLayout(cached, self._traced[key], self.stages)

        def done(pattern: TracedPattern) -> None:
            self._traced[key] = pattern
            self._declared_for = pattern  # the trace declared every kernel for its shapes

        self._declared_for = None  # the trace declares each kernel for its shapes as it runs: no layout's meanwhile
        return TracingLayout(self.cache.trace(key), TracedPattern(), self.device_of_value, self.device_of_node,
                             self.kernels, done, stages=self.stages, inplace=self.inplace_candidates)


def _weights_per_device(model: Model, device_of_node: Mapping[int, str], memory_types: Any,
                        streamed: set[str] | frozenset[str] = frozenset()) -> dict[str, int]:
    """Bytes of the weights each device holds; streamed weights stay on the host (their slots count apart)."""
    graph = model.graph
    per_device = weight_names_per_device(graph, device_of_node, memory_types, HOST)
    bodies = graph_body_weights(graph) if any(names - graph.initializers.keys() for names in per_device.values()) else {}
    return {d: sum(weight_nbytes(graph, n, bodies) for n in names if d == HOST or n not in streamed)
            for d, names in per_device.items()}


def streaming_blocks(streaming: Any) -> dict[str, tuple[str, int]]:
    """The weight-streaming slots as run-long blocks of the device's plan: key -> (device, bytes)."""
    if streaming is None or not streaming.layers:
        return {}
    return {key: (streaming.device, streaming.slot_bytes) for key in streaming.slot_keys}


def declared_slots(node: Node, kernel: Any) -> tuple[tuple[int, int], ...]:
    """(slot id, bytes) of each workspace slot `kernel` declares for `node`'s resolved input shapes;
    none while a shape is unresolved (declared per shape key when a run traces them)."""
    shapes = ort_abi.workspace_input_shapes(node)
    if not all(s.is_static for s in shapes if s.present):
        return ()
    return tuple((slot.slot_id, slot.size_bytes)
                 for slot in ort_abi.declare_workspace(kernel, shapes, node=node.name) or ())


def plan_memory(model: Model, order: Sequence[Node], kernels: Mapping[int, Any], placement: Any,
                providers: Sequence[Any], options: SessionOptions, algorithm: str = "auto",
                allocate: bool = True, streaming: Any = None,
                declared: Callable[[Node], Sequence[tuple[int, int]]] | None = None,
                packs: Callable[[Node], tuple[tuple[int, int], ...]] | None = None,
                releases: Callable[[int], bool] | None = None) -> SessionMemory:
    """The session's memory plan and its stages; with `allocate`, also what initialization allocates:
    devices with their own memory held to their budgets, weights uploaded, buffers pre-allocated (when
    asked). Auto-fit trials plan without allocating. `declared(node)` gives the node's workspace slots
    (default: `declared_slots` of its kernel; auto-fit trials pass their per-(node, provider) cache); `packs(node)`
    likewise its pre-packed constant inputs, (input index, bytes) (default: `node_prepacked` of its kernel), and
    `releases(node index)` whether its kernel computes without them (default: `releases_packed` of its kernel)."""
    graph = model.graph
    device_by_ep = {p.name: p.device for p in providers}
    device_of_node = {n.index: device_by_ep.get(placement.ep_of[n.index], "cpu") for n in graph.nodes}
    allocators = device_allocators(providers)
    # pre-packed constant weights (host memory only): the node's weights, counted before the budget check; asked
    # before the workspace, which a packed input may make smaller (no per-call packing)
    packs = packs if packs is not None else (lambda node: node_prepacked(graph, node, kernels[node.index]))
    host_nodes = {i for i, d in device_of_node.items() if d not in allocators}
    packed = prepacked_bytes(order, packs, host_nodes)
    slots: dict[tuple[int, int], int] = {}
    for node in order:
        node_slots = declared(node) if declared is not None else declared_slots(node, kernels[node.index])
        for slot_id, size in node_slots:
            slots[(node.index, slot_id)] = size
    memory_types = memory_types_of(providers)
    value_device: dict[str, str] = {}
    for node in order:
        host_outputs = memory_types(node)[1]
        for k, o in enumerate(node.outputs):
            if o:
                value_device[o] = HOST if k in host_outputs else device_of_node[node.index]
    gplan = ort_memplan.plan_graph(graph, order, lambda n: device_of_node[n.index], workspace=slots,
                                   red_zone=red_zone_bytes(options) if allocate else 0, algorithm=algorithm,
                                   input_device=HOST, value_devices=value_device,
                                   run_long=streaming_blocks(streaming))
    inputs = [n for n in graph.inputs if n not in graph.initializers]
    input_limits = {n: tuple(graph.values[n].shape) for n in inputs if graph.values[n].shape is not None}
    planned_shapes = {n: s for n, s in input_limits.items() if is_static(s)}
    static = not gplan.activations.unknown_sizes and len(planned_shapes) == len(inputs)
    streamed = streaming.weight_names if streaming is not None else frozenset()
    weights = _weights_per_device(model, device_of_node, memory_types, streamed)
    budgets = {device_by_ep[ep]: b for ep, b in placement.result.budgets.items() if ep in device_by_ep}
    prepacked = packed_per_device(packed, device_of_node)
    for device, nbytes in prepacked.items():
        weights[device] = weights.get(device, 0) + nbytes
    releases = releases if releases is not None else (lambda index: releases_packed(kernels[index]))
    release = releasable(graph, packed, releases, host_nodes, streamed) if packed else {}
    released = released_per_device(graph, release, device_of_node)
    for device, nbytes in released.items():  # read from their packed copies alone: not held
        weights[device] -= nbytes
    stages = {d: DeviceMemoryStage(d, budgets.get(d), weights.get(d, 0), gplan.plan.peak.get(d, 0), allocators.get(d),
                                   retain_host=options.enable_cpu_mem_arena)
              for d in sorted(set(weights) | set(gplan.plan.peak) | set(budgets) | set(allocators))}
    if streaming is not None and streaming.layers:
        stages.setdefault(streaming.device, DeviceMemoryStage(streaming.device, budgets.get(streaming.device), 0, 0,
                                                              allocators.get(streaming.device)))
        stages[streaming.device].streaming_slots = streaming.slot_total
    if allocate:  # before anything is allocated (auto-fit trials only compare totals)
        can_run = all(getattr(p, "can_run", True) for p in providers if p.device in budgets)  # else plan-only
        check_budgeted_values_planned(graph, gplan.activations.unknown_sizes, value_device, budgets,
                                      allow=_truthy(options.get(ALLOW_UNPLANNED_SHAPES) or "0", ALLOW_UNPLANNED_SHAPES),
                                      can_run=can_run)
        check_plan_within_budgets(stages, can_run=can_run, detail=lambda d: largest_blocks_text(gplan, graph, d))
        if streaming is not None and streaming.layers and not static:
            raise InvalidOptionError(
                f"{len(streaming.layers)} decoder layers stream their weights through slots planned with the "
                f"activations, which needs static shapes, but {len(gplan.activations.unknown_sizes)} value(s) "
                f"have unknown sizes, e.g. {list(gplan.activations.unknown_sizes)[:5]!r}; set "
                "free_dimension_overrides or max_shapes (ortrun: --dim NAME=N, --max-shape INPUT=[d0,...]), or "
                f"session.weight_streaming='off'{_open_dims(graph)}")
    device_weights, buffers = _allocate(graph, order, device_of_node, stages, gplan, static, options,
                                        memory_types, streaming) if allocate else (DeviceWeights(), None)
    dropped: frozenset[str] = frozenset()
    if allocate and packed:
        try:
            dropped = frozenset(prepack_weights(graph, order, kernels, packed, release))
        except Exception:
            device_weights.close()  # initialization fails: nothing stays allocated
            if buffers is not None:
                buffers.close()
            raise
    return SessionMemory(streaming=streaming, model=model, gplan=gplan, slots=slots, stages=stages, static=static,
                         planned_shapes=planned_shapes, input_limits=input_limits, buffers=buffers, options=options,
                         node_names=[n.name for n in order], device_of_value=value_device,
                         device_of_node=device_of_node, kernels=kernels, device_weights=device_weights,
                         prepacked=prepacked, released=released, dropped=dropped)


def _allocate(graph: Any, order: Sequence[Node], device_of_node: Mapping[int, str],
              stages: Mapping[str, DeviceMemoryStage], gplan: ort_memplan.GraphPlan, static: bool,
              options: SessionOptions, memory_types: Any, streaming: Any = None,
              ) -> tuple[DeviceWeights, ort_memplan.ExecutionBuffers | None]:
    """What initialization allocates, all or nothing: each device held to its budget, the weights uploaded
    once and (when asked) the pre-allocated buffers (the weight-streaming slots are blocks of them, or of
    each run's buffer)."""
    for stage in stages.values():
        stage.hold_to_budget()
    allocators = {d: s.allocator for d, s in stages.items() if s.allocator is not None}
    streamed = streaming.weight_names if streaming is not None else frozenset()
    try:
        device_weights = DeviceWeights.upload(graph, order, device_of_node, allocators, memory_types, streamed)
    except ort_abi.AllocationError as e:
        raise device_memory_error("the weights", stages, e) from e

    def undo() -> None:
        device_weights.close()

    key = PRE_ALLOCATE if options.pre_allocate else STATIC_WORKSPACE if options.flag(STATIC_WORKSPACE) else None
    if key is None:
        return device_weights, None
    if not static:
        undo()
        unknown = list(gplan.activations.unknown_sizes)[:5]
        origin = ort_graph.first_unresolved_node(graph)  # a node whose outputs no inference resolved
        if origin is not None and not ort_graph.has_shape_rule(origin):  # an op no rule knows: not a --dim matter
            raise InvalidOptionError(
                f"{key} needs static shapes, but {len(gplan.activations.unknown_sizes)} value(s) have unknown sizes, "
                f"e.g. {unknown!r}, because {ort_graph.unresolved_hint(origin)}")
        dims = ("set free_dimension_overrides for the model's symbolic dimensions (ortrun: --dim NAME=N) or max_shapes "
                "(ortrun: --max-shape INPUT=[d0,...])" if ort_graph.symbolic_inputs(graph) or origin is None
                else "every input is sized")
        raise InvalidOptionError(
            f"{key} needs static shapes, but {len(gplan.activations.unknown_sizes)} "
            f"value(s) have unknown sizes, e.g. {unknown!r}; {dims}"
            + _open_dims(graph) + (f"; {ort_graph.unresolved_hint(origin)}" if origin is not None else ""))
    budgets = {d: s.activation_budget for d, s in stages.items() if s.activation_budget is not None}
    try:
        return device_weights, gplan.buffers(arenas(gplan.plan.peak, stages), budgets)
    except Exception as e:
        undo()
        if isinstance(e, ort_abi.AllocationError):
            raise device_memory_error("the pre-allocated buffers", stages, e) from e
        raise


def _open_dims(graph: Any) -> str:
    """`; ` and each input's dynamic axes left open with the flag that fixes them, or '' when none is."""
    hint = ort_graph.dynamic_dims_hint(graph)
    return f"; {hint}" if hint else ""
