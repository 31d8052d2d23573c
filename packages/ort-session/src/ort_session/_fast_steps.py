"""C kernels' steps computed through ort-abi's step runner (`ort_abi.StepTable`) under the static plan.

Where a run uses the session's static plan (`PlannedLayout`: per-run or pre-allocated buffers), each host
node whose kernel is a C kernel, whose outputs all have planned blocks and whose inputs and outputs have
known element types is described once per plan (`FastSteps.build`). A run then computes it with one call
into C: inputs come from the run's value table (written by the step that produced each value, by the host
for feeds and Python kernels' outputs, once per session for weights), outputs and workspace are answered
from their planned blocks. A Python kernel reading a value made in C gets a view of its planned block
(`FastRun.materialize`).

The promise is unchanged: a request C does not answer (outgrowing or contradicting the plan, scratch, any
other host call) builds the node's Python context (`Executor._context`) and is answered, counted or refused
there exactly as without the runner; a step whose inputs are not described with their planned types runs
entirely in Python.
"""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

import ort_abi
from ort_graph import Node, to_numpy_dtype

from ._errors import SessionError

STRING = 8  # ONNX element type of strings: never described in C
OUTPUTS = "#outputs"  # the run buffer of the graph outputs C makes: the caller's own memory, never copied


class FastSteps:
    """The steps of one executor the runner computes under one plan (`key`: a static plan or a traced
    pattern, `Layout.plan_key`), with the value
    table's entries (`ids`), each C-made value's planned block (`block(name)`: (buffer, offset, bytes),
    read from the table's step outputs), the plan's devices in buffer order, and per step the outputs to describe after it runs in
    Python (`describe_after`)."""

    def __init__(self, key: Any, table: ort_abi.StepTable, ids: dict[str, int],
                 devices: list[str],
                 describe_after: dict[int, list[tuple[str, int]]]) -> None:
        self.key, self.table, self.ids, self.devices = key, table, ids, devices
        self.describe_after = describe_after  # of the steps outside the table (`described_after`: any step)
        self.steps = table.pointers  # the table's steps (a packed map: `in` and len)
        self.order: list[Node] = []  # the executor's order: a step's node, its outputs
        self.output_bytes = 0  # of the OUTPUTS buffer
        self._free: list[np.ndarray] = []  # OUTPUTS buffers of earlier runs, reused once nothing views them
        self._lock = threading.Lock()

    def output_buffer(self) -> np.ndarray:
        """A run's OUTPUTS buffer: one an earlier run had whose outputs nobody holds any more (no array views
        it: its only references are this list's and the check's), else a new one. A decode loop feeding the
        presents back alternates between two."""
        with self._lock:
            for buf in self._free:
                if sys.getrefcount(buf) <= 3:  # the list, the loop variable, getrefcount's argument
                    return buf
            buf = np.empty(self.output_bytes, np.uint8)
            if len(self._free) < 3:
                self._free.append(buf)
            return buf

    @classmethod
    def build(cls, executor: Any, layout: Any) -> FastSteps | None:
        """The runner's steps for `layout`'s plan, or None when no step qualifies (or C is unavailable)."""
        if not ort_abi.c_available():
            return None
        limits = ort_abi.step_limits()
        ids: dict[str, int] = {}
        devices: list[str] = []
        specs: dict[int, ort_abi.StepSpec] = {}
        graph_outs = {n: None for n in executor.graph.outputs if n not in executor.graph.initializers
                and n not in executor.graph.inputs}  # graph output -> (offset, bytes) in OUTPUTS, once placed
        from ._fast_control import CONTROL_OPS, control_step

        body_specs: dict[int, ort_abi.StepSpec] = {}  # control-flow bodies' steps, after the graph's (`_fast_control`)
        constants: dict[int, np.ndarray] = {}
        total = len(executor.order)
        for step, node in enumerate(executor.order):
            spec = _spec(executor, layout, node, ids, devices, limits, graph_outs)
            if spec is None and node.op_type in CONTROL_OPS:
                spec = control_step(executor, layout, node, ids, devices, limits, graph_outs,
                                    total + 1 + len(body_specs) + step, body_specs, constants)
            if spec is not None:
                specs[step] = spec
        if not specs:
            return None
        specs.update(body_specs)
        inits = executor.graph.initializers
        constants.update({entry: inits[name].numpy() for name, entry in ids.items()
                          if isinstance(name, str) and name in inits})
        describe_after = {}
        for step, node in enumerate(executor.order):
            outs = _described(node, ids) if step not in specs else None
            if outs:
                describe_after[step] = outs
        fast = cls(layout.plan_key(), ort_abi.StepTable(specs, len(ids), constants), ids, devices, describe_after)
        fast.order = executor.order
        fast.output_bytes = max((o + n for o, n in filter(None, graph_outs.values())), default=0)
        return fast


    def block(self, name: str) -> tuple[int, int, int] | None:
        """(run buffer, offset, bytes) of the planned block a step of the table makes `name` in, else None."""
        entry = self.ids.get(name)
        return None if entry is None else self.table.block(entry)

    def described_after(self, step: int) -> list[tuple[str, int]] | None:
        """(name, table entry) of the outputs of `step` to describe after it ran in Python, None: none."""
        if step in self.steps:  # a table step that did not start in C: not kept per step (it seldom happens)
            return _described(self.order[step], self.ids) or None
        return self.describe_after.get(step)


