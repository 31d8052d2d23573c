"""A body's runs of consecutive C steps, computed through ort-abi's step runner (`ort_abi.StepTable`).

`c_layout(graph, opsets)` picks the body nodes the CPU provider gives a C kernel (the same entries, the same
kernels the main graph uses), whose inputs have known element types and whose outputs have static shapes, and
places each such output and each workspace slot the kernel declares at its own 64-byte aligned offset of one
host arena (no reuse: nothing a step reads is overwritten within an iteration). `arena_bytes` is its size,
which the control-flow node declares as part of its workspace (`_bodies.body_bytes`): at run time the arena
is that workspace's block, or a fresh array of the declared size outside a session.

`CRange.run` computes one run of such steps with one call into C per iteration. What C does not answer (a
shape the layout did not plan, an input not described) is answered in Python exactly as the session's runner
does: the step's Python context (`KernelContext`, fresh outputs), or the numpy kernel for a step C did not
start. Values C made that a Python step or the body's outputs read are views of the arena (copied when they
leave the iteration).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np

import ort_abi
from ort_graph import Graph, Node, to_numpy_dtype
from ort_partition import Declined

_ALIGN = 64
_STRING = 8


@attrs.define
class CStep:
    node: Node
    kernel: Any  # the CKernel
    spec: ort_abi.StepSpec


@attrs.define
class CLayout:
    """The C steps of a body by position in its order, their table entries and each C-made value's block."""

    steps: dict[int, CStep]
    ids: dict[str, int]
    blocks: dict[str, tuple[int, np.dtype, tuple[int, ...]]]  # name -> (offset, dtype, planned shape)
    nbytes: int  # the arena, alignment slack included

    def release(self) -> None:
        for s in self.steps.values():
            s.kernel.release()


def _static(shape: Any) -> bool:
    return shape is not None and all(isinstance(d, int) and d >= 0 for d in shape)


def _elem(graph: Graph, name: str) -> int:
    v = graph.values.get(name)
    if v is not None and v.dtype:
        return int(v.dtype)
    t = graph.initializers.get(name)
    return int(t.dtype) if t is not None else 0


def _kernel(provider: Any, node: Node) -> Any | None:
    """The C kernel the provider creates for `node`, or None where the node's kernel is not one of its C kernels."""
    c = provider._c_kernels
    if c is None or node.subgraphs or node.op_type == "Constant":
        return None
    entry = provider.entry(node)
    if entry is None or entry not in c or isinstance(provider.claim(node), Declined):
        return None
    return provider.create_kernel(node)


