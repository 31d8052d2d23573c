"""Where a run's values and workspace live: the static plan (pre-allocated or per run), a trace of a new
shape key, or the pattern traced for a key seen before.

A traced run records every value's allocation and free, and each node's declared workspace (declared
for the run's concrete input shapes) as a block live while its kernel runs; the kernel itself still
takes scratch on that first run. Later runs with the same key get activations and workspace at their
traced offsets, so they take no scratch.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

import ort_abi
import ort_memplan
from ort_graph import Node, from_numpy_dtype, is_static

from ._device_memory import DeviceMemoryStage
from ._errors import ConstInputWrittenError, RedZoneError
from ._run_types import LayoutBase, RunStats, readable_in_place

__all__ = ["BlockLayout", "CachedLayout", "PlannedLayout", "TracedPattern", "TracingLayout", "arenas", "value_blocks",
           "workspace_shapes"]


class BlockLayout(LayoutBase):
    """A layout whose values live in blocks of per-run buffers: subclasses say where (`_block`)."""

    def _block(self, name: str) -> np.ndarray | ort_abi.DeviceBuffer | None:
        raise NotImplementedError

    def place(self, name: str, arr: Any, *, copy: bool = True) -> Any | None:
        if not copy and readable_in_place(arr):
            return None  # read where the caller holds it
        block = self._block(name)
        fits = (isinstance(block, np.ndarray) and isinstance(arr, np.ndarray | np.generic) and arr.dtype != object
                and arr.nbytes <= block.nbytes)
        return copy_into(block, arr) if fits else None

    def allocate(self, step: int, name: str, shape: tuple[int, ...], dtype: np.dtype) -> Any | None:
        block = self._block(name)
        return None if block is None else view_as(block, shape, dtype)

    def planned_nbytes(self, name: str) -> int | None:
        """Bytes of the planned block of value `name`, None when it has none."""
        block = self._block(name)
        return None if block is None else int(block.nbytes)


def block_of(buffer: Any, offset: int, nbytes: int) -> np.ndarray | ort_abi.DeviceBuffer:
    """Bytes [offset, offset + nbytes) of a plan's buffer: a numpy slice, or a borrowed DeviceBuffer view."""
    if isinstance(buffer, ort_abi.DeviceBuffer):
        return buffer.view(offset, nbytes)
    return buffer[offset:offset + nbytes]


def copy_into(block: np.ndarray, arr: np.ndarray) -> np.ndarray:
    """View `block` (uint8) as `arr`'s dtype and shape, and copy `arr` there unless it already is."""
    view = block[: arr.nbytes].view(arr.dtype).reshape(arr.shape)
    if arr.nbytes and view.__array_interface__["data"][0] != arr.__array_interface__["data"][0]:
        np.copyto(view, arr)
    return view


def view_as(block: np.ndarray | ort_abi.DeviceBuffer, shape: tuple[int, ...], dtype: np.dtype) -> Any | None:
    """`block` (uint8 array or DeviceBuffer) as a tensor of (shape, dtype), or None when it does not fit."""
    dt = np.dtype(dtype)
    nbytes = math.prod(shape) * dt.itemsize
    if dt.kind == "O" or nbytes > block.nbytes:
        return None
    if isinstance(block, ort_abi.DeviceBuffer):
        return ort_abi.DeviceTensor(block.view(0, nbytes), shape, dtype)
    return block[:nbytes].view(dtype).reshape(shape)


def value_blocks(gplan: ort_memplan.GraphPlan) -> dict[str, tuple[str, int, int]]:
    """Every planned value's (device, offset, bytes) in its device's buffer: what `PlannedLayout` looks up
    per output, computed once per plan."""
    by_id = gplan.by_id
    return {name: (by_id[rid].device, gplan.plan.offset(rid), by_id[rid].nbytes)
            for name, rid in gplan.activations.value_ids.items()}


def arenas(devices: Sequence[str] | Mapping[str, Any], stages: Mapping[str, DeviceMemoryStage]) -> dict[str, Any]:
    """One ort-memplan allocator per planned device, from its memory stage (host memory when none)."""
    return {d: stages[d].arena() if d in stages else ort_memplan.HostAllocator() for d in devices}


def keep_for_next_run(plan: ort_memplan.MemoryPlan, stages: Mapping[str, DeviceMemoryStage]) -> int:
    """After a traced run: the host buffer its pattern needs, allocated now and left with the session's
    retaining host allocator (`enable_cpu_mem_arena`), so that the pattern's first cached run allocates nothing
    (it is the buffer that run would have allocated, one run earlier). Returns the fresh allocations made."""
    made = 0
    for device, nbytes in plan.peak.items():
        stage = stages.get(device)
        arena = stage.arena() if stage is not None else None
        if not isinstance(arena, ort_memplan.RetainingHostAllocator) or nbytes <= 0 or arena.kept_bytes >= nbytes:
            continue
        arena.free(arena.allocate(nbytes))
        made += 1
    return made


