"""Control-flow steps of a StepTable: an If, Loop or Scan whose bodies are steps of the same table (the C in
`_fast_control_source.py` says what a step computes and when it leaves the node to the host).

A session that lays a body out as steps (each body node a C kernel, its values in the node's workspace block)
describes the node as a `StepSpec` whose `kernel` is `CONTROL_KERNEL` and whose `control` is a `ControlSpec`:
the bodies by their step indices in the table (consecutive, none of them a control step), each body's output
entries, and for a Loop the body's input entries and where its iteration number and condition are written.
The node's inputs are what C reads: If: the condition; Loop: the trip count, the condition (-1: omitted) and
the carried values; Scan: its states and scan inputs. Its outputs are planned as any step's: the node's outputs
(a Loop's or Scan's carried values, then its scan outputs)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from ._errors import KernelDefError

__all__ = ["CONTROL_IF", "CONTROL_KERNEL", "CONTROL_LOOP", "CONTROL_SCAN", "ControlSpec", "LOOP_STATE_BYTES"]

CONTROL_IF, CONTROL_LOOP, CONTROL_SCAN = 1, 2, 3
LOOP_STATE_BYTES = 16  # a Loop's iteration number (int64) and condition (bool), written before every iteration


class _ControlKernel:
    """The `kernel` of a control-flow step: no OrtKernelImpl (C computes the step), never released."""

    _impl: Any = None  # NULL in the step
    _alive = True
    released = False
    library = "control flow (the step runner)"
    node = None


CONTROL_KERNEL = _ControlKernel()


@attrs.frozen
class ControlSpec:
    """`kind` CONTROL_IF (bodies: then, else), CONTROL_LOOP or CONTROL_SCAN (one body); `bodies`: (first step
    index, step count) each; `results`: each body's output entries (If: in the node's output order; Loop:
    condition, carried, scans; Scan: states, scans). Loop and Scan: `params` the body's input entries (Loop:
    iteration number, condition, carried; Scan: states, scan slices; -1: the body does not read it) and `carried`
    how many values are carried. Loop: `state` (run buffer, offset) of LOOP_STATE_BYTES of the node's workspace.
    Scan: `reversed` per scan input then per scan output (1: from the end), `item_sizes` per scan input."""

    kind: int
    bodies: tuple[tuple[int, int], ...]
    results: tuple[tuple[int, ...], ...]
    params: tuple[int, ...] = ()
    state: tuple[int, int] | None = None
    carried: int = 0
    reversed: tuple[int, ...] = ()
    item_sizes: tuple[int, ...] = ()


def check_controls(specs: Mapping[int, Any], value_count: int) -> None:
    """Each control step's bodies are runs of consecutive table steps that are not control steps, its entries
    within the value table, and its shape the kind's (C relies on all of it)."""
    for index, spec in specs.items():
        control = spec.control
        if control is None:
            continue
        why = _invalid(spec, control, specs, value_count)
        if why:
            raise KernelDefError(f"control-flow step {index}: {why}; describe the bodies as consecutive C steps of "
                                 "the same table (or leave the node out of the table)")


def _invalid(spec: Any, control: ControlSpec, specs: Mapping[int, Any], value_count: int) -> str:
    if spec.kernel is not CONTROL_KERNEL:
        return f"its kernel is {spec.kernel!r}, not CONTROL_KERNEL"
    bodies = {CONTROL_IF: 2, CONTROL_LOOP: 1, CONTROL_SCAN: 1}.get(control.kind, 0)
    if not bodies or len(control.bodies) != bodies or len(control.results) != bodies:
        return f"kind {control.kind} with {len(control.bodies)} bodies and {len(control.results)} result lists"
    for first, count in control.bodies:
        steps = range(first, first + count)
        # every index of the range a table step: their positions in the table are consecutive too
        if count < 0 or any(k not in specs or specs[k].control is not None for k in steps):
            return f"body steps {first}..{first + count - 1} are not all table steps without control"
    ins, outs, n = len(spec.inputs), len(spec.outputs), control.carried
    want = {CONTROL_IF: outs, CONTROL_LOOP: outs + 1, CONTROL_SCAN: outs}[control.kind]
    if any(len(r) != want for r in control.results):
        return f"result lists of {[len(r) for r in control.results]} entries for {outs} outputs"
    results = [e for r in control.results for e in r]
    if any(not 0 <= e < value_count for e in results) or any(not -1 <= e < value_count for e in control.params):
        return f"entries {results!r} / {control.params!r} outside the value table of {value_count}"
    if control.kind == CONTROL_LOOP and not (ins == n + 2 == len(control.params) and 0 <= n <= outs
                                             and control.state is not None):
        return (f"a Loop of {n} carried values needs {n + 2} inputs and body params and a state block, has "
                f"{ins}, {len(control.params)} and {control.state!r}")
    if control.kind == CONTROL_SCAN and not (0 <= n < ins and n <= outs and len(control.params) == ins
                                             and len(control.reversed) == ins + outs - 2 * n
                                             and len(control.item_sizes) == ins - n):
        return (f"a Scan of {n} states, {ins} inputs and {outs} outputs with {len(control.params)} body params, "
                f"{len(control.reversed)} directions and {len(control.item_sizes)} item sizes")
    return ""


def fill_control(ffi: Any, step: Any, control: ControlSpec, pointer: Any, keep: list[Any]) -> None:
    """Fill step `step`'s `ort_abi_fast_control` (kept alive in `keep`); `pointer(index)` is the step at `index`."""
    c = ffi.new("ort_abi_fast_control*")
    c.kind, c.body_count = control.kind, len(control.bodies)
    for b, ((first, count), results) in enumerate(zip(control.bodies, control.results)):
        c.bodies[b] = pointer(first) if count else ffi.NULL
        c.counts[b] = count
        arr = ffi.new("int32_t[]", max(len(results), 1))
        arr[0:len(results)] = list(results)
        c.results[b] = arr
        keep.append(arr)
    arrays = []
    for values in (control.params, control.reversed, control.item_sizes):
        arr = ffi.new("int32_t[]", max(len(values), 1))
        arr[0:len(values)] = list(values)
        arrays.append(arr)
    c.params, c.reversed, c.item_sizes = arrays
    c.param_count, c.carried = len(control.params), control.carried
    c.state_buffer, c.state_offset = control.state if control.state is not None else (-1, 0)
    keep += [c, *arrays]
    step.control = c
