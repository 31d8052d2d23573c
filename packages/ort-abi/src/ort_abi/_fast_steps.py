"""Planned steps computed through the bridge's C step runner (`_fast_source.py`): a session whose plan
places a C kernel's outputs and workspace at known offsets of its run buffers describes each such step
once (`StepSpec` -> `StepTable`); each run then holds one pool context and a value table (`StepRun`), and
a step costs one call into C instead of a context built in Python and a Python call per output and slot.

Nothing changes for the kernel: it sees the same OrtKernelApi. Whatever C does not answer (a request that
contradicts the plan or outgrows its block, scratch, any other host function) goes to the Python host
function with the same context handle; the first such call builds the step's Python context through the
run's `on_python(step)` (the session's own context for the node, exactly as without the runner), so every
check, refusal and error is the one the Python path gives."""

from __future__ import annotations

import operator
from array import array
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from ._ckernel import CKernel
from ._errors import KernelDefError
from ._fast_context import _elem_type, fast_contexts
from ._fast_control import ControlSpec, check_controls, fill_control
from ._fast_source import FAST_INPUTS, FAST_OUTPUTS, FAST_WORKSPACE
from ._ffi import require_c
from ._run_checks import checks_every_iteration
from ._shapefunc import TypeCheckedKernel
from ._step_index import StepIndex, StepMap
from ._views import ContextView

__all__ = ["STEP_DONE", "STEP_FAILED", "STEP_INCOMPLETE", "STEP_NOT_STARTED", "PlannedOutput", "StepRun", "StepSpec", "StepTable", "c_step_kernel", "step_limits"]

_ALIVE = operator.attrgetter("_alive")  # of a CKernel: False once released

# STEP_INCOMPLETE: success, but a named output is not in the table (answered in Python, or never asked for)
STEP_DONE, STEP_NOT_STARTED, STEP_FAILED, STEP_INCOMPLETE = 0, 1, 2, 3


def step_limits() -> dict[str, int]:
    """The runner's capacities: inputs, outputs, rank, workspace slots and buffers a step may have."""
    ffi, _ = require_c("planned C steps")
    output, run = ffi.new("ort_abi_fast_output*"), ffi.new("ort_abi_fast_run*")
    return {"inputs": FAST_INPUTS, "outputs": FAST_OUTPUTS, "rank": len(output.dims), "workspace": FAST_WORKSPACE,
            "buffers": len(run.bases)}


def c_step_kernel(kernel: Any, input_types: Sequence[int]) -> CKernel | None:
    """The C kernel behind `kernel` when the runner can compute it with inputs of these element types: a
    CKernel, or one behind the type check of a schema-less op whose constraints these types satisfy (the
    runner then checks each input's type at every step). None otherwise."""
    if _compute_replaced(kernel):  # a compute replaced on the object (a wrapper, a test hook)
        return None
    if isinstance(kernel, TypeCheckedKernel):
        from ._shapefunc import check_input_types

        if check_input_types(kernel._def, list(input_types), has_schema=False) is not None:
            return None
        kernel = kernel._kernel
    if type(kernel) is not CKernel or kernel.released or _compute_replaced(kernel):
        return None
    return kernel


def _compute_replaced(kernel: Any) -> bool:
    """Whether `kernel.compute` is set on the object rather than its class's method. Asked without reading
    `__dict__`, which would give every kernel a dict of its own (64 B a node): the class's method is bound
    anew at every lookup, while one set on the object is the same object both times."""
    first, second = getattr(kernel, "compute", None), getattr(kernel, "compute", None)
    return (first is second or getattr(first, "__self__", None) is not kernel
            or getattr(first, "__func__", None) is not getattr(type(kernel), "compute", None))


@attrs.frozen
class PlannedOutput:
    """Where one output of a step goes: its value table entry (-1: an unnamed output), its planned block
    (`buffer` -1: none, Python allocates it) and what a request for it must match."""

    value: int
    buffer: int = -1
    elem_type: int = 0
    item_size: int = 0
    offset: int = 0
    capacity: int = 0
    shape: tuple[int | None, ...] | None = None  # planned shape: None extents are symbolic; None: not planned


