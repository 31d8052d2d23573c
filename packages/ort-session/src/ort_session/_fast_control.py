"""If and Loop nodes computed by the C step runner together with their bodies (`ort_abi.ControlSpec`).

Where the CPU provider lays every node of a node's bodies out as C steps (`ort_cpu_ep.control_bodies`), the
bodies' steps join the session's step table after the graph's own steps (their indices past the last node's,
so no run of the graph's steps reaches them): their inputs are value table entries of the body's own values,
weights (described once, as the graph's weights are) and the outer scope's values (the graph's own entries),
and their outputs and workspace lie in the node's planned workspace block (its slot 0, which the provider
declares with the bodies' arena: `ort_cpu_ep.ops._bodies.body_bytes`). The node itself is one step whose
outputs are planned as any step's. C then computes an If's selected branch, or every iteration of a Loop,
inside that step (`ort_abi._fast_control_source`); whatever it does not finish alone leaves the node to its
Python kernel (the step is not started), which runs it as it does without the runner, checks included.

What stays with the Python kernel: a body node without a C step (strings, sequences, a nested If or Loop,
shapes not static), a Loop with scan outputs, a body weight the session streams or uploads, a node output
whose planned block overlaps one of its inputs' (a Loop writes its carried values into its outputs while it
still reads its inputs), and a Loop body that returns one carried input as another carried output.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

import ort_abi
from ort_graph import Node

from ._fast_steps import _buffer, placed_outputs, planned_outputs

BOOL, INT64 = 9, 7
CONTROL_OPS = ("If", "Loop")


def control_step(executor: Any, layout: Any, node: Node, ids: dict[Any, int], devices: list[str],
                 limits: Mapping[str, int], outs: dict[str, tuple[int, int] | None], first: int,
                 specs: dict[int, ort_abi.StepSpec], constants: dict[int, np.ndarray]) -> ort_abi.StepSpec | None:
    """The step of If / Loop `node` with its bodies' steps added to `specs` from index `first` on (and their
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
    loop = op == "Loop"
    slot = [w for w in layout.workspace_blocks(node) if w[0] == 0]
    arena = max(b.layout.nbytes for b in bodies)
    if len(slot) != 1 or slot[0][1] != "cpu" or slot[0][3] < arena + (ort_abi.LOOP_STATE_BYTES if loop else 0):
        return None
    if not _inputs_typed(executor, node, loop) or _outputs_overlap_inputs(executor, layout, node):
        return None
    if loop and _crossed_carry(bodies[0].graph):
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
        for name, t in body.graph.initializers.items():
            key = (id(body.graph), name)
            if key in ids:
                constants[ids[key]] = t.numpy()
    cond = ids.setdefault(node.inputs[0], len(ids)) if node.inputs[0] else -1
    if not loop:
        kind, inputs, types, params, state = ort_abi.CONTROL_IF, (cond,), (BOOL,), (), None
    else:
        body = bodies[0].graph
        trips = cond
        cond = ids.setdefault(node.inputs[1], len(ids)) if node.inputs[1] else -1
        carried = tuple(ids.setdefault(n, len(ids)) for n in node.inputs[2:])
        inputs = (trips, cond, *carried)
        types = (INT64, BOOL, *(int(executor.graph.values[n].dtype or 0) if n in executor.graph.values
                                else int(executor.graph.initializers[n].dtype) for n in node.inputs[2:]))
        read = {n for b in bodies for n in b.layout.ids} | set(body.outputs)
        params = tuple(ids.setdefault((id(body), n), len(ids)) if n in read else -1 for n in body.inputs)
        kind, state = ort_abi.CONTROL_LOOP, (buffer, offset + arena)
    control = ort_abi.ControlSpec(kind, tuple(ranges), tuple(results), params, state)
    return ort_abi.StepSpec(ort_abi.CONTROL_KERNEL, inputs, types, planned_outputs(ids, placed), (), control)


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


def _inputs_typed(executor: Any, node: Node, loop: bool) -> bool:
    """The inputs C reads have the element types it reads them as (a bool condition, an int64 trip count)."""
    def elem(name: str) -> int:
        v = executor.graph.values.get(name)
        t = executor.graph.initializers.get(name)
        return int(v.dtype or 0) if v is not None else int(t.dtype) if t is not None else 0

    wanted = [(node.inputs[0], INT64), (node.inputs[1], BOOL)] if loop else [(node.inputs[0], BOOL)]
    carried = node.inputs[2:] if loop else []
    return (all(not n or elem(n) == t for n, t in wanted) and all(n and elem(n) not in (0, 8) for n in carried))


def _outputs_overlap_inputs(executor: Any, layout: Any, node: Node) -> bool:
    outs = [layout.value_block(n) for n in node.outputs if n]
    ins = [layout.value_block(n) for n in executor._facts[node.index].reads if n]
    return any(o is not None and i is not None and o[0] == i[0] and o[1] < i[1] + i[2] and i[1] < o[1] + o[2]
               for o in outs for i in ins)


def _crossed_carry(body: Any) -> bool:
    """Whether a carried output is a carried input of another position (C copies each iteration's carried
    values into the outputs in turn: a later one would read an earlier one's new value)."""
    carried_in = body.inputs[2:]
    return any(name in carried_in and carried_in.index(name) != j for j, name in enumerate(body.outputs[1:]))