def _described(node: Node, ids: Mapping[str, int]) -> list[tuple[str, int]]:
    return [(n, ids[n]) for n in node.outputs if n and n in ids]


def _spec(executor: Any, layout: Any, node: Node, ids: dict[str, int], devices: list[str],
          limits: Mapping[str, int],
          outs: dict[str, tuple[int, int] | None]) -> ort_abi.StepSpec | None:
    """The runner's description of `node`, or None when it runs in Python: a device node, a copy, an
    unknown element type, an output without a planned block, more inputs/outputs/slots than the runner
    holds, or a kernel that is not a C kernel."""
    index = node.index
    facts = executor._facts[index]
    if (executor.allocators.get(index) is not None or facts.copy
            or (executor.weights is not None and executor.weights.args.get(index))):
        return None
    reads, outputs = facts.reads, facts.outputs
    if len(reads) > limits["inputs"] or len(outputs) > limits["outputs"]:
        return None
    values = executor.graph.values
    types = []
    for name in reads:
        elem = int(values[name].dtype or 0) if name and name in values else 0
        if name and (elem == 0 or elem == STRING):
            return None
        types.append(elem)
    kernel = ort_abi.c_step_kernel(executor.kernels[index], types)
    if kernel is None:
        return None
    placed = placed_outputs(executor, layout, node, devices, limits, outs)
    if placed is None:
        return None
    workspace = []
    for slot_id, device, offset, nbytes in layout.workspace_blocks(node):
        buffer = _buffer(devices, device, limits)
        if buffer is None or len(workspace) >= limits["workspace"]:
            return None
        workspace.append((slot_id, buffer, offset, nbytes))
    return ort_abi.StepSpec(kernel, tuple(_entries(ids, reads)), tuple(types), planned_outputs(ids, placed),
                            tuple(workspace))


