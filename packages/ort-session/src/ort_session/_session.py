"""InferenceSession: load -> resolve shapes -> L1 -> layer assignment -> placement under budgets ->
Level-2 re-check -> boundary copies -> finalize (kernels, declared workspace) -> memory plan -> runs."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import onnx

import ort_abi
import ort_graph
from ort_graph import Model

from . import _memory, _placement
from ._boundaries import insert_copies
from ._cpu_ep import CpuExecutionProvider, SimulatedGpuExecutionProvider
from ._device_memory import memory_types_of
from ._errors import (
    InvalidInputError,
    InvalidOptionError,
    MemoryProfileWriteWarning,
    SessionBusyError,
    SessionError,
)
from ._executor import Executor, RunStats
from ._feeds import required_inputs, validate_feeds
from ._kernels import kernel_output_shapes
from ._options import MAX_SHAPE_OVERRIDE, SessionOptions
from ._plan import SessionPlan

DEFAULT_PROVIDERS = ("CPUExecutionProvider",)
CLOSE_TIMEOUT_S = 30.0  # how long close() waits for runs in flight before it refuses


def _load(model: str | os.PathLike | bytes | onnx.ModelProto | Model) -> Model:
    if isinstance(model, Model):
        return model
    if isinstance(model, onnx.ModelProto):
        return ort_graph.from_proto(model)
    return ort_graph.load(model)


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
        return CpuExecutionProvider(graph, opsets, plugins)
    if key in ("simgpu", "simulatedgpuexecutionprovider"):
        return SimulatedGpuExecutionProvider(graph, opsets, plugins)
    if key in ("cuda", "cudaexecutionprovider"):
        from ._cuda import cuda_provider

        return cuda_provider(graph, opsets, options)
    raise InvalidOptionError(
        f"unknown execution provider {name!r}; available: 'CUDAExecutionProvider', 'SimulatedGPUExecutionProvider', "
        "'CPUExecutionProvider'")


class InferenceSession:
    """Plan everything at construction; `run` then executes without surprises.

    >>> sess = InferenceSession("model.onnx", {"budgets": "cuda:6GiB"},
    ...                         providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    >>> print(sess.plan.to_table())
    >>> logits, = sess.run(["logits"], {"input_ids": ids})
    """

    def __init__(self, model: str | os.PathLike | bytes | onnx.ModelProto | Model,
                 options: SessionOptions | Mapping[str, Any] | None = None,
                 providers: Sequence[str] | None = None, **kwargs: Any) -> None:
        self.options = options if isinstance(options, SessionOptions) else SessionOptions.from_mapping(options)
        for key, value in kwargs.items():
            self.options = SessionOptions.from_mapping({**_as_mapping(self.options), key: value})
        self.model = _load(model)
        graph = self.model.graph
        self.constants = ort_graph.constants_to_initializers(graph)  # as ONNX Runtime does at load
        self._declared_inputs = {n: graph.values[n].shape for n in required_inputs(graph)}
        max_shapes: Any = self.options.max_shapes or self.options.get(MAX_SHAPE_OVERRIDE)
        self.plugins = load_plugins(self.options.kernel_libraries)  # first: their output-shape callbacks
        self.shape_report = ort_graph.resolve_shapes(self.model, self.options.free_dimension_overrides, max_shapes,
                                                     output_shapes=kernel_output_shapes(self.plugins, self.model))
        self.fusions = ort_graph.apply_l1_fusions(self.model) if self.options.enable_fusions else []
        names = list(providers or DEFAULT_PROVIDERS)
        if not any(n.lower() in ("cpu", "cpuexecutionprovider") for n in names):
            names.append("CPUExecutionProvider")  # the fallback provider is always last
        self.providers = [make_provider(n, graph, self.model.opset_imports, self.options, self.plugins) for n in names]
        self.order = ort_graph.topological_order(graph)
        self.placement = _placement.place(self.model, self.order, self.providers, self.options)
        for node in graph.nodes:
            node.ep = self.placement.ep_of[node.index]
        self.copies = insert_copies(graph, {p.name: p.device for p in self.providers}, self.providers[-1].name,
                                    memory_types_of(self.providers))
        if self.copies:
            self.order = ort_graph.topological_order(graph)
            self.placement.ep_of = {n.index: n.ep for n in graph.nodes}
        self.kernels = {n.index: self._provider(n.ep).create_kernel(n) for n in graph.nodes}
        self.memory = _memory.plan_memory(self.model, self.order, self.kernels, self.placement, self.providers,
                                          self.options)
        self.recheck = _placement.level2_recheck(self.model, self.placement, self.memory.slots, self.providers)
        self.overruns = _placement.planned_overruns(self.memory, self.placement, self.providers)
        self.plan = SessionPlan(self.model, self.placement, self.memory, self.shape_report, self.fusions,
                                self.providers, self.recheck, self.overruns)
        node_allocators = self.memory.allocator_of_node()  # read from the memory stages
        types = memory_types_of(self.providers)
        host_outputs = {n.index: types(n)[1] for n in graph.nodes if n.index in node_allocators}
        self._executor = Executor(graph, self.order, self.kernels, allocators=node_allocators,
                                  weights=self.memory.device_weights, host_outputs=host_outputs)
        self._closed = False
        self._runs = threading.Condition()  # guards _active_runs / _closing / _closed
        self._active_runs = 0
        self._closing = False
        used = {n.ep for n in graph.nodes}
        self._plan_only = [p.name for p in self.providers if not getattr(p, "can_run", True) and p.name in used]
        if self.options.memory_profile_out:
            import ort_partition

            self._executor.recorder = ort_partition.NodeStatsRecorder()

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
        return [p.name for p in self.providers]

    @property
    def last_run_stats(self) -> RunStats:
        return self._executor.last_stats

    def run(self, output_names: Sequence[str] | None, feeds: Mapping[str, Any],
            progress: Callable[[int, int], None] | None = None) -> list[Any]:
        """Run the model; `progress(done_nodes, total_nodes)` is called after every node when given."""
        with self._run_slot():
            return self._run(output_names, feeds, progress)

    @contextlib.contextmanager
    def _run_slot(self) -> Iterator[None]:
        """Counts a run in flight so that close() waits for it; refused once close() has begun."""
        with self._runs:
            if self._closed or self._closing:
                raise SessionError("this session was closed (its device memory freed); create a new InferenceSession")
            self._active_runs += 1
        try:
            yield
        finally:
            with self._runs:
                self._active_runs -= 1
                self._runs.notify_all()

    def _run(self, output_names: Sequence[str] | None, feeds: Mapping[str, Any],
             progress: Callable[[int, int], None] | None) -> list[Any]:
        idle = self._plan_only
        if idle:
            raise SessionError(
                f"nodes are placed on {idle!r}, which can plan (device profile {self.options.device_profile!r}) but "
                "cannot run on this machine (no CUDA device); use this session for planning only, or run on a "
                "machine with the device")
        arrays, _bindings = validate_feeds(self.model.graph, feeds, self._declared_inputs)
        outputs = list(output_names or self.output_names)
        unknown = [o for o in outputs if o not in self.model.graph.outputs]
        if unknown:
            raise InvalidInputError(f"unknown output name(s) {unknown!r}; the model's outputs are {self.output_names!r}")
        result = self._executor.run(arrays, outputs, self.memory.layout_for(arrays), progress,
                                     measure=self.options.measure_host_allocations)
        if self._executor.recorder is not None:  # field-wise maximum over all runs so far
            _dump_memory_profile(self._executor.recorder, self.options.memory_profile_out)
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
            self.memory.close()
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