@attrs.frozen
class StepSpec:
    """One step: its C kernel, its inputs' table entries (-1: omitted) with the element type each must
    have, its outputs, and its planned workspace slots as (slot id, buffer, offset, bytes)."""

    kernel: CKernel
    inputs: tuple[int, ...]
    input_types: tuple[int, ...]
    outputs: tuple[PlannedOutput, ...]
    workspace: tuple[tuple[int, int, int, int], ...] = ()
    control: ControlSpec | None = None  # a control-flow step (`_fast_control`): `kernel` is CONTROL_KERNEL


class StepTable:
    """The C steps of one plan, built once and read by every run; `constants` (table entry -> array, e.g.
    weights) are described once and kept alive here."""

    def __init__(self, specs: Mapping[int, StepSpec], value_count: int, constants: Mapping[int, np.ndarray]) -> None:
        ffi, _ = require_c("planned C steps")
        self._ffi = ffi
        self.value_count = value_count
        self._steps = ffi.new("ort_abi_fast_step[]", max(len(specs), 1))
        limits = step_limits()
        for index, spec in specs.items():
            _check_limits(index, spec, limits)
        check_controls(specs, value_count)
        # every step's inputs, outputs and workspace slots, packed: each step points at its own run of them
        n_in, n_out, n_ws = (sum(len(getattr(s, f)) for s in specs.values()) for f in ("inputs", "outputs", "workspace"))
        self._arrays = arrays = (ffi.new("int32_t[]", max(n_in, 1)), ffi.new("int32_t[]", max(n_in, 1)),
                                 ffi.new("ort_abi_fast_output[]", max(n_out, 1)),
                                 ffi.new("ort_abi_fast_workspace[]", max(n_ws, 1)))  # the steps point into them
        # step index -> its step / kernel / end of its run, read through the packed positions (`_step_index`)
        self._index = steps = StepIndex(specs)
        kernels = tuple(specs[index].kernel for index in steps)
        self.kernels: Mapping[int, CKernel] = StepMap(steps, kernels.__getitem__)
        self.pointers: Mapping[int, Any] = StepMap(steps, self._steps.__add__)
        self._kernels = kernels  # `released`, asked every run
        self._released = False
        # the steps of control-flow bodies: C runs them inside their node's step, never the host
        self.body_steps = frozenset(k for s in specs.values() if s.control is not None
                                    for first, count in s.control.bodies for k in range(first, first + count))
        self._controls: list[Any] = []  # the control-flow steps' structs and arrays, which the steps point at
        at_in = at_out = at_ws = 0
        self._producers = array("i", [-1]) * max(value_count, 1)  # value entry -> the output making it, -1: none
        for k, (_index, spec) in enumerate(sorted(specs.items())):
            s = self._steps[k]
            s.inputs, s.input_types, s.outputs, s.workspace = (arrays[0] + at_in, arrays[1] + at_in,
                                                                arrays[2] + at_out, arrays[3] + at_ws)
            at_in, at_out, at_ws = at_in + len(spec.inputs), at_out + len(spec.outputs), at_ws + len(spec.workspace)
            _fill_step(ffi, s, spec)
            for j, o in enumerate(spec.outputs):
                if 0 <= o.value < value_count:
                    self._producers[o.value] = at_out - len(spec.outputs) + j
        for index, spec in specs.items():
            if spec.control is not None:
                fill_control(ffi, self.pointers[index], spec.control, self.pointers.__getitem__, self._controls)
        self.constants = ffi.new("ort_abi_fast_value[]", max(value_count, 1))
        self._keep = []  # the described arrays: each owns the memory its entry points at (not its cffi buffer)
        for entry, arr in constants.items():
            if describe(ffi, self.constants[entry], arr) is not None:
                self._keep.append(arr)
        self._bytes = ffi.sizeof("ort_abi_fast_value") * max(value_count, 1)
        self._first = int(ffi.cast("uintptr_t", self._steps))
        # step -> the end (exclusive) of the run of consecutive table steps it starts: one C call computes them
        ends = array("i", bytes(4 * len(steps)))
        for k in reversed(range(len(steps))):
            index = steps.index(k)
            ends[k] = ends[k + 1] if k + 1 < len(steps) and steps.index(k + 1) == index + 1 else index + 1
        self.ends: Mapping[int, int] = StepMap(steps, ends.__getitem__)

    def block(self, entry: int) -> tuple[int, int, int] | None:
        """(run buffer, offset, bytes) of the planned block a step of this table writes value entry `entry`
        into; None when no step of the table makes that entry in a planned block."""
        k = self._producers[entry] if 0 <= entry < len(self._producers) else -1
        if k < 0:
            return None
        o = self._arrays[2][k]
        return None if o.buffer < 0 else (int(o.buffer), int(o.offset), int(o.capacity))

    def step_at(self, address: int) -> int | None:
        """The index of the step at `address` in this table, None when it is not one of its steps."""
        position, within = divmod(address - self._first, self._ffi.sizeof("ort_abi_fast_step"))
        return self._index.index(position) if within == 0 and 0 <= position < len(self._index) else None

    def released(self) -> bool:
        """Whether a step's kernel was released (the session closed): its runs take the Python path."""
        if self._released:
            return True
        self._released = not all(map(_ALIVE, self._kernels))  # once released, always
        return self._released