def placed_outputs(executor: Any, layout: Any, node: Node, devices: list[str], limits: Mapping[str, int],
                   outs: dict[str, tuple[int, int] | None]) -> list[tuple[Any, ...]] | None:
    """(name, buffer, element type, offset, bytes, planned shape) of each output of `node` in its planned block
    (name "": unnamed); a graph output on the host goes to OUTPUTS. None when an output has no planned block, an
    unknown or string element type, a rank over the runner's, or a buffer the runner cannot add."""
    facts = executor._facts[node.index]
    planned = executor._planned[True][node.index]
    placed = []
    for j, name in enumerate(facts.outputs):
        if not name:
            placed.append(("", -1, 0, 0, 0, None))
            continue
        elem = facts.out_types[j]
        shape, planned_type = planned[j] if j < len(planned) and planned[j] is not None else (None, 0)
        where = layout.value_block(name)
        if (not elem or elem == STRING or (planned_type and planned_type != elem) or where is None
                or (shape is not None and len(shape) > limits["rank"])):
            return None
        device, offset, nbytes = where
        if name in outs and device == "cpu":  # a graph output: made where the caller gets it (no copy at the end)
            if outs[name] is None:
                end = max((o + n for o, n in filter(None, outs.values())), default=0)
                outs[name] = (-(-end // 64) * 64, nbytes)
            device, offset = OUTPUTS, outs[name][0]
        buffer = _buffer(devices, device, limits)
        if buffer is None:
            return None
        placed.append((name, buffer, elem, offset, nbytes, shape))
    return placed


def planned_outputs(ids: dict[Any, int], placed: list[tuple[Any, ...]]) -> tuple[ort_abi.PlannedOutput, ...]:
    """The runner's outputs for `placed_outputs`, their value table entries taken in `ids`."""
    outs = []
    for name, buffer, elem, offset, nbytes, shape in placed:
        if not name:
            outs.append(ort_abi.PlannedOutput(-1))
            continue
        outs.append(ort_abi.PlannedOutput(_entries(ids, [name])[0], buffer, elem, to_numpy_dtype(elem).itemsize,
                                          offset, nbytes, shape))
    return tuple(outs)


def _entries(ids: dict[str, int], names: list[str]) -> list[int]:
    return [ids.setdefault(n, len(ids)) if n else -1 for n in names]


def _buffer(devices: list[str], device: str, limits: Mapping[str, int]) -> int | None:
    if device not in devices:
        if len(devices) >= limits["buffers"]:
            return None
        devices.append(device)
    return devices.index(device)


class FastRun:
    """One run's use of FastSteps: the held `ort_abi.StepRun`, the run's values (`materialize` reads a
    C-made value as a view of its planned block) and the pending Python context of a step C deferred."""

    def __init__(self, fast: FastSteps, buffers: Mapping[str, Any], exact: bool,
                 make_context: Callable[[int], tuple[Any, Any]]) -> None:
        self.fast = fast
        self._buffers = [buffers[d] if d != OUTPUTS else fast.output_buffer() for d in fast.devices]
        self._outputs = self._buffers[fast.devices.index(OUTPUTS)] if OUTPUTS in fast.devices else None
        self._make_context = make_context
        self.pending: tuple[Any, Any] | None = None  # (KernelContext, Refusals | None) of the deferred step
        self.run = ort_abi.StepRun(fast.table, self._buffers, exact, self._python_context)

    @classmethod
    def open(cls, fast: FastSteps, layout: Any, exact: bool,
             make_context: Callable[[int], tuple[Any, Any]]) -> FastRun | None:
        """The run's FastRun, or None when this run cannot use the runner (a host buffer is not a numpy
        array, a kernel was released, or every pool context is held by other runs)."""
        buffers = layout.run_buffers() or {}
        if (any(d != OUTPUTS and type(buffers.get(d)) is not np.ndarray for d in fast.devices)
                or fast.table.released()):
            return None
        run = cls(fast, buffers, exact, make_context)
        if not run.run.usable:
            run.close()
            return None
        return run

    def _python_context(self, step: int) -> Any:
        """The deferred step's KernelContext, holding the outputs C already answered."""
        ctx, refusals = self._make_context(step)
        for j, name in enumerate(self.fast.order[step].outputs):
            shape = self.run.answered(j)
            if shape is not None and name:
                ctx.outputs[j] = self._block_view(name, ctx.output_dtype(j), shape)
        self.pending = (ctx, refusals)
        return ctx

    def describe(self, values: Mapping[str, Any], names: list[tuple[str, int]]) -> None:
        for name, entry in names:
            self.run.describe(entry, dict.get(values, name))

    def has(self, name: str) -> bool:
        entry = self.fast.ids.get(name)
        return entry is not None and self.run.entry(entry) is not None

    def materialize(self, name: str) -> np.ndarray | None:
        """A value C made, as a view of its planned block; None when C did not make it."""
        entry = self.fast.ids.get(name)
        found = self.run.entry(entry) if entry is not None else None
        where = self.fast.block(name)
        if found is None or where is None:
            return None
        elem, shape, address = found
        buffer, offset, _ = where
        if address != self.run.base_address(buffer) + offset and math.prod(shape):
            raise SessionError(f"value {name!r} was described at 0x{address:x}, not at its planned block; "
                               "this is a bug in the step runner, please report it")
        return self._block_view(name, to_numpy_dtype(elem), shape)

    def _block_view(self, name: str, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        buffer, offset, _ = self.fast.block(name)
        end = offset + math.prod(shape) * dtype.itemsize
        return self._buffers[buffer][offset:end].view(dtype).reshape(shape)

    def owns(self, arr: Any) -> bool:
        """Whether `arr` lies in this run's OUTPUTS buffer: the caller's own memory (no later run writes it)."""
        out = self._outputs  # a view of a view keeps the array owning the memory as its base
        return out is not None and type(arr) is np.ndarray and arr.base is out

    def take_pending(self) -> tuple[Any, Any] | tuple[None, None]:
        pending, self.pending = self.pending, None
        return pending if pending is not None else (None, None)

    def close(self) -> None:
        """Give the held context back, and drop this run's buffers and context maker: the run's values reach
        this object (and it the StepRun, which calls back into it), so holding them here would keep the OUTPUTS
        buffer referenced until a garbage collection, and every run would take a new one."""
        self.run.close()
        self._buffers, self._outputs, self._make_context = [], None, None
