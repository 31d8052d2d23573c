"""InferenceSession: load -> resolve shapes -> L1 -> layer assignment -> placement under budgets ->
Level-2 re-check -> boundary copies -> finalize (kernels, declared workspace) -> memory plan -> runs."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx

import ort_abi
import ort_graph
from ort_cpu_ep import CpuExecutionProvider, SimulatedGpuExecutionProvider
from ort_graph import Model

from . import _memory, _ort_api, _placement, _progress
from ._boundaries import insert_copies
from ._device_memory import memory_types_of
from ._ep_passes import run_ep_passes
from ._errors import (
    InvalidInputError,
    InvalidOptionError,
    MemoryProfileWriteWarning,
    SessionBusyError,
    SessionError,
)
from ._executor import Executor
from ._feeds import required_inputs, validate_feeds
from ._gc_pause import collector_paused
from ._heap import release_free_heap
from ._kernels import kernel_output_shapes
from ._large_dims import naming_large_dims
from ._layouts import TracingLayout
from ._loading import load_model as _load
from ._options import (
    EXTERNAL_DATA_FOLDER,
    GRAPH_CAPTURE,
    MAX_SHAPE_OVERRIDE,
    STRICT_WORKSPACE,
    SessionOptions,
)
from ._ort_module import known_providers
from ._ort_options import GraphOptimizationLevel
from ._ort_session_api import OrtSessionApi
from ._plan import SessionPlan
from ._profiling import Profiler
from ._quick_run import QuickRun
from ._run_guard import RunGuard, terminating
from ._run_types import RunStats

DEFAULT_PROVIDERS = ("CPUExecutionProvider",)
CLOSE_TIMEOUT_S = 30.0  # how long close() waits for runs in flight before it refuses


def load_plugins(paths: Sequence[str]) -> ort_abi.KernelRegistry | None:
    """Third-party C kernel libraries, loaded into one registry consulted before the built-in kernels."""
    if not paths:
        return None
    registry = ort_abi.KernelRegistry()
    for path in paths:
        ort_abi.load_kernel_library(path, registry)
    return registry


def make_provider(name: str, graph: ort_graph.Graph, opsets: Mapping[str, int], options: SessionOptions,
                  plugins: ort_abi.KernelRegistry | None = None) -> Any:
    key = name.lower()
    if key in ("cpu", "cpuexecutionprovider"):
        return CpuExecutionProvider(graph, opsets, plugins, intra_op_num_threads=options.intra_op_num_threads)
    if key in ("simgpu", "simulatedgpuexecutionprovider"):
        return SimulatedGpuExecutionProvider(graph, opsets, plugins, intra_op_num_threads=options.intra_op_num_threads)
    if key in ("cuda", "cudaexecutionprovider"):
        from ._cuda import cuda_provider

        return cuda_provider(graph, opsets, options)
    raise InvalidOptionError(
        f"unknown execution provider {name!r}; available: 'CUDAExecutionProvider', 'SimulatedGPUExecutionProvider', "
        "'CPUExecutionProvider'")


class InferenceSession(OrtSessionApi):
    """Plan everything at construction; `run` then executes without surprises.

    ONNX Runtime's forms work too: `InferenceSession(path_or_bytes, sess_options, providers=[(name, options)],
    provider_options=[...])`, `get_inputs()`, `run(names, feeds, run_options)`, `io_binding()`... (`_ort_api`).

    >>> sess = InferenceSession("model.onnx", {"budgets": "cuda:6GiB"},
    ...                         providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    >>> print(sess.plan.to_table())
    >>> logits, = sess.run(["logits"], {"input_ids": ids})
    """

    @collector_paused()  # the collector's passes cost ~15% of a construction (`_gc_pause`)
    def __init__(self, model: str | os.PathLike | bytes | onnx.ModelProto | Model,
                 options: SessionOptions | Mapping[str, Any] | None = None,
                 providers: Sequence[Any] | None = None, provider_options: Sequence[Mapping[str, Any]] | None = None,
                 **kwargs: Any) -> None:
        self._arguments = (model, options, dict(kwargs))  # what set_providers() re-creates the session from
        self.options, providers = _ort_api.normalize_arguments(options, providers, provider_options, kwargs)
        for key, value in kwargs.items():
            self.options = SessionOptions.from_mapping({**_as_mapping(self.options), key: value})
        self._profiler = profiler = Profiler(self.options.enable_profiling, self.options.profile_file_prefix)
        with _progress.phase("loading the model"):
            self.model = _load(model, self.options.get(EXTERNAL_DATA_FOLDER) or None,
                               map_inline_weights=self.options.map_inline_weights)
        graph = self.model.graph
        _ort_api.override_initializers(graph, self.options.initializer_overrides)
        self._constants = ort_graph.constant_names(graph)  # as loaded: feeds of them are refused by name, folded or not
        profiler.phase("model_loading")
        self.constants = ort_graph.constants_to_initializers(graph)  # as ONNX Runtime does at load
        if self.options.graph_optimization_level != GraphOptimizationLevel.ORT_DISABLE_ALL:  # its constant folding
            folded = ort_graph.fold_constant_of_shape(graph) + ort_graph.fold_constant_layouts(graph)  # not overridable ones
            if folded:
                self.constants += folded
                ort_graph.remove_unused_initializers(graph)  # the fills' shape inputs
        self._declared_inputs = {n: graph.values[n].shape for n in required_inputs(graph)}
        self._passed_feeds: dict[tuple, dict[str, int]] = {}  # feed keys validate_feeds passed (`feed_key`)
        self._quick: QuickRun | bool | None = None  # the kept all-C run replayed (`_quick_run`); False: none can be
        self._declared_outputs = {n: graph.values[n].shape if n in graph.values else None for n in graph.outputs}
        max_shapes: Any = self.options.max_shapes or self.options.get(MAX_SHAPE_OVERRIDE)
        self.plugins = load_plugins(self.options.kernel_libraries)  # first: their output-shape callbacks
        with _progress.phase("resolving shapes and fusing"):
            self.shape_report = ort_graph.resolve_shapes(self.model, self.options.free_dimension_overrides, max_shapes,
                                                         output_shapes=kernel_output_shapes(self.plugins, self.model))
            release_free_heap()  # onnx's inference copies of the model, freed: not resident under later stages
            profiler.phase("shape_resolution")
            fuse = self.options.enable_fusions and \
                self.options.graph_optimization_level != GraphOptimizationLevel.ORT_DISABLE_ALL
            self.fusions = ort_graph.apply_l1_fusions(self.model, exact_shapes=not max_shapes) if fuse else []
            if self.options.optimized_model_filepath:  # ONNX Runtime's: the model as optimized, before placement
                ort_graph.save(self.model, self.options.optimized_model_filepath)
            profiler.phase("fusions")
        names = known_providers(list(providers or DEFAULT_PROVIDERS), _ort_api.get_all_providers(),
                                strict=_ort_api.fallback_disabled(self.options))
        if not any(n.lower() in ("cpu", "cpuexecutionprovider") for n in names):
            names.append("CPUExecutionProvider")  # the fallback provider is always last
        self.providers = [make_provider(n, graph, self.model.opset_imports, self.options, self.plugins) for n in names]
        self.order = ort_graph.topological_order(graph)
        sized = naming_large_dims(self.options.free_dimension_overrides, max_shapes)
        with _progress.phase(f"placing {len(graph.nodes)} nodes"), sized:
            self.placement = _placement.place(self.model, self.order, self.providers, self.options)
        if _ort_api.fallback_disabled(self.options):
            _ort_api.check_no_fallback(self.placement, self.providers, graph)
        for node in graph.nodes:
            node.ep = self.placement.ep_of[node.index]
        # each provider's passes on the nodes it claimed; fusions off (ORT_DISABLE_ALL) turns them off too
        ep_fusions = run_ep_passes(graph, self.providers) if fuse else []
        if ep_fusions:
            self.fusions = [*self.fusions, *ep_fusions]
            self.order = ort_graph.topological_order(graph)
            self.placement.ep_of = {n.index: n.ep for n in graph.nodes}
        self.copies = insert_copies(graph, {p.name: p.device for p in self.providers}, self.providers[-1].name,
                                    memory_types_of(self.providers))
        if self.copies:
            self.order = ort_graph.topological_order(graph)
            self.placement.ep_of = {n.index: n.ep for n in graph.nodes}
        profiler.phase("placement")
        self.kernels = {n.index: self._provider(n.ep).create_kernel(n) for n in graph.nodes}
        profiler.phase("kernel_creation")
        # device graph capture: refused here (before anything is allocated) when it cannot hold
        self._capture = None
        if self.options.flag(GRAPH_CAPTURE):
            from ._capture import plan_capture

            self._capture = plan_capture(self.order, self.providers, self.options.pre_allocate)
        with _progress.phase("planning memory"), naming_large_dims(self.options.free_dimension_overrides, max_shapes):
            self.memory = _memory.plan_memory(self.model, self.order, self.kernels, self.placement, self.providers,
                                              self.options, streaming=self.placement.streaming)
        self.recheck = _placement.level2_recheck(self.model, self.placement, self.memory.slots, self.providers)
        self.overruns = _placement.planned_overruns(self.memory, self.placement, self.providers)
        profiler.phase("memory_planning")
        self.plan = SessionPlan(self.model, self.placement, self.memory, self.shape_report, self.fusions,
                                self.providers, self.recheck, self.overruns)
        node_allocators = self.memory.allocator_of_node()  # read from the memory stages
        types = memory_types_of(self.providers)
        host_outputs = {n.index: types(n)[1] for n in graph.nodes if n.index in node_allocators}
        self._executor = Executor(graph, self.order, self.kernels, allocators=node_allocators,
                                  weights=self.memory.device_weights, host_outputs=host_outputs,
                                  declared_workspace=(self.memory.declared_workspace
                                                      if self.options.flag(STRICT_WORKSPACE) else None),
                                  capture=self._capture, released=self.memory.dropped)
        if self.memory.streaming is not None and self.memory.streaming.layers:  # session.weight_streaming
            from ._streaming_run import WeightStreamer

            try:
                plan = self.placement.streaming
                target = self._provider(plan.ep)
                present = getattr(target, "can_run", True)  # a plan-only device has no streams to make
                transfers = ort_abi.transfers_for(target) if present else ort_abi.ImmediateTransfers()
                self._executor.streamer = WeightStreamer(graph, self.order, plan, transfers)
                if present:  # the copy stream and pinned staging, before any run
                    self._executor.streamer.prepare()
            except Exception:
                if self._executor.streamer is not None:
                    self._executor.streamer.close()
                self.memory.close()  # initialization fails: nothing stays allocated on the device
                raise
        self._closed = False
        self._runs = threading.Condition()  # guards _active_runs / _closing / _closed
        self._active_runs = 0
        self._closing = False
        used = {n.ep for n in graph.nodes}
        self._plan_only = [p.name for p in self.providers if not getattr(p, "can_run", True) and p.name in used]
        self._stats_file = self.options.memory_stats_file  # memory_profile_out or ONNX Runtime's key
        if self._stats_file:
            import ort_partition

            self._executor.recorder = ort_partition.NodeStatsRecorder()
        profiler.initialized()

    def _provider(self, name: str | None) -> Any:
        for p in self.providers:
            if p.name == name:
                return p
        return self.providers[-1]

    # -- ONNX Runtime-style API ---------------------------------------------------------------
    @property
    def input_names(self) -> list[str]:
        return required_inputs(self.model.graph)

    @property
    def output_names(self) -> list[str]:
        return list(self.model.graph.outputs)

    def get_providers(self) -> list[str]:
        """The providers that took at least one of the model's nodes (boundary copies not counted), in priority
        order; the fallback provider when none took any."""
        used = {n.ep for n in self.model.graph.nodes if n.op_type not in _ort_api.COPY_OPS}
        return [p.name for p in self.providers if p.name in used] or [self.providers[-1].name]

    @property
    def last_run_stats(self) -> RunStats:
        return self._executor.last_stats

    def run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any],
            run_options: Any = None, progress: Callable[[int, int], None] | None = None) -> list[Any]:
        """Run the model; `progress(done_nodes, total_nodes)` is called after every node when given.
        `run_options` (a RunOptions): `terminate = True`, from any thread, stops the run between two nodes,
        or between two iterations of a Loop / Scan body, with RunTerminatedError."""
        quick = self._quick
        if quick and run_options is None and progress is None:  # a replay of the kept all-C run (`_quick_run`)
            with self._run_slot(), quick.scope():  # the slot counts the run, then the threads
                result = quick.run(self, output_names, input_feed)
            if result is not None:
                return result
            if not quick.usable:  # a step needs its Python context: every replay would fail the same way
                self._quick = False
        guard = terminating(run_options, progress, len(self.order), self._host_bound())
        progress, finished, begin = self._profiler.run_hook(self.order, getattr(run_options, "logid", ""),
                                                            guard.callback if isinstance(guard, RunGuard) else guard)
        with self._run_slot(), ort_abi.run_checks_scope(guard if isinstance(guard, RunGuard) else None):
            result = self._run(output_names, input_feed, progress, started=begin)
        finished()
        return result

    def run_bound(self, output_names: Sequence[str], input_feed: Mapping[str, Any], device_outputs: Mapping[str, Any],
                  run_options: Any = None) -> list[Any]:
        """`run` for IOBinding: feeds may be `ort_abi.DeviceTensor`s (read on the device, no host copy) and
        `device_outputs` (output name -> a DeviceTensor, or the Allocator of a new one) stay on the device."""
        guard = terminating(run_options, None, len(self.order), self._host_bound())
        progress, finished, begin = self._profiler.run_hook(self.order, getattr(run_options, "logid", ""),
                                                            guard.callback if isinstance(guard, RunGuard) else guard)
        with self._run_slot(), ort_abi.run_checks_scope(guard if isinstance(guard, RunGuard) else None):
            result = self._run(output_names, input_feed, progress, device_outputs, started=begin)
        finished()
        return result

    def _host_bound(self) -> tuple[int, str] | None:
        """What one node may accumulate on the host (a Loop's scan outputs) while the session holds its memory
        promise: the host budget for activations, else the pre-allocated host buffers' planned peak."""
        stage = self.memory.stages.get("cpu")
        if stage is None or not self.memory.holds_promise:
            return None
        if stage.activation_budget is not None:
            return stage.activation_budget, "the cpu budget for activations"
        if self.memory.buffers is not None:
            return stage.peak, "the pre-allocated host buffers"
        return None

    def _run_slot(self) -> _RunSlot:
        """Counts a run in flight so that close() waits for it; refused once close() has begun."""
        return _RunSlot(self)

    def _run(self, output_names: Sequence[str] | None, feeds: Mapping[str, Any],
             progress: Callable[[int, int], None] | None, device_outputs: Mapping[str, Any] | None = None, *,
             started: Callable[[], None] | None = None) -> list[Any]:
        """`feeds` may hold `ort_abi.DeviceTensor`s and `device_outputs` name outputs kept on the device
        (IOBinding's device-bound values; see `Executor.run`); `started` is called just before the first node."""
        idle = self._plan_only
        if idle:
            raise SessionError(
                f"nodes are placed on {idle!r}, which can plan (device profile {self.options.device_profile!r}) but "
                "cannot run on this machine (no CUDA device); use this session for planning only, or run on a "
                "machine with the device")
        on_device = ({n: v for n, v in feeds.items() if isinstance(v, ort_abi.DeviceTensor)}
                     if isinstance(feeds, Mapping) else {})
        if on_device:  # checked as shape-only stand-ins (no bytes), then fed as they are
            feeds = {**feeds, **{n: np.broadcast_to(np.zeros((), v.dtype), v.shape) for n, v in on_device.items()}}
        arrays, _bindings = validate_feeds(self.model.graph, feeds, self._declared_inputs, self._passed_feeds,
                                           self._constants)
        outputs = list(output_names or self.output_names)
        unknown = [o for o in outputs if o not in self.model.graph.outputs]
        if unknown:
            raise InvalidInputError(f"unknown output name(s) {unknown!r}; the model's outputs are {self.output_names!r}")
        if self._capture is not None:
            self._capture.check_feeds(arrays)  # a captured graph replays the shapes it was captured with
        with contextlib.ExitStack() as scopes:  # what each provider holds around a run (CPU: its threads)
            for provider in self.providers:
                scopes.enter_context(ort_abi.provider_run_scope(provider))
            layout = self.memory.layout_for(arrays)
            self.memory.declare_for(layout)  # the kernels' workspace declarations for this layout's shapes
            result = self._executor.run({**arrays, **on_device}, outputs, layout, progress,
                                        measure=self.options.measure_host_allocations, device_outputs=device_outputs,
                                        started=started)
        if self._quick is None and progress is None and not on_device and device_outputs is None:
            quick = QuickRun.build(self, arrays)
            if quick is not None or type(layout) is not TracingLayout:  # a traced run: its pattern's next run may be
                self._quick = quick or False  # False: this session's runs are not replayed
        if self._executor.recorder is not None:  # field-wise maximum over all runs so far
            _dump_memory_profile(self._executor.recorder, self._stats_file)
        return result


    def device_memory(self) -> dict[str, dict[str, int | None]]:
        """Per device with its own memory (CUDA, the simulated GPU), measured by its allocator: bytes in
        use now (weights + pre-allocated buffers between runs), the peak since initialization, the
        capacity it is held to (the device's budget; None when none was given) and the weights' bytes."""
        return self.memory.device_usage()

    def close(self, timeout: float | None = CLOSE_TIMEOUT_S) -> None:
        """Free the session's device memory (weights, pre-allocated buffers), release its kernels and shut
        its execution providers down. Runs in flight (other threads) are waited for, at most `timeout`
        seconds (None: no limit); if they have not ended by then nothing is freed and `SessionBusyError` is
        raised: close again later. New runs are refused from the moment close() begins. Idempotent."""
        with self._runs:
            if self._closed:
                return
            self._closing = True
            if not self._runs.wait_for(lambda: self._active_runs == 0, timeout):
                self._closing = False
                raise SessionBusyError(
                    f"close() waited {timeout!r} s for {self._active_runs} run(s) in flight, which have not ended; "
                    "nothing was freed (a running kernel still reads the weights). Close again once they finish, "
                    "or pass a longer timeout")
            self._closed = True
        try:
            if self._quick:
                self._quick.close()
            self._quick = False
            if self._capture is not None:
                self._capture.release()
            self.memory.close()
            if self._executor.streamer is not None:
                self._executor.streamer.close()  # its copy stream and pinned staging, before the providers go
            for kernel in self.kernels.values():
                ort_abi.release_kernel(kernel)
        finally:
            errors = []
            for provider in self.providers:  # every provider is shut down, even if one of them complains
                try:
                    ort_abi.close_provider(provider)
                except Exception as e:  # noqa: PERF203 - one error must not skip the other providers
                    errors.append(e)
            if errors:
                raise SessionError(f"closing the execution providers failed: {errors[0]}") from errors[0]

    def __enter__(self) -> InferenceSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _RunSlot:
    """`InferenceSession._run_slot`: a class, not a generator (entered on every run, the replays' too)."""

    __slots__ = ("session",)

    def __init__(self, session: InferenceSession) -> None:
        self.session = session

    def __enter__(self) -> None:
        s = self.session
        with s._runs:
            if s._closed or s._closing:
                raise SessionError("this session was closed (its device memory freed); create a new InferenceSession")
            s._active_runs += 1

    def __exit__(self, *exc: object) -> None:
        s = self.session
        with s._runs:
            s._active_runs -= 1
            s._runs.notify_all()


def _dump_memory_profile(recorder: Any, path: str) -> None:
    """Write the statistics CSV; a failure to write warns (MemoryProfileWriteWarning) and loses no outputs."""
    import warnings

    try:
        recorder.dump(path)
    except (OSError, ValueError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        warnings.warn(f"memory_profile_out {path!r}: the per-node memory statistics could not be written ({why}); "
                      "the run's outputs are returned — give a writable file path", MemoryProfileWriteWarning,
                      stacklevel=3)


def _as_mapping(opts: SessionOptions) -> dict[str, Any]:
    import attrs

    d = attrs.asdict(opts, recurse=False)
    config = d.pop("config")
    return {**d, **config}


__all__ = ["InferenceSession", "load_plugins", "make_provider"]