def fresh_buffers(bufs: ort_memplan.ExecutionBuffers) -> int:
    """How many of a run's buffers were allocated for it: not the host buffer a previous run left for it
    (`RetainingHostAllocator` hands that out as a view of the kept array)."""
    return sum(0 if isinstance(b, np.ndarray) and b.base is not None else 1 for b in bufs.buffers.values())


@attrs.define(eq=False)
class PlannedLayout(BlockLayout):
    """Values and workspace at the offsets of the static GraphPlan. With pre-allocated execution buffers the
    run is `strict`: any allocation outside the plan is an error at the node that asked for it. Buffers
    allocated at initialization for static workspace pre-allocation are not strict (a counted fallback)."""

    gplan: ort_memplan.GraphPlan
    buffers: ort_memplan.ExecutionBuffers | None  # None: allocate per run (memory-pattern mode)
    stages: Mapping[str, DeviceMemoryStage]
    red_zone_names: Sequence[str] | None = None
    name: str = "pre-allocated"
    slot_ids: Mapping[int, Sequence[int]] = attrs.field(factory=dict)
    strict: bool = False
    # value -> (device, offset, bytes) of its planned block, computed once per session (`value_blocks`)
    blocks: Mapping[str, tuple[str, int, int]] | None = None
    _live: ort_memplan.ExecutionBuffers | None = attrs.field(default=None, alias="live")
    _guard: Any = attrs.field(default=None, alias="guard")

    @contextlib.contextmanager
    def hold(self, stats: RunStats) -> Iterator[None]:
        bufs = self.buffers
        if bufs is None:  # memory-pattern mode: this run's buffers (host: the last run's, kept), given back at its end
            bufs = self.new_run_buffers()
            stats.allocations += fresh_buffers(bufs)
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

    def new_run_buffers(self) -> ort_memplan.ExecutionBuffers:
        """One run's buffers of the plan from the stages' arenas (host: the buffer the last run gave back), within
        each device's activation budget; the caller closes them."""
        budgets = {d: s.activation_budget for d, s in self.stages.items() if s.activation_budget is not None}
        return self.gplan.buffers(arenas(self.gplan.plan.peak, self.stages), budgets)

    def _block(self, name: str) -> Any:
        if self.blocks is not None:  # the hot path: one lookup per output per run
            where = self.blocks.get(name)
            if where is None:
                return None
            device, offset, nbytes = where
            return block_of(self._live.buffers[device], offset, nbytes)
        rid = self.gplan.activations.value_ids.get(name)
        if rid is None:
            return None
        return block_of(*self._live.block(rid))

    def workspace(self, node: Node, args: Sequence[Any] = ()) -> dict[int, Any]:
        out = {}
        for slot_id in self.slot_ids.get(node.index, ()):
            req = self.gplan.slot_requests[(node.index, slot_id)]
            out[slot_id] = block_of(*self._live.block(req.id))
        return out

    def plan_key(self) -> Any:
        """What fixes every block's offset: the static plan (for `value_block` / `workspace_blocks`)."""
        return self.gplan

    def value_block(self, name: str) -> tuple[str, int, int] | None:
        """(device, offset, bytes) of value `name`'s planned block, the same in every run of the plan."""
        return (self.blocks or value_blocks(self.gplan)).get(name)

    def workspace_blocks(self, node: Node) -> list[tuple[int, str, int, int]]:
        """(slot id, device, offset, bytes) of each planned workspace slot of `node`."""
        out = []
        for slot_id in self.slot_ids.get(node.index, ()):
            req = self.gplan.slot_requests[(node.index, slot_id)]
            out.append((int(slot_id), req.device, self.gplan.plan.offset(req.id), int(req.nbytes)))
        return out

    def run_buffers(self) -> Mapping[str, Any] | None:
        """This run's buffer per device (None outside a run, or when a red-zone guard watches every step)."""
        return None if self._live is None or self._guard is not None else self._live.buffers

    def run_block(self, key: str) -> Any:
        """This run's view of a run-long block of the plan (a weight-streaming slot), by its key."""
        req = self.gplan.run_requests[key]
        return block_of(*self._live.block(req.id))

    @property
    def guarded(self) -> bool:
        return self._guard is not None

    def place(self, name: str, arr: Any, *, copy: bool = True) -> Any | None:
        """Under red zones a feed is always copied (into its guarded block, else a private array): a kernel that
        writes through its input then changes the run's copy, never the caller's array."""
        if self._guard is None:
            return super().place(name, arr, copy=copy)
        placed = super().place(name, arr, copy=True)
        return np.array(arr) if placed is None and isinstance(arr, np.ndarray) else placed

    def before_step(self, step: int, node: Node | None = None, args: Sequence[Any] = ()) -> None:
        if self._guard is None:
            return
        reads = {}
        if node is not None:  # checksummed: what the kernel reads, except blocks its outputs share (in place)
            outs = {self._where(o) for o in node.outputs if o} - {None}
            for name, arr in zip(list(node.inputs) + node.implicit_inputs(), args):
                if name and arr is not None and self._where(name) not in outs:  # None: released once packed
                    reads[name] = arr
        self._guard.before_step(step, reads)

    def _where(self, name: str) -> tuple[str, int] | None:
        where = self.value_block(name)
        return None if where is None else where[:2]

    def after_step(self, step: int, node: Node) -> None:
        if self._guard is None:
            return
        try:
            self._guard.after_step(step, node.name)
        except ort_memplan.ConstInputWritten as err:  # a session error (an ONNX Runtime Fail) with the same fields
            raise ConstInputWrittenError.of(err) from None
        except ort_memplan.RedZoneViolation as err:
            raise RedZoneError.of(err) from None