def c_layout(graph: Graph, order: Sequence[Node], opsets: Mapping[str, int]) -> CLayout | None:
    """The C steps of `graph` (nodes in `order`) and their arena; None when no node qualifies or C is absent."""
    from .._provider import CpuExecutionProvider

    if not ort_abi.c_available():
        return None
    limits = ort_abi.step_limits()
    provider = CpuExecutionProvider(graph, opsets)
    steps: dict[int, CStep] = {}
    ids: dict[str, int] = {}
    blocks: dict[str, tuple[int, np.dtype, tuple[int, ...]]] = {}
    end = 0
    for i, node in enumerate(order):
        reads, outs = list(node.inputs), list(node.outputs)
        if len(reads) > limits["inputs"] or len(outs) > limits["outputs"]:
            continue
        types = [_elem(graph, n) if n else 0 for n in reads]
        if any(n and t in (0, _STRING) for n, t in zip(reads, types)):
            continue
        shapes = [graph.values[n].shape if n in graph.values else None for n in outs if n]
        if not all(_static(s) and len(s) <= limits["rank"] for s in shapes):
            continue
        if any(n and _elem(graph, n) in (0, _STRING) for n in outs):
            continue
        created = _kernel(provider, node)
        kernel = ort_abi.c_step_kernel(created, types) if created is not None else None
        if kernel is None:
            if created is not None:
                created.release()
            continue
        slots = kernel.declare_workspace(ort_abi.workspace_input_shapes(node)) or []
        if len(slots) > limits["workspace"]:
            kernel.release()
            continue
        planned = []
        for name in outs:
            if not name:
                planned.append(ort_abi.PlannedOutput(-1))
                continue
            elem = _elem(graph, name)
            dtype, shape = to_numpy_dtype(elem), tuple(graph.values[name].shape)
            nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            offset, end = end, end + -(-max(nbytes, 1) // _ALIGN) * _ALIGN
            blocks[name] = (offset, dtype, shape)
            planned.append(ort_abi.PlannedOutput(ids.setdefault(name, len(ids)), 0, elem, dtype.itemsize, offset,
                                                 nbytes, shape))
        workspace = []
        for slot in slots:
            offset, end = end, end + -(-max(slot.size_bytes, 1) // _ALIGN) * _ALIGN
            workspace.append((slot.slot_id, 0, offset, slot.size_bytes))
        inputs = tuple(ids.setdefault(n, len(ids)) if n else -1 for n in reads)
        steps[i] = CStep(node, kernel, ort_abi.StepSpec(kernel, inputs, tuple(types), tuple(planned), tuple(workspace)))
    if not steps:
        return None
    return CLayout(steps, ids, blocks, end + _ALIGN if end else 0)


class CRange:
    """Consecutive C steps `first .. first + count - 1` of a body's order: the table entries to describe before
    (`reads`: values made outside the range) and the C-made values read after it (`exports`)."""

    def __init__(self, layout: CLayout, first: int, count: int, reads: list[str], exports: list[str],
                 stable: set[str]) -> None:
        self.layout, self.first, self.count = layout, first, count
        # weights and outer-scope values keep their arrays for the node's whole run: described once per run
        self.stable = [(n, layout.ids[n]) for n in reads if n in stable]
        self.reads = [(n, layout.ids[n]) for n in reads if n not in stable]
        self.exports = [(n, layout.ids[n]) for n in exports]
        self.nodes = [layout.steps[first + k].node for k in range(count)]


class CBodyRun:
    """One control-flow node run's use of a body's C steps: the StepRun over the arena, held across iterations."""

    def __init__(self, layout: CLayout, table: ort_abi.StepTable, arena: np.ndarray) -> None:
        self.layout, self.table = layout, table
        self._pending: Any = None
        self._values: Mapping[str, Any] = {}
        self._described: set[int] = set()  # ranges whose stable reads are described
        self._reads: dict[int, Any] = {}  # entry -> the array a range read it as (described again only when another)
        self._bind(arena)
        self.run = ort_abi.StepRun(table, [arena], True, self._python_context)

    def _bind(self, arena: np.ndarray) -> None:
        self.arena = arena
        self._reads = {}
        self._base = arena.__array_interface__["data"][0]
        # each C-made value's block as an array of its planned shape (what C writes when the plan holds)
        self._planned: dict[str, tuple[int, tuple[int, ...], np.ndarray]] = {}
        for name, (offset, dtype, shape) in self.layout.blocks.items():
            n = math.prod(shape) * dtype.itemsize
            self._planned[name] = (self._base + offset, shape, arena[offset:offset + n].view(dtype).reshape(shape))
        self._views = {id(v) for _a, _s, v in self._planned.values()}

    @property
    def usable(self) -> bool:
        return self.run.usable and not self.table.released()

    def reopen(self, arena: np.ndarray) -> bool:
        """Use this run again for the next node run, over `arena` (False: no pool context is free)."""
        if self.run is None or not self.run.restart([arena]):
            return False
        self._described.clear()
        self._bind(arena)
        return True

    def close(self) -> None:
        """Give the pool context back and let the arena go (kept: the StepRun, for `reopen`: `StepRun.restart`)."""
        if self.run is not None:
            self.run.close()
        self._values, self._pending, self.arena = {}, None, None
        self._planned, self._views, self._reads = {}, set(), {}

    def drop(self) -> None:
        """Close for good (the StepRun calls back into this object: a cycle, broken here)."""
        self.close()
        self.run = None

    def owns(self, arr: Any) -> bool:
        """Whether `arr` is a value C made in the arena."""
        return id(arr) in self._views

    def _view(self, name: str, entry: int) -> Any:
        found = self.run.entry(entry)
        if found is None:
            return None
        _elem, shape, address = found
        planned_address, planned_shape, view = self._planned[name]
        if address == planned_address and shape == planned_shape:
            return view
        if address != planned_address and math.prod(shape):
            return None  # made in Python (a deferred step): the caller has it
        offset, dtype, _ = self.layout.blocks[name]
        return self.arena[offset:offset + math.prod(shape) * dtype.itemsize].view(dtype).reshape(shape)

    def value(self, name: str) -> Any:
        entry = self.layout.ids.get(name)
        view = self._view(name, entry) if entry is not None and name in self.layout.blocks else None
        return view if view is not None else self._values.get(name)

    def _python_context(self, step: int) -> Any:
        node = self.layout.steps[step].node
        graph = node.graph
        inputs = [self.value(n) if n else None for n in node.inputs]
        ctx = ort_abi.KernelContext(inputs, output_count=len(node.outputs), node_name=node.name,
                                    output_types=[_elem(graph, n) if n else 0 for n in node.outputs])
        for j, name in enumerate(node.outputs):
            shape = self.run.answered(j)
            if shape is not None and name:
                offset, dtype, _ = self.layout.blocks[name]
                n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
                ctx.outputs[j] = self.arena[offset:offset + n].view(dtype).reshape(shape)
        self._pending = ctx
        return ctx

    def compute(self, rng: CRange, values: dict[str, Any], fallback: Any) -> None:
        """Compute `rng` reading `values` (the body's values by name) and put its exports there;
        `fallback(node, values)` computes a step C did not start (the numpy kernel) and returns its outputs."""
        self._values = values
        run = self.run
        if rng.first not in self._described:
            self._described.add(rng.first)
            for name, entry in rng.stable:
                run.describe(entry, values.get(name))
        described = self._reads
        for name, entry in rng.reads:
            arr = values.get(name)
            if described.get(entry) is not arr:  # a carried arena view or a reused array: described already
                run.describe(entry, arr)
                described[entry] = arr
        step, last = rng.first, rng.first + rng.count
        while step < last:
            self._pending = None
            done = run.compute_range(step, last - step)
            step += done
            if step >= last:
                break
            node = self.layout.steps[step].node
            ctx, self._pending = self._pending, None
            if ctx is not None:  # C deferred to Python: the context has the outputs
                ort_abi.check_compute(run.status, ctx, node=node.name, library=self.layout.steps[step].kernel.library)
                outs = ctx.outputs
            elif run.last == ort_abi.STEP_FAILED:
                ort_abi.check_compute(run.status, None, node=node.name, library=self.layout.steps[step].kernel.library)
                outs = fallback(node, values)
            else:  # not started (an input C cannot read), or an output left unanswered: the numpy kernel
                outs = fallback(node, values)
            for name, out in zip(node.outputs, outs):
                if name:
                    values[name] = out
                    run.describe(self.layout.ids[name], out)
                    self._reads.pop(self.layout.ids[name], None)
            step += 1
        for name, entry in rng.exports:
            view = self._view(name, entry)
            if view is not None:
                values[name] = view


def make_table(layout: CLayout) -> ort_abi.StepTable:
    return ort_abi.StepTable({i: s.spec for i, s in layout.steps.items()}, len(layout.ids), {})


def arena_view(buf: Any, nbytes: int) -> np.ndarray | None:
    """`nbytes` of host block `buf` from its first 64-byte aligned address (a fresh array when `buf` is None: no
    session run); None when `buf` is smaller or not a host array (a device's workspace: the numpy kernels run)."""
    if buf is None:
        buf = np.empty(nbytes, np.uint8)
    if type(buf) is not np.ndarray or buf.nbytes < nbytes or not buf.flags.c_contiguous:
        return None
    skip = (-buf.__array_interface__["data"][0]) % _ALIGN
    return buf.reshape(-1).view(np.uint8)[skip:nbytes]


__all__ = ["CBodyRun", "CLayout", "CRange", "arena_view", "c_layout", "make_table"]
