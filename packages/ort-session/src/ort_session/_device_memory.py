"""One memory stage per device (`DeviceMemoryStage`): its budget, its allocator, the arena the memory
plan's buffer lives in, its weights and what its allocator measures; plus the weights uploaded once and
one teardown that frees all of it exactly once.

Data goes down once: options -> placement (budgets per provider, in bytes) -> plan (`plan_memory`) ->
one `DeviceMemoryStage` per planned device -> layouts and the executor, which read the stages.

A provider with its own memory exposes `allocator` (an ort_abi Allocator whose buffers the host
cannot read: CUDA, the simulated GPU); `None` means host memory (numpy arrays). On such a device
every value is an `ort_abi.DeviceTensor` in that device's arena, every weight is uploaded once at
initialization, and bytes cross to and from the host only in the boundary copy nodes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

import ort_abi
import ort_memplan
from ort_graph import BodyWeight, Graph, Node, body_weights, overridable_initializers

from ._errors import DeviceMemoryError

__all__ = ["DeviceArena", "DeviceMemoryStage", "DeviceWeights", "MemoryTypes", "device_allocators", "memory_types_of",
           "weight_names_per_device", "device_memory_error", "graph_body_weights", "weight_nbytes"]

MemoryTypes = Callable[[Node], tuple[tuple[int, ...], tuple[int, ...]]]  # node -> (host inputs, host outputs)


def _no_host_io(node: Node) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return (), ()


def memory_types_of(providers: Sequence[Any]) -> MemoryTypes:
    """node -> (host inputs, host outputs) from the provider the node is placed on: positions its kernel
    keeps in host memory although it runs on a device (ONNX Runtime's OrtMemTypeCPUInput / CPUOutput:
    Reshape's shape, Slice's bounds, Shape's output). Providers without `memory_types` have none."""
    by_name = {p.name: p for p in providers}

    def types(node: Node) -> tuple[tuple[int, ...], tuple[int, ...]]:
        provider = by_name.get(node.ep or "")
        fn = getattr(provider, "memory_types", None)  # a plan-only device plans with them too
        return _no_host_io(node) if fn is None else fn(node)

    return types


class DeviceArena:
    """ort-memplan's Allocator and HostAccess over an ort_abi Allocator: a plan's buffer for the
    device is one owned DeviceBuffer; red-zone guard bytes are read and written by explicit copies."""

    def __init__(self, allocator: ort_abi.Allocator) -> None:
        self.allocator = allocator

    def allocate(self, nbytes: int) -> ort_abi.DeviceBuffer:
        return self.allocator.alloc(nbytes)

    def free(self, buffer: ort_abi.DeviceBuffer) -> None:
        self.allocator.free(buffer)

    def read(self, buffer: ort_abi.DeviceBuffer, offset: int, nbytes: int) -> bytes:
        out = np.empty(nbytes, np.uint8)
        ort_abi.copy_device_to_host(buffer.view(offset, nbytes), out)
        return out.tobytes()

    def write(self, buffer: ort_abi.DeviceBuffer, offset: int, data: bytes) -> None:
        ort_abi.copy_host_to_device(np.frombuffer(data, np.uint8), buffer.view(offset, len(data)))


@attrs.define(eq=False)
class DeviceMemoryStage:
    """One device's memory, built once from the plan. `budget`: the device's budget in bytes (None: none
    given); `weights`: bytes of the initializers its nodes read; `peak`: the plan's peak of activations
    and workspace there; `allocator`: the provider's ort_abi Allocator (None: host memory, numpy)."""

    device: str
    budget: int | None
    weights: int
    peak: int
    allocator: ort_abi.Allocator | None = None
    streaming_slots: int = 0  # bytes of the weight-streaming slots: run-long blocks of the plan, inside `peak`
    retain_host: bool = True  # host memory: keep the last run's buffer for the next (`arena`)
    _host: Any = attrs.field(default=None, init=False)

    @property
    def activation_budget(self) -> int | None:
        """What the budget leaves for the plan's blocks (activations, workspace and the weight-streaming slots)
        once the weights are in (None: no budget)."""
        return None if self.budget is None else max(self.budget - self.weights, 0)

    def arena(self) -> Any:
        """The ort-memplan allocator the plan's buffer for this device comes from. Host memory with
        `retain_host` (`enable_cpu_mem_arena`, the default): one allocator for the session that keeps the last
        run's buffer for the next run (onnxruntime's CPU arena keeps its memory likewise)."""
        if self.allocator is not None:
            return DeviceArena(self.allocator)
        if not self.retain_host:
            return ort_memplan.HostAllocator()
        if self._host is None:
            self._host = ort_memplan.RetainingHostAllocator()
        return self._host

    def release_host(self) -> None:
        """Drop the host buffer kept between runs (the session closes)."""
        if self._host is not None:
            self._host.release()

    def hold_to_budget(self) -> None:
        """The device never holds more than its budget, run after run (its allocator refuses beyond it)."""
        if self.allocator is not None and self.budget is not None:
            self.allocator.capacity = self.budget

    def usage(self, uploaded: DeviceWeights) -> dict[str, int | None]:
        """Measured by the allocator: bytes in use now, peak, the capacity it is held to, weights uploaded
        (host memory is not measured: None)."""
        a = self.allocator
        if a is None:
            return {"in_use": None, "peak": None, "capacity": self.budget, "weights": None}
        return {"in_use": a.bytes_in_use, "peak": a.peak_bytes, "capacity": a.capacity,
                "weights": uploaded.nbytes(self.device)}


def device_allocators(providers: Sequence[Any]) -> dict[str, ort_abi.Allocator]:
    """Device name -> the allocator of the provider that owns it, for devices with their own memory."""
    out: dict[str, ort_abi.Allocator] = {}
    for p in providers:
        alloc = getattr(p, "allocator", None)
        if alloc is not None:
            out.setdefault(p.device, alloc)
    return out


def weight_names_per_device(graph: Graph, device_of_node: Mapping[int, str],
                            memory_types: MemoryTypes = _no_host_io, host: str = "cpu") -> dict[str, set[str]]:
    """Initializers read by nodes on each device (one read on two devices counts on both); a weight
    read at a host-input position is read on the host. An overridable initializer (a run may feed it) is a
    weight of the host wherever it is read: its boundary copy (`insert_copies`) takes the run's value, fed or
    stored, to the device, as for an input; it is never uploaded."""
    seen: dict[str, set[str]] = {}
    inits = graph.initializers
    fed = set(overridable_initializers(graph))
    for node in graph.nodes:
        if node.attributes and node.subgraphs:  # what its bodies hold lives where the node runs
            keys = {w.key for w in body_weights(node)}
            if keys:
                seen.setdefault(device_of_node[node.index], set()).update(keys)
        reads = [(i, name) for i, name in enumerate(list(node.inputs) + node.implicit_inputs()) if name in inits]
        if not reads:
            continue  # no weights: its memory types do not matter here
        host_inputs = memory_types(node)[0]
        for i, name in reads:
            device = host if i in host_inputs or name in fed else device_of_node[node.index]
            seen.setdefault(device, set()).add(name)
    return seen


@attrs.define(eq=False)
class DeviceWeights:
    """Initializers uploaded once to each device with its own memory; `args` says, per node on such a
    device, which input positions read a device copy instead of the host array."""

    tensors: dict[str, dict[str, ort_abi.DeviceTensor]] = attrs.field(factory=dict)  # device -> name -> tensor
    args: dict[int, list[tuple[int, ort_abi.DeviceTensor]]] = attrs.field(factory=dict)  # node -> (position, tensor)

    @classmethod
    def upload(cls, graph: Graph, order: Sequence[Node], device_of_node: Mapping[int, str],
               allocators: Mapping[str, ort_abi.Allocator], memory_types: MemoryTypes = _no_host_io,
               streamed: frozenset[str] | set[str] = frozenset()) -> DeviceWeights:
        """`streamed`: weights that stay on the host (copied into a streaming slot per run), not uploaded."""
        weights = cls()
        bodies = graph_body_weights(graph)
        try:
            for device, names in sorted(weight_names_per_device(graph, device_of_node, memory_types).items()):
                alloc = allocators.get(device)
                if alloc is None:
                    continue
                on_device = weights.tensors.setdefault(device, {})
                for name in sorted(names - set(streamed)):
                    on_device[name] = ort_abi.tensor_from_host(alloc, _host_array(graph, name, bodies))
        except Exception:
            weights.close()  # a weight that does not fit: free the ones already uploaded, lose nothing
            raise
        for node in order:
            on_device = weights.tensors.get(device_of_node[node.index])
            if on_device is None:
                continue
            reads = list(node.inputs) + node.implicit_inputs()
            host_inputs = memory_types(node)[0]
            pairs = [(i, on_device[n]) for i, n in enumerate(reads) if n in on_device and i not in host_inputs]
            if node.attributes and node.subgraphs:  # its bodies' weights: read after its inputs, in body order
                pairs += [(len(reads) + j, on_device[w.key]) for j, w in enumerate(body_weights(node))]
            if pairs:
                weights.args[node.index] = pairs
        return weights

    def nbytes(self, device: str) -> int:
        return sum(t.buffer.nbytes for t in self.tensors.get(device, {}).values())

    def close(self) -> None:
        tensors, self.tensors, self.args = self.tensors, {}, {}
        for on_device in tensors.values():
            for t in on_device.values():
                t.buffer.allocator.free(t.buffer)


def graph_body_weights(graph: Graph) -> dict[str, BodyWeight]:
    """Key -> weight of everything the subgraphs of `graph`'s nodes hold (see ort_graph.body_weights)."""
    return {w.key: w for node in graph.nodes if node.attributes and node.subgraphs for w in body_weights(node)}


def weight_nbytes(graph: Graph, name: str, bodies: Mapping[str, BodyWeight]) -> int:
    """Bytes of a weight as `weight_names_per_device` names it: an initializer, or a weight inside a body."""
    t = graph.initializers.get(name)
    return t.nbytes if t is not None else bodies[name].nbytes


def _host_array(graph: Graph, name: str, bodies: Mapping[str, BodyWeight]) -> np.ndarray:
    t = graph.initializers.get(name)
    arr = t.numpy() if t is not None else bodies[name].numpy()
    if arr.dtype == object:
        raise ort_abi.TransferError(f"initializer {name!r} holds {arr.dtype} values, which cannot live in device "
                                    "memory; leave the nodes that read it to the CPU EP")
    return np.asarray(arr, order="C")


def device_memory_error(what: str, stages: Mapping[str, DeviceMemoryStage], cause: Exception,
                        host: str = "cpu") -> DeviceMemoryError:
    """The error initialization raises when a device cannot hold what the plan allocates on it."""
    from ort_partition import format_bytes

    needs = "; ".join(f"{d}: weights {format_bytes(s.weights)} + planned peak {format_bytes(s.peak)}"
                      f"{f' (budget {format_bytes(s.budget)})' if s.budget is not None else ''}"
                      for d, s in sorted(stages.items()) if d != host and (s.weights or s.peak))
    return DeviceMemoryError(f"initialization could not allocate {what} on the device: {cause}. The plan needs {needs}. "
                             "Nothing stays allocated; lower the budget to what the device has free, or close other "
                             "sessions and processes using it")