@attrs.define(eq=False)
class TracedPattern:
    """What the first run of a shape key recorded: block id per value (and per workspace slot), the
    requests, and node index -> slot id -> the slot's block name."""

    ids: dict[str, int] = attrs.field(factory=dict)
    requests: list[ort_memplan.AllocationRequest] = attrs.field(factory=list)
    workspace: dict[int, dict[int, str]] = attrs.field(factory=dict)
    declared: dict[int, list[ort_abi.WorkspaceInputShape]] = attrs.field(factory=dict)  # node -> its declaration's shapes


def workspace_shapes(node: Node, args: Sequence[Any]) -> list[ort_abi.WorkspaceInputShape]:
    """The run's concrete input shapes in the positional form a kernel declares its workspace from. A weight the
    host released once its kernel packed it (None here) keeps its static shape: the kernel's declaration reads it
    (a Conv's packed weights decide its workspace)."""
    out = []
    values = node.graph.values if node.graph is not None else {}
    for name, arg in zip(node.inputs, args):
        if arg is None and name and (v := values.get(name)) is not None and is_static(v.shape) and v.dtype:
            out.append(ort_abi.WorkspaceInputShape.shaped(tuple(v.shape), v.dtype))
        elif not name or arg is None:
            out.append(ort_abi.WorkspaceInputShape.missing())
        elif isinstance(arg, np.ndarray | np.generic | ort_abi.DeviceTensor) and np.dtype(arg.dtype).kind != "O":
            out.append(ort_abi.WorkspaceInputShape.shaped(tuple(int(d) for d in arg.shape), from_numpy_dtype(arg.dtype)))
        else:
            out.append(ort_abi.WorkspaceInputShape.unshaped())
    return out


