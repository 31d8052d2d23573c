"""The run loop: nodes in planned order; outputs placed by a Layout (planned offsets, a traced
pattern, or fresh arrays), workspace served from the plan or counted scratch.

Nodes on a device with its own memory (`allocators`) read and write `ort_abi.DeviceTensor`s: their
weights were uploaded once (`weights`), their outputs live in the device's planned arena, and an
unplanned output or scratch buffer is a counted device allocation freed when its value dies (or
when the run ends or fails: a run never leaves device memory behind).

A `strict` layout (pre-allocated execution buffers) allows no allocation at all: an output without a
planned block, a scratch buffer (a kernel without a workspace declaration, or asking for more than it
declared) is an `UnplannedAllocationError` raised at that node, naming what it asked for and what was
planned; the run ends there and the buffers are free for the next run."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

import ort_abi
from ort_graph import Graph, Node

from ._errors import DeviceMemoryError, InvalidInputError, SessionError
from ._fast_steps import FastRun, FastSteps
from ._run_types import FreshArrays, Kernel, Layout, RunStats
from ._run_values import NodeFacts, RunValues, check_produced, host_copy, host_readable, raise_failure
from ._strict import Refusals
from ._traced import traced_peak


@attrs.define(eq=False)
class Executor:
    graph: Graph
    order: Sequence[Node]
    kernels: Mapping[int, Kernel]  # node index -> kernel
    last_stats: RunStats = attrs.field(factory=RunStats)
    recorder: Any = None  # ort_partition.NodeStatsRecorder: per-node memory in ONNX Runtime's CSV format
    allocators: Mapping[int, ort_abi.Allocator] = attrs.field(factory=dict)  # node index -> its device's memory
    weights: Any = None  # _device_memory.DeviceWeights: device copies of the weights device nodes read
    host_outputs: Mapping[int, tuple[int, ...]] = attrs.field(factory=dict)  # device nodes' outputs made on the host
    # strict workspace verification: (node, its inputs this run) -> slot id -> bytes the kernel declares for them
    declared_workspace: Callable[[Node, Sequence[Any]], Mapping[int, int]] | None = None
    capture: Any = None  # _capture.GraphCapture: the first pre-allocated run captures its region, later ones replay
    streamer: Any = None  # _streaming_run.WeightStreamer: streamed layers' weights copied into device slots
    released: frozenset[str] = frozenset()  # initializers dropped once packed: their consumers get None for them
    _release: dict[int, tuple[str, ...]] = attrs.field(factory=dict, alias="release")  # step -> names dying there
    _facts: dict[int, NodeFacts] = attrs.field(factory=dict, alias="facts")  # what _step needs per node, made once
    # the planned (shape, type) of each node's outputs that kernels' requests are checked against: exact
    # when the feeds have the planned input shapes, else rank and type only (smaller runs, max_shapes)
    _planned: dict[bool, dict[int, list[Any]]] = attrs.field(factory=dict, alias="planned")
    # this thread's run: output name -> the DeviceTensor (or Allocator) it is bound to on the device
    _bound: threading.local = attrs.field(factory=threading.local, init=False)
    # the C step runner's steps per plan (`Layout.plan_key`): id -> (key, its steps or None)
    _fast_cache: dict[int, tuple[Any, FastSteps | None]] = attrs.field(factory=dict, init=False)
    _exact: dict[tuple, bool] = attrs.field(factory=dict, init=False)  # feed shapes -> the planned input shapes
    _release_spans: dict[tuple[int, int], list[tuple[int, str]]] = attrs.field(factory=dict, init=False)
    _fast_lock: threading.Lock = attrs.field(factory=threading.Lock, init=False)

    def __attrs_post_init__(self) -> None:
        self._planned = {True: {}, False: {}}
        shared: dict[Any, Any] = {}  # equal per-node facts are one object (a model's layers repeat them)
        values = self.graph.values
        reads, out_types = {}, {}  # node index -> inputs + implicit, its outputs' element types
        for node in self.order:  # per-node facts every run needs, computed once
            exact = _shared(shared, tuple(ort_abi.planned_outputs(node)))
            self._planned[True][node.index] = exact
            self._planned[False][node.index] = _shared(
                shared, tuple((None if s is None else (None,) * len(s), t) for s, t in exact))
            inputs = (("" if n in self.released else n for n in node.inputs) if self.released else node.inputs)
            reads[node.index] = _shared(shared, (*inputs, *node.implicit_inputs()))
            out_types[node.index] = _shared(shared, tuple(values[o].dtype if o and o in values else 0
                                                          for o in node.outputs))
        read = {n for names in reads.values() for n in names if n} | set(self.graph.outputs)
        for node in self.order:
            self._facts[node.index] = NodeFacts(node, reads[node.index], out_types[node.index], read)
        last_use: dict[str, int] = {}
        for step, node in enumerate(self.order):
            for name in reads[node.index]:
                if name:
                    last_use[name] = step
        keep = set(self.graph.outputs) | set(self.graph.initializers)
        release: dict[int, list[str]] = {}
        for name, step in last_use.items():
            if name not in keep:
                release.setdefault(step, []).append(name)
        self._release = {step: tuple(names) for step, names in release.items()}

    def run(self, feeds: Mapping[str, Any], outputs: Sequence[str], layout: Layout | None = None,
            progress: Callable[[int, int], None] | None = None, measure: bool = False,
            device_outputs: Mapping[str, Any] | None = None, started: Callable[[], None] | None = None) -> list[Any]:
        """`measure`: count the numpy data buffers kernels allocate during the node loop into
        `last_stats.traced_bytes` (and per node, `traced_nodes`; `_traced` says how).
        A feed may be an `ort_abi.DeviceTensor` (a device-bound input): its boundary copy reads it on the
        device. `device_outputs`: output name -> a DeviceTensor to copy it into, or the Allocator of a new
        one: that output's MemcpyToHost is replaced by one device-to-device copy, and the device tensor is
        returned (the caller owns it)."""
        layout = layout or FreshArrays()
        stats = RunStats(layout=layout.name)
        counters = ort_abi.ContextCounters()
        owned: dict[str, ort_abi.DeviceBuffer] = {}  # unplanned device outputs, freed when their value dies
        planned = self._planned[self._exact_shapes(feeds)]
        streaming = self.streamer.hold() if self.streamer is not None else contextlib.nullcontext()
        fast = None
        with streaming, layout.hold(stats):
            try:
                if self.streamer is not None:  # the slots are blocks of this run's buffers
                    self.streamer.begin_run(layout)
                # weights read when a kernel first asks; streamed ones never (the streamer gives their slots)
                values: dict[str, Any] = RunValues(self.graph.initializers,
                                                  self.streamer.where if self.streamer is not None else {},
                                                  private=getattr(layout, "guarded", False))
                self._bound.outputs, self._bound.fresh = dict(device_outputs or {}), []
                for name, arr in feeds.items():
                    if isinstance(arr, ort_abi.DeviceTensor):
                        values[name] = arr  # bound on the device: the caller's memory, not a planned block
                        continue
                    # read where the caller holds it; copied into its block for a captured graph (fixed addresses)
                    placed = layout.place(name, arr, copy=self.capture is not None)
                    values[name] = arr if placed is None else placed
                fast = None if measure else self._open_fast(layout, planned, values, stats, counters, owned)
                with traced_peak() if measure else contextlib.nullcontext() as traced:
                    total = len(self.order)
                    capture = self.capture if layout.strict else None  # fixed addresses: pre-allocated buffers
                    fast_steps = fast.fast.steps if fast is not None else ()
                    compute = fast.run.compute if fast is not None else None
                    # consecutive C steps in one call into C, unless something must see every step (progress,
                    # RunOptions.terminate: between every two nodes)
                    ends = fast.fast.table.ends if fast is not None and progress is None else None
                    release = self._release
                    order, step = self.order, 0
                    if started is not None:  # the profiler: the first node's time starts here
                        started()
                    while step < total:
                        node = order[step]
                        if ends is not None and step in ends:
                            end = ends[step]
                            done = fast.run.compute_range(step, end - step)
                            stats.nodes_run += done
                            stats.c_steps += done
                            self._release_dead(step, values, layout, owned, stop=step + done)
                            step += done
                            if step == end:
                                continue
                            node = order[step]  # computed, and ended otherwise: finished as below
                            self._fast_step(fast, step, node, values, layout, stats, counters, owned,
                                            planned[node.index])
                        elif step in fast_steps:
                            if compute(step) == ort_abi.STEP_DONE and fast.pending is None:  # all answered in C
                                stats.nodes_run += 1
                                stats.c_steps += 1
                                if step in release:
                                    self._release_dead(step, values, layout, owned)
                            else:
                                self._fast_step(fast, step, node, values, layout, stats, counters, owned,
                                                planned[node.index])
                        elif capture is not None and step in capture.region:
                            self._captured_step(capture, step, node, feeds, values, layout, stats, counters, owned,
                                                planned[node.index])
                        else:
                            self._step(step, node, values, layout, stats, counters, owned, planned[node.index])
                            if fast is not None and step in fast.fast.describe_after:
                                fast.describe(values, fast.fast.describe_after[step])
                        if traced is not None:
                            traced.node_done(node.name or f"{node.op_type}#{node.index}")
                        if progress is not None:
                            progress(step + 1, total)
                        step += 1
                if traced is not None:
                    stats.traced_bytes, stats.traced_by, stats.traced_nodes = traced.bytes, traced.by, traced.nodes
                    stats.traced_python_bytes = traced.python_bytes
                missing = [o for o in outputs if o not in values and o not in self.graph.initializers]
                if missing:
                    raise SessionError(f"outputs {missing!r} were not produced; the model's outputs are "
                                       f"{self.graph.outputs!r}")
                # planned blocks are reused by the next run: hand the caller its own copies
                bound = self._bound.outputs
                result, given = [], set()
                for o in outputs:  # C made a graph output in this run's own buffer: the caller's as it is
                    v = values[o]
                    own = o not in given and fast is not None and fast.owns(v)
                    result.append(v if o in bound or own else host_copy(v, stats))
                    given.add(o)
            except BaseException:
                fresh = self._bound.fresh
                for tensor in fresh:  # device outputs this run allocated are the caller's only on success
                    tensor.buffer.allocator.free(tensor.buffer)
                raise
            finally:
                if fast is not None:
                    stats.planned_values += fast.run.planned_values
                    counters.workspace_from_plan += fast.run.workspace_from_plan
                    fast.close()
                if self.streamer is not None:  # no copy is left in flight into buffers about to be released
                    self.streamer.end_run()
                self._bound.outputs, self._bound.fresh = {}, []
                for buf in owned.values():
                    buf.allocator.free(buf)
        stats.allocations += counters.allocations
        stats.workspace_from_plan = counters.workspace_from_plan
        stats.scratch_fallbacks = counters.scratch_fallbacks
        stats.scratch_bytes = counters.scratch_bytes
        if self.streamer is not None:
            stats.streamed_copies, stats.streamed_bytes = self.streamer.copies, self.streamer.bytes
            stats.streaming_timeline = self.streamer.timeline()
        stats.copied_outputs, stats.copied_bytes = counters.copied_outputs, counters.copied_output_bytes
        self.last_stats = stats
        return result

    def _exact_shapes(self, feeds: Mapping[str, Any]) -> bool:
        """Whether the run has the planned input shapes (the plan's shapes are then exact), once per feed shapes."""
        key = tuple((n, a.shape if isinstance(a, np.ndarray) else None) for n, a in feeds.items())
        exact = self._exact.get(key)
        if exact is None:
            exact = all(np.ndim(a) == len(s) and all(not isinstance(d, int) or d == x for d, x in zip(s, np.shape(a)))
                        for n, a in feeds.items()
                        if isinstance(a, np.ndarray) and (s := self.graph.values[n].shape) is not None)
            if len(self._exact) >= 16:  # a few shape keys; runs may share the dict
                self._exact.pop(next(iter(self._exact), None), None)
            self._exact[key] = exact
        return exact

    def _open_fast(self, layout: Layout, planned: Mapping[int, list[Any]], values: RunValues, stats: RunStats,
                   counters: ort_abi.ContextCounters, owned: dict[str, ort_abi.DeviceBuffer]) -> FastRun | None:
        """This run's use of the C step runner (`_fast_steps`), or None: the run is not on the static plan's
        host buffers, or something watches every step (a red-zone guard, a recorder, weight streaming,
        device graph capture, workspace verification)."""
        plan_key = getattr(layout, "plan_key", None)
        watched = (self.recorder, self.streamer, self.capture, self.declared_workspace)
        if (plan_key is None or os.environ.get(NO_C_STEPS_ENV) == "1" or layout.run_buffers() is None
                or any(w is not None for w in watched)):
            return None
        key = plan_key()
        with self._fast_lock:
            cached = self._fast_cache.get(id(key))
            if cached is None or cached[0] is not key:
                if len(self._fast_cache) >= 8:  # a few shape keys at a time (each traced pattern has its offsets)
                    self._fast_cache.pop(next(iter(self._fast_cache)))
                cached = self._fast_cache[id(key)] = (key, FastSteps.build(self, layout))
        if cached[1] is None:
            return None

        def make_context(step: int) -> tuple[Any, Any]:
            node = self.order[step]
            args = [values[n] if n else None for n in self._facts[node.index].reads]
            return self._context(step, node, args, layout, stats, counters, owned, planned[node.index], None)

        fast = FastRun.open(cached[1], layout, planned is self._planned[True], make_context)
        if fast is not None:
            values.fast = fast
            fast.describe(values, [(n, e) for n in values if (e := cached[1].ids.get(n)) is not None])
        return fast

    def _fast_step(self, fast: FastRun, step: int, node: Node, values: dict[str, Any], layout: Layout,
                   stats: RunStats, counters: ort_abi.ContextCounters, owned: dict[str, ort_abi.DeviceBuffer],
                   planned: list[Any]) -> None:
        """The end of a step the C step runner did not finish alone: it ran in Python (its inputs were not
        described in C; its outputs are described for the steps after it), C deferred to its Python context,
        or the kernel failed."""
        rc, status = fast.run.last, fast.run.status
        ctx, refusals = fast.take_pending()
        if rc == ort_abi.STEP_NOT_STARTED:
            self._step(step, node, values, layout, stats, counters, owned, planned)
            names = fast.fast.described_after(step)
            if names:
                fast.describe(values, names)
            return
        if rc == ort_abi.STEP_FAILED or ctx is not None:  # C deferred to Python, or the kernel failed
            view = fast.run.python_view
            try:
                ort_abi.check_compute(status, ctx, node=node.name, library=fast.fast.table.kernels[step].library)
                if refusals is not None:
                    refusals.raise_first()
            except Exception as e:
                raise_failure(node, e, refusals)
            finally:
                if ctx is not None:
                    ctx.close()
                    view.close()
            for name, arr in zip(node.outputs, ctx.outputs if ctx is not None else ()):
                if name and arr is not None:
                    values[name] = arr
        facts = self._facts[node.index]
        if facts.needed:  # STEP_INCOMPLETE: an output C did not publish is Python's, or was never produced
            check_produced(node, facts, lambda j, name: name in values)
        stats.nodes_run += 1
        stats.c_steps += 1
        if step in self._release:
            self._release_dead(step, values, layout, owned)

    def _captured_step(self, capture: Any, step: int, node: Node, feeds: Mapping[str, Any], values: dict[str, Any],
                       layout: Layout, stats: RunStats, counters: ort_abi.ContextCounters,
                       owned: dict[str, ort_abi.DeviceBuffer], planned: list[Any]) -> None:
        """A step inside the captured region: replayed (the graph launches at the region's first step),
        or run while the provider records it (begun at the first step, ended after the last)."""
        if capture.replaying:
            if step == capture.region.start:
                capture.replay(values)
                stats.graph = "replayed"
            self._release_dead(step, values, layout, owned)
            return
        if step == capture.region.start:
            capture.begin(feeds)
        try:
            self._step(step, node, values, layout, stats, counters, owned, planned)
        except Exception as e:
            refusal = capture.abort(e, node) if capture.capturing else None
            if refusal is not None:
                raise refusal from e
            raise
        if step == capture.region.stop - 1:
            try:
                capture.end(values, self.order)
            except Exception as e:
                refusal = capture.abort(e, node) if capture.capturing else None
                if refusal is not None:
                    raise refusal from e
                raise
            stats.graph = "captured"

    def _release_dead(self, step: int, values: dict[str, Any], layout: Layout,
                      owned: dict[str, ort_abi.DeviceBuffer], stop: int | None = None) -> None:
        """Values whose last reader was this step (each of steps [step, stop)): released (their planned block,
        or their own buffer)."""
        if stop is None:
            dead = [(step, name) for name in self._release.get(step, ())]
        else:  # a span of C steps: its (step, name) pairs listed once per span (spans repeat every run)
            dead = self._release_spans.get((step, stop))
            if dead is None:
                dead = [(s, name) for s in range(step, stop) for name in self._release.get(s, ())]
                if len(self._release_spans) < 256:
                    self._release_spans[(step, stop)] = dead
        for s, name in dead:
            if values.pop(name, None) is not None:
                layout.release(s, name)
                buf = owned.pop(name, None)
                if buf is not None:
                    buf.allocator.free(buf)

    def _record(self, node: Node, args: list[Any], outputs: list[Any], temp: int) -> None:
        from ort_partition import NodeAllocationStats

        def size(x: Any) -> int:
            return int(x.nbytes) if isinstance(x, np.ndarray | np.generic | ort_abi.DeviceTensor) else 0

        inits = self.graph.initializers
        names = list(node.inputs) + node.implicit_inputs()
        self.recorder.report(node.name, NodeAllocationStats(
            input_sizes=sum(size(a) for n, a in zip(names, args) if n and n not in inits),
            initializers_sizes=sum(inits[n].nbytes for n in set(names) if n in inits),
            total_dynamic_sizes=sum(size(o) for o in outputs), total_temp_allocations=temp))

    def _step(self, step: int, node: Node, values: dict[str, Any], layout: Layout, stats: RunStats,
              counters: ort_abi.ContextCounters, owned: dict[str, ort_abi.DeviceBuffer], planned: list[Any]) -> None:
        index = node.index
        facts = self._facts[index]
        kernel = self.kernels[index]
        args = [values[n] if n else None for n in facts.reads]
        weights = self.weights
        if weights is not None:
            for position, tensor in weights.args.get(index, ()):
                if position < len(args):
                    args[position] = tensor
                else:  # a weight inside the node's subgraphs: read after its inputs (ops_control)
                    args.append(tensor)
        streamer = self.streamer
        if streamer is not None:
            streamer.before_node(step, node, args)
        device = self.allocators.get(index) if self.allocators else None
        copy = facts.copy
        if copy and facts.to_host and node.outputs[0] in getattr(self._bound, "outputs", {}):
            self._keep_on_device(step, node, args[0], values, layout, stats, owned)
            return
        if device is None and not copy:
            for position, a in enumerate(args):
                if isinstance(a, ort_abi.DeviceTensor):
                    args[position] = host_readable(a, node, stats)
        ctx, refusals = self._context(step, node, args, layout, stats, counters, owned, planned, device)
        layout.before_step(step, node, args)
        scratch_before = counters.scratch_bytes
        try:
            kernel.compute(ctx)
            if refusals is not None:
                refusals.raise_first()  # a kernel that swallowed the refusal still ran outside the plan
        except Exception as e:
            raise_failure(node, e, refusals)
        finally:
            ctx.close()  # device scratch buffers go back at once
        produced = ctx.outputs
        if facts.needed:
            check_produced(node, facts, lambda j, name: j < len(produced) and produced[j] is not None)
        for name, arr in zip(facts.outputs, produced):
            if name:
                values[name] = arr
        if copy and produced:
            stats.count_copy(args[0], produced[0])
        layout.after_step(step, node)
        if streamer is not None:
            streamer.after_node(step)
        if self.recorder is not None:
            self._record(node, args, produced, counters.scratch_bytes - scratch_before)
        if step in self._release:
            self._release_dead(step, values, layout, owned)
        stats.nodes_run += 1

    def _context(self, step: int, node: Node, args: list[Any], layout: Layout, stats: RunStats,
                 counters: ort_abi.ContextCounters, owned: dict[str, ort_abi.DeviceBuffer], planned: list[Any],
                 device: Any) -> tuple[ort_abi.KernelContext, Refusals | None]:
        """The node's KernelContext for this run (outputs placed by `layout`, workspace from it, scratch
        counted or, in a strict run, refused) and its Refusals (None outside strict runs)."""
        index = node.index
        facts = self._facts[index]
        workspace = layout.workspace(node, args)
        strict = layout.strict
        declared = (self.declared_workspace(node, args)
                    if self.declared_workspace is not None and not strict else None)
        refusals = (Refusals(node, workspace, outputs=strict, declared=declared, device=device)
                    if strict or declared is not None else None)
        outputs = facts.outputs
        host_outputs = self.host_outputs.get(index, ()) if device is not None else ()

        def allocate(index: int, shape: tuple[int, ...], dtype: np.dtype) -> Any:
            name = outputs[index] if index < len(outputs) else ""
            planned = layout.allocate(step, name, shape, dtype) if name else None
            if planned is not None:
                stats.planned_values += 1
                return planned
            if refusals is not None and refusals.refuses_outputs:
                refusals.output(index, name, shape, dtype, getattr(layout, "planned_nbytes", lambda n: None)(name))
            stats.allocations += 1
            if device is None or np.dtype(dtype).kind == "O" or index in host_outputs:
                return np.empty(shape, dtype)
            tensor = ort_abi.empty_tensor(device, shape, dtype)
            if name:
                previous = owned.pop(name, None)
                if previous is not None:
                    device.free(previous)
                owned[name] = tensor.buffer
            else:
                owned[f"#{node.index}:{index}"] = tensor.buffer
            return tensor

        ctx = ort_abi.KernelContext(args, output_count=len(outputs), output_types=facts.out_types,
                                    output_allocator=allocate, workspace=workspace, counters=counters,
                                    node_name=node.name, scratch_allocator=device if refusals is None else refusals,
                                    planned_outputs=planned)
        return ctx, refusals

    def _keep_on_device(self, step: int, node: Node, src: Any, values: dict[str, Any], layout: Layout,
                        stats: RunStats, owned: dict[str, ort_abi.DeviceBuffer]) -> None:
        """A graph output bound on the device: one device-to-device copy out of the planned block (reused by
        later steps and runs) into the bound tensor, or into a new one from the bound allocator."""
        name = node.outputs[0]
        target = self._bound.outputs[name]
        if not isinstance(src, ort_abi.DeviceTensor):
            raise SessionError(f"output {name!r} is made on the host by node {node.name!r}, not on a device: bind it "
                               "with bind_output(name) (host) instead of on a device")
        if not isinstance(target, ort_abi.DeviceTensor):
            try:
                target = ort_abi.empty_tensor(target, src.shape, src.dtype)
            except ort_abi.AllocationError as e:
                raise DeviceMemoryError(f"output {name!r} ({src.dtype}{list(src.shape)}) bound on the device does not "
                                        f"fit the device's budget: {e}; bind a smaller output or raise the budget") from e
            self._bound.outputs[name] = target
            self._bound.fresh.append(target)
        elif target.shape != src.shape or target.dtype != src.dtype:
            raise InvalidInputError(f"output {name!r} is {src.dtype}{list(src.shape)} but its bound device value is "
                                    f"{target.dtype}{list(target.shape)}; bind a value of that shape and type, or "
                                    "bind_output(name, device) to let the run allocate it")
        if src.nbytes:
            ort_abi.copy_device_to_device(src.buffer.view(0, src.nbytes), target.buffer.view(0, target.nbytes))
        stats.count_copy(src, target)
        values[name] = target
        layout.after_step(step, node)
        self._release_dead(step, values, layout, owned)
        stats.nodes_run += 1



NO_C_STEPS_ENV = "ORT_SESSION_NO_C_STEPS"  # set to 1: every step builds its Python context (no C step runner)


def _shared(cache: dict[Any, Any], facts: tuple) -> tuple:
    """`facts`, or the equal tuple seen before (one object for every node that has it); unhashable: as is."""
    try:
        return cache.setdefault(facts, facts)
    except TypeError:
        return facts