def _check_limits(index: int, spec: StepSpec, limits: Mapping[str, int]) -> None:
    """A step within the runner's capacities (`step_limits`): its arrays are sized to it, C reads no further."""
    counts = {"inputs": len(spec.inputs), "outputs": len(spec.outputs), "workspace": len(spec.workspace)}
    if len(spec.input_types) != len(spec.inputs):
        raise KernelDefError(f"step {index}: {len(spec.inputs)} inputs but {len(spec.input_types)} input types; "
                             "give one element type per input")
    over = {k: n for k, n in counts.items() if n > limits[k]}
    over |= {f"rank of output {j}": len(o.shape) for j, o in enumerate(spec.outputs)
             if o.shape is not None and len(o.shape) > limits["rank"]}
    if over:
        raise KernelDefError(f"step {index} has {over!r}, over the C step runner's capacities {limits!r}; run "
                             "that node in Python (leave it out of the table)")


def _fill_step(ffi: Any, s: Any, spec: StepSpec) -> None:
    s.impl = spec.kernel._impl if spec.control is None else ffi.NULL
    s.input_count, s.output_count, s.workspace_count = len(spec.inputs), len(spec.outputs), len(spec.workspace)
    for i, (entry, elem) in enumerate(zip(spec.inputs, spec.input_types)):
        s.inputs[i], s.input_types[i] = entry, elem
    for j, o in enumerate(spec.outputs):
        t = s.outputs[j]
        t.value, t.buffer, t.elem_type, t.item_size = o.value, o.buffer, o.elem_type, o.item_size
        t.offset, t.capacity = o.offset, o.capacity
        t.rank = -1 if o.shape is None else len(o.shape)
        for d, extent in enumerate(o.shape or ()):
            t.dims[d] = extent if isinstance(extent, int) and extent >= 0 else -1
    for k, (slot_id, buffer, offset, size) in enumerate(spec.workspace):
        w = s.workspace[k]
        w.slot_id, w.buffer, w.offset, w.size = slot_id, buffer, offset, size


def describe(ffi: Any, v: Any, arr: Any) -> Any | None:
    """Describe `arr` in table entry `v` (state 1), or leave it undescribed (state 0: a step reading it runs
    in Python) when it is not a C-contiguous host array of an ONNX element type within the runner's rank.
    Returns the buffer object to keep alive while the entry is used."""
    if (type(arr) is not np.ndarray or not arr.flags.c_contiguous or arr.ndim > len(v.dims)
            or _elem_type(arr.dtype) < 0):
        v.state = 0
        return None
    data = ffi.from_buffer(arr) if arr.nbytes else ffi.NULL
    v.writable, v.elem_type, v.rank, v.count, v.data = 0, _elem_type(arr.dtype), arr.ndim, arr.size, data
    v.dims[0:arr.ndim] = arr.shape
    v.state = 1
    return data