@attrs.define(eq=False)
class TracingLayout(LayoutBase):
    """First run of a new shape key: values are fresh arrays and workspace is scratch; the allocate/free
    order of values and declared workspace slots is recorded and planned when the run ends. An output with an
    in-place candidate (`ort_memplan.inplace_candidates`: the input dies at its node, as the static plan pairs
    them) whose block holds it is recorded in that block: later runs of the pattern write it there in place (a
    Reshape then copies nothing), and the block is freed when its last holder is."""

    recorder: ort_memplan.TraceRecorder
    pattern: TracedPattern
    device_of_value: Mapping[str, str]
    device_of_node: Mapping[int, str]
    kernels: Mapping[int, Any]
    on_done: Callable[[TracedPattern], None]
    name: str = "tracing"
    stages: Mapping[str, DeviceMemoryStage] | None = None  # where the next run's buffers come from
    inplace: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict)  # output -> the inputs it may overwrite
    _open_workspace: list[str] = attrs.field(factory=list, alias="open_workspace")
    _bytes: dict[int, int] = attrs.field(factory=dict, alias="bytes")  # block id -> its traced bytes
    _holder: dict[int, str] = attrs.field(factory=dict, alias="holder")  # block id -> the value holding it now

    @contextlib.contextmanager
    def hold(self, stats: RunStats) -> Iterator[None]:
        with self.recorder:
            yield
        self.pattern.requests = self.recorder.requests()
        self.on_done(self.pattern)
        if self.stages is not None:
            stats.allocations += keep_for_next_run(self.recorder.finish(), self.stages)

    def _record(self, name: str, nbytes: int, device: str) -> None:
        ids = self.pattern.ids
        rid = ids.setdefault(name, len(ids))  # len(ids) > every id so far, aliases included: a new id
        self._bytes[rid], self._holder[rid] = nbytes, name
        self.recorder.allocate(rid, nbytes, device)

    def place(self, name: str, arr: Any, *, copy: bool = True) -> Any | None:
        if isinstance(arr, np.ndarray | np.generic) and arr.dtype != object:
            self._record(name, arr.nbytes, self.device_of_value.get(name, "cpu"))  # the block later runs may use
        return None

    def allocate(self, step: int, name: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray | None:
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        if name not in self.pattern.ids:
            for source in self.inplace.get(name, ()):
                rid = self.pattern.ids.get(source)
                if rid is not None and self._holder.get(rid) == source and self._bytes[rid] >= nbytes:
                    self.pattern.ids[name], self._holder[rid] = rid, name  # in place: the input's block is the output's
                    return None
        self._record(name, nbytes, self.device_of_value.get(name, "cpu"))
        return None

    def release(self, step: int, name: str) -> None:
        rid = self.pattern.ids.get(name)
        if rid is not None and self._holder.get(rid) == name:  # an input an output took in place: freed with it
            self.recorder.free(rid)

    def workspace(self, node: Node, args: Sequence[Any] = ()) -> dict[int, Any]:
        """Declare the node's workspace for this run's shapes and trace each slot as live during the step;
        this run the kernel still takes scratch (nothing is planned yet)."""
        shapes = workspace_shapes(node, args)
        slots = ort_abi.declare_workspace(self.kernels[node.index], shapes, node=node.name)
        if slots:
            self.pattern.declared[node.index] = shapes  # what `SessionMemory.declare_for` declares again
        for slot in slots or ():
            name = f"#workspace:{node.index}:{slot.slot_id}"
            self._record(name, slot.size_bytes, self.device_of_node.get(node.index, "cpu"))
            self.pattern.workspace.setdefault(node.index, {})[slot.slot_id] = name
            self._open_workspace.append(name)
        return {}

    def after_step(self, step: int, node: Node) -> None:
        opened, self._open_workspace = self._open_workspace, []
        for name in opened:
            self.recorder.free(self.pattern.ids[name])


@attrs.define(eq=False)
class CachedLayout(BlockLayout):
    """A shape key seen before: one buffer per device sized by its traced plan; values and workspace at
    their traced offsets."""

    plan: ort_memplan.MemoryPlan
    pattern: TracedPattern
    stages: Mapping[str, DeviceMemoryStage]
    name: str = "cached pattern"
    _bufs: Any = attrs.field(default=None, alias="bufs")
    _by_id: dict[int, Any] | None = attrs.field(default=None, alias="by_id")  # request id -> request

    @contextlib.contextmanager
    def hold(self, stats: RunStats) -> Iterator[None]:
        bufs = self.new_run_buffers()
        stats.allocations += fresh_buffers(bufs)
        try:
            with bufs.run():
                self._bufs = bufs
                try:
                    yield
                finally:
                    self._bufs = None
        finally:
            bufs.close()

    def new_run_buffers(self) -> ort_memplan.ExecutionBuffers:
        """One run's buffers of the traced plan from the stages' arenas; the caller closes them."""
        return ort_memplan.ExecutionBuffers(self.plan, arenas(self.plan.peak, self.stages), requests=self.pattern.requests)

    def _block(self, name: str) -> Any:
        rid = self.pattern.ids.get(name)
        if rid is None:
            return None
        return block_of(*self._bufs.block(rid))

    def workspace(self, node: Node, args: Sequence[Any] = ()) -> dict[int, Any]:
        return {slot: self._block(name) for slot, name in self.pattern.workspace.get(node.index, {}).items()}

    def plan_key(self) -> Any:
        """What fixes every block's offset: the traced pattern (for `value_block` / `workspace_blocks`)."""
        return self.pattern

    def value_block(self, name: str) -> tuple[str, int, int] | None:
        """(device, offset, bytes) of value `name`'s traced block, the same in every run of the pattern."""
        if self._by_id is None:
            self._by_id = {r.id: r for r in self.pattern.requests}
        rid = self.pattern.ids.get(name)
        req = self._by_id.get(rid) if rid is not None else None
        return None if req is None else (req.device, self.plan.offset(rid), int(req.nbytes))

    def workspace_blocks(self, node: Node) -> list[tuple[int, str, int, int]]:
        """(slot id, device, offset, bytes) of each traced workspace slot of `node`."""
        out = []
        for slot, name in self.pattern.workspace.get(node.index, {}).items():
            block = self.value_block(name)
            if block is not None:
                out.append((int(slot), *block))
        return out

    def run_buffers(self) -> Mapping[str, Any] | None:
        """This run's buffer per device (None outside a run)."""
        return None if self._bufs is None else self._bufs.buffers
