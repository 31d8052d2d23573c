"""If, Loop and Scan nodes computed by the C step runner together with their bodies (`ort_abi.ControlSpec`).

Where the CPU provider lays every node of a node's bodies out as C steps (`ort_cpu_ep.control_bodies`), the
bodies' steps join the session's step table after the graph's own steps (their indices past the last node's,
so no run of the graph's steps reaches them): their inputs are value table entries of the body's own values,
weights (described once, as the graph's weights are) and the outer scope's values (the graph's own entries),
and their outputs and workspace lie in the node's planned workspace block (its slot 0, which the provider
declares with the bodies' arena: `ort_cpu_ep.ops._bodies.body_bytes`). The node itself is one step whose
outputs are planned as any step's. C then computes an If's selected branch, or every iteration of a Loop or
Scan, inside that step (`ort_abi._fast_control_source`); whatever it does not finish alone leaves the node to
its Python kernel (the step is not started), which runs it as it does without the runner, checks included.

What stays with the Python kernel: a body node without a C step (strings, sequences, a nested If or Loop,
shapes not static), a Scan along another axis than the first, scan outputs without a planned block (a trip
count known only at run time), a body weight the session streams or uploads, a node output whose planned block
overlaps one of its inputs' (a Loop writes its carried values into its outputs while it still reads its
inputs), and a body that returns one carried input as another carried output.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

import ort_abi
from ort_graph import Node, to_numpy_dtype

from ._fast_steps import _buffer, placed_outputs, planned_outputs

BOOL, INT64, STRING = 9, 7, 8
CONTROL_OPS = ("If", "Loop", "Scan")


def control_step(executor: Any, layout: Any, node: Node, ids: dict[Any, int], devices: list[str],
                 limits: Mapping[str, int], outs: dict[str, tuple[int, int] | None], first: int,
                 specs: dict[int, ort_abi.StepSpec], constants: dict[int, np.ndarray]) -> ort_abi.StepSpec | None:
    """The step of If / Loop / Scan `node` with its bodies' steps added to `specs` from index `first` on (and their
    weights to `constants`), or None when the node runs in Python (see the module docstring)."""
    from ort_cpu_ep import control_bodies

    index = node.index
    if (node.op_type not in CONTROL_OPS or executor.allocators.get(index) is not None
            or (executor.weights is not None and executor.weights.args.get(index))):
        return None
    found = control_bodies(executor.kernels[index])
    if found is None:
        return None
    op, bodies = found
    slot = [w for w in layout.workspace_blocks(node) if w[0] == 0]
    arena = max(b.layout.nbytes for b in bodies)
    if len(slot) != 1 or slot[0][1] != "cpu" or slot[0][3] < arena + (ort_abi.LOOP_STATE_BYTES if op == "Loop" else 0):
        return None
    if not _inputs_typed(executor, node) or _outputs_overlap_inputs(executor, layout, node):
        return None
    if op != "If" and _crossed_carry(node, bodies[0].graph):
        return None
    if any(n not in executor.graph.values and n not in executor.graph.initializers for n in node.implicit_inputs()):
        return None
    buffer = _buffer(devices, slot[0][1], limits)
    placed = placed_outputs(executor, layout, node, devices, limits, outs)
    if buffer is None or placed is None or len(placed) > limits["outputs"]:
        return None
    offset = slot[0][2]
    ranges, results = [], []
    for body in bodies:
        entry = _body_entries(body.graph, ids)
        start = first + sum(count for _first, count in ranges) + len(ranges)  # one index apart: separate runs
        for k, pos in enumerate(sorted(body.layout.steps)):
            specs[start + k] = _moved(body.layout.steps[pos].spec, body.layout.ids, entry, buffer, offset)
        ranges.append((start, len(body.layout.steps)))
        results.append(tuple(entry(n) for n in body.graph.outputs))
        weights = {**{name: t.numpy() for name, t in body.graph.initializers.items()}, **body.constants}
        for name, arr in weights.items():  # described once per table, as the graph's weights are
            key = (id(body.graph), name)
            if key in ids:
                constants[ids[key]] = arr
    entries = tuple(ids.setdefault(n, len(ids)) if n else -1 for n in node.inputs)
    if op == "If":
        control = ort_abi.ControlSpec(ort_abi.CONTROL_IF, tuple(ranges), tuple(results))
        return ort_abi.StepSpec(ort_abi.CONTROL_KERNEL, entries[:1], (BOOL,), planned_outputs(ids, placed), (),
                                control)
    body = bodies[0].graph
    read = set(bodies[0].layout.ids) | set(body.outputs)
    params = tuple(ids.setdefault((id(body), n), len(ids)) if n in read else -1 for n in body.inputs)
    types = tuple(_elem(executor, n) for n in node.inputs)
    if op == "Loop":
        control = ort_abi.ControlSpec(ort_abi.CONTROL_LOOP, tuple(ranges), tuple(results), params,
                                      (buffer, offset + arena), len(node.inputs) - 2)
    else:
        m = node.attr("num_scan_inputs")
        outs = len(node.outputs) - (len(node.inputs) - m)
        reversed_ = tuple(node.attr("scan_input_directions") or (0,) * m) + tuple(
            node.attr("scan_output_directions") or (0,) * outs)
        sizes = tuple(to_numpy_dtype(t).itemsize for t in types[len(types) - m:])
        control = ort_abi.ControlSpec(ort_abi.CONTROL_SCAN, tuple(ranges), tuple(results), params, None,
                                      len(node.inputs) - m, tuple(int(bool(d)) for d in reversed_), sizes)
    return ort_abi.StepSpec(ort_abi.CONTROL_KERNEL, entries, types, planned_outputs(ids, placed), (), control)


def _body_entries(graph: Any, ids: dict[Any, int]) -> Any:
    """name -> its value table entry: the body's own values keyed by (body, name), the outer scope's by name."""
    own = set(graph.inputs) | set(graph.initializers) | {o for n in graph.nodes for o in n.outputs if o}

    def entry(name: str) -> int:
        key = (id(graph), name) if name in own else name
        return ids.setdefault(key, len(ids))

    return entry


def _moved(spec: ort_abi.StepSpec, local: Mapping[str, int], entry: Any, buffer: int, offset: int) -> ort_abi.StepSpec:
    """A body step's spec (its own value ids, its blocks at arena offsets of buffer 0) in the session's table:
    the session's entries, its blocks at `offset` of run buffer `buffer` (the node's workspace block)."""
    names = {i: n for n, i in local.items()}
    outputs = tuple(o if o.value < 0 else attrs.evolve(o, value=entry(names[o.value]), buffer=buffer,
                                                       offset=offset + o.offset) for o in spec.outputs)
    workspace = tuple((slot, buffer, offset + at, size) for slot, _b, at, size in spec.workspace)
    inputs = tuple(entry(names[i]) if i >= 0 else -1 for i in spec.inputs)
    return ort_abi.StepSpec(spec.kernel, inputs, spec.input_types, outputs, workspace)


def _elem(executor: Any, name: str) -> int:
    v = executor.graph.values.get(name)
    t = executor.graph.initializers.get(name)
    return int(v.dtype or 0) if v is not None and v.dtype else int(t.dtype) if t is not None else 0


def _inputs_typed(executor: Any, node: Node) -> bool:
    """The inputs C reads have the element types it reads them as (a bool condition, an int64 trip count, the
    carried and scanned values of any type but strings)."""
    head = {"If": [BOOL], "Loop": [INT64, BOOL], "Scan": []}[node.op_type]
    if node.op_type == "If":
        return _elem(executor, node.inputs[0]) == BOOL
    return (all(not n or _elem(executor, n) == t for n, t in zip(node.inputs, head))
            and all(n and _elem(executor, n) not in (0, STRING) for n in node.inputs[len(head):]))


def _outputs_overlap_inputs(executor: Any, layout: Any, node: Node) -> bool:
    outs = [layout.value_block(n) for n in node.outputs if n]
    ins = [layout.value_block(n) for n in executor._facts[node.index].reads if n]
    return any(o is not None and i is not None and o[0] == i[0] and o[1] < i[1] + i[2] and i[1] < o[1] + o[2]
               for o in outs for i in ins)


def _crossed_carry(node: Node, body: Any) -> bool:
    """Whether a carried output is a carried input of another position (C copies each iteration's carried
    values into the outputs in turn: a later one would read an earlier one's new value)."""
    if node.op_type == "Loop":
        n = len(node.inputs) - 2
        carried_in, carried_out = body.inputs[2:2 + n], body.outputs[1:1 + n]
    else:
        n = len(node.inputs) - node.attr("num_scan_inputs")
        carried_in, carried_out = body.inputs[:n], body.outputs[:n]
    return any(name in carried_in and carried_in.index(name) != j for j, name in enumerate(carried_out))