class StepRun:
    """One run through a StepTable: a held pool context, the value table (starting from the table's
    constants) and the run's buffers. `on_python(step)` builds the step's Python KernelContext the first
    time C defers to Python during that step. Use as a context manager, or call `close()`."""

    def __init__(self, table: StepTable, bases: Sequence[np.ndarray], exact: bool,
                 on_python: Callable[[int], Any]) -> None:
        ffi, lib = require_c("planned C steps")
        self._ffi, self._lib, self.table, self._on_python = ffi, lib, table, on_python
        self._pool = fast_contexts(ffi, lib)
        self.slot = self._pool.hold(self) if self._pool is not None else None
        self.values = ffi.new("ort_abi_fast_value[]", max(table.value_count, 1))
        ffi.memmove(self.values, table.constants, table._bytes)
        self._run = ffi.new("ort_abi_fast_run*")
        self._keep: list[Any] = []
        self._described: dict[int, Any] = {}  # table entry -> the buffer its description points into
        self._bases: list[Any] = []  # the run buffers' cffi buffers (kept until `close`, or replaced by `restart`)
        self._addresses = []
        for k, buf in enumerate(bases):
            data = ffi.from_buffer(buf, require_writable=True)
            self._bases.append(data)
            self._run.bases[k] = ffi.cast("char*", data)
            self._addresses.append(int(ffi.cast("uintptr_t", data)))
        self._run.values, self._run.exact = self.values, int(exact)
        if self.slot is not None:
            self._run.context = self._pool.context(self.slot)
        self._status = ffi.new("OrtStatus**")
        self._step_run, self._pointers, self.last = lib.ort_abi_fast_step_run, table.pointers, STEP_DONE
        self._steps_run, self._done = lib.ort_abi_fast_steps_run, ffi.new("int32_t*")
        self.step: int | None = None
        self.python_view: Any = None  # the Python context of the step computing, once C deferred to Python

    @property
    def usable(self) -> bool:
        return self.slot is not None

    def describe(self, entry: int, arr: Any) -> None:
        """Describe `arr` in table entry `entry`, kept alive until the entry is described again or the run closes
        (a body run describes its inputs again every iteration: what an earlier iteration described is let go)."""
        data = describe(self._ffi, self.values[entry], arr)
        if data is not None:
            self._described[entry] = data
        else:
            self._described.pop(entry, None)

    def restart(self, bases: Sequence[np.ndarray | None], template: Any = None, exact: bool = True) -> bool:
        """Ready this run, closed, for another pass over its table: a pool context held again (False when none
        is free: the run stays closed), the value table from `template` (a `freeze()` copy, else the table's
        constants), the counters at 0, `exact` as in the constructor; `bases[k]` becomes run buffer k (None: the buffer of the previous pass
        stays, still referenced here). A replayed run (the session's `_quick_run`) reuses one StepRun instead of
        building one per run."""
        if self.slot is None:
            self.slot = self._pool.hold(self) if self._pool is not None else None
            if self.slot is None:
                return False
            self._run.context = self._pool.context(self.slot)
        ffi = self._ffi
        ffi.memmove(self.values, template if template is not None else self.table.constants, self.table._bytes)
        self._keep.clear()
        self._described.clear()
        bases_kept, addresses, run = self._bases, self._addresses, self._run
        for k, buf in enumerate(bases):
            if buf is None:
                if k >= len(bases_kept) or bases_kept[k] is None:
                    raise ValueError(f"run buffer {k} was not kept by the last close(); give it again")
                continue
            data = ffi.from_buffer(buf, require_writable=True)
            run.bases[k] = data
            address = int(ffi.cast("uintptr_t", data))
            if k < len(addresses):
                addresses[k], bases_kept[k] = address, data
            else:
                addresses.append(address)
                bases_kept.append(data)
        run.planned_values = run.workspace_from_plan = run.deferred = 0
        run.exact = int(exact)
        run.step = ffi.NULL
        self.step, self.python_view, self.last = None, None, STEP_DONE
        return True

    def freeze(self) -> Any:
        """A copy of the value table as described now: a `restart` template (the entries described since the
        table's constants, e.g. the feeds, start described; `set_data` points them at each run's arrays)."""
        template = self._ffi.new("ort_abi_fast_value[]", max(self.table.value_count, 1))
        self._ffi.memmove(template, self.values, self.table._bytes)
        return template

    def set_data(self, entry: int, arr: np.ndarray) -> None:
        """Point described entry `entry` at `arr`'s data; `arr` is a C-contiguous host array of the element type and
        shape the entry was described with (the caller checked: nothing is checked here)."""
        data = self._ffi.from_buffer(arr) if arr.nbytes else self._ffi.NULL
        self._keep.append(data)
        self.values[entry].data = data

    def compute(self, step: int) -> int:
        """Compute planned step `step`: STEP_DONE, STEP_NOT_STARTED, STEP_FAILED or STEP_INCOMPLETE (also `last`; the kernel's
        status is `status`). After it, `python_view` is the step's Python context when C deferred to Python
        (the caller finishes and closes it)."""
        self.step, self.python_view = step, None
        self._run.checked = 1 if checks_every_iteration() else 0
        self.last = rc = self._step_run(self._run, self._pointers[step], self._status)
        self.step = None
        return rc

    def compute_range(self, step: int, count: int) -> int:
        """Compute the `count` consecutive table steps from `step` in one call into C; returns how many were
        done (STEP_DONE, no Python context built). When fewer than `count`, the next step was computed too
        and ended otherwise: `last`, `status` and `python_view` are its, as after `compute` of it."""
        self.step, self.python_view = None, None
        self._run.checked = 1 if checks_every_iteration() else 0
        self.last = self._steps_run(self._run, self._pointers[step], count, self._done, self._status)
        return int(self._done[0])

    @property
    def status(self) -> Any:
        """The OrtStatus* the last computed step's kernel returned (NULL on success)."""
        return self._status[0]

    def context_view(self) -> Any:
        """The computing step's Python context (built on first use): what the host functions see when C
        defers to Python. Outputs C already answered are in it."""
        if self.python_view is None:
            step = self.step
            if self._run.step != self._ffi.NULL:  # the step computing (`compute_range`'s, or a control body's)
                inner = self.table.step_at(int(self._ffi.cast("uintptr_t", self._run.step)))
                if inner in self.table.body_steps:  # no Python context: the request fails, the node runs in Python
                    return None
                step = inner if step is None else step
            if step is None:
                return None
            view = ContextView(self._on_python(step))
            view.fast = self.slot
            self.python_view = view
            self._run.deferred = 1  # `compute_range` stops after this step: the host finishes it
        return self.python_view

    def base_address(self, buffer: int) -> int:
        """The address of run buffer `buffer`."""
        return self._addresses[buffer]

    def answered(self, index: int) -> tuple[int, ...] | None:
        """The shape of output `index` of the computing step when C answered its request, else None."""
        v = self._pool.output_value(self.slot, index)
        return tuple(v.dims[0:v.rank]) if v is not None and v.state == 1 else None

    def entry(self, entry: int) -> tuple[int, tuple[int, ...], int] | None:
        """(element type, shape, data address) of a described table entry, None when undescribed."""
        v = self.values[entry]
        if v.state != 1:
            return None
        return int(v.elem_type), tuple(v.dims[0:v.rank]), int(self._ffi.cast("uintptr_t", v.data))

    @property
    def planned_values(self) -> int:
        return int(self._run.planned_values)

    @property
    def workspace_from_plan(self) -> int:
        return int(self._run.workspace_from_plan)

    def close(self, keep_bases: Sequence[int] = ()) -> None:
        """Give the pool context back and drop what this run referenced: the described arrays and the run
        buffers, except those of `keep_bases` (kept for the next `restart` to leave in place)."""
        if self.slot is not None:
            self._pool.release(self.slot)
            self.slot = None
        self._keep.clear()
        self._described.clear()
        for k in range(len(self._bases)):
            if k not in keep_bases:
                self._bases[k] = None
                self._run.bases[k] = self._ffi.NULL

    def __enter__(self) -> StepRun:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
