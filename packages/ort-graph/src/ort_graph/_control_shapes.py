"""Output shapes of control flow (If, Loop, Scan), worked out through their bodies.

Each body is resolved like a graph of its own (`_python_pass`): its inputs take the shapes the node feeds
them (Loop: iteration number, condition, carried values; Scan: the states and one slice of each scan
input), the outer-scope values it reads take their shapes in the enclosing graph. Then:

- If: the two branches' outputs merged: a dim both give is kept, dims that differ become an anonymous
  data-dependent dim (`unk__If_o0_d1_data_dependent`: only a run tells) and a rank that differs leaves the
  rank unknown. Loop and Scan merge their carried values with their inputs likewise.
- Loop: carried outputs merged with their inputs; scan outputs get the trip count in front: static where
  the trip count is a constant and the loop cannot stop early (no condition input, or a constant true one,
  and a body whose condition output is its condition input or a constant true), else the anonymous
  `unk__<node>_trip_count_data_dependent` (planned only at run time; see `loop_trip_count`).
- Scan (opset 9+): states merged; scan outputs get the sequence length at their `scan_output_axes`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from ._declared import DATA_DEPENDENT
from ._ir import Graph, Node, Shape, Value

Type = tuple[int, Shape | None]
BodyPass = Callable[[Graph, dict[str, int], Mapping[str, int], object], None]

CONTROL_FLOW = frozenset({"If", "Loop", "Scan"})


def is_control_flow(node: Node, opsets: Mapping[str, int]) -> bool:
    if node.domain not in ("", "ai.onnx") or node.op_type not in CONTROL_FLOW:
        return False
    return node.op_type != "Scan" or opsets.get("", 1) >= 9  # Scan-8 (batched) keeps ONNX inference's answer


def _outer_value(graph: Graph, name: str) -> Value | None:
    g: Graph | None = graph
    while g is not None:
        v = g.values.get(name)
        if v is not None and (v.producer is not None or name in g.inputs or name in g.initializers
                              or v.shape is not None):
            return v
        g = g.parent_node.graph if g.parent_node is not None else None
    return None


def _prepare_body(body: Graph, inputs: list[Type]) -> None:
    """Forget the body's previous resolution; its inputs and outer references take the given shapes."""
    for v in body.values.values():
        if v.name not in body.initializers and v.name not in body.inputs:
            v.shape, v.dtype = None, 0
    for name, (dtype, shape) in zip(body.inputs, inputs):
        v = body.value(name)
        v.dtype = dtype or v.dtype
        v.shape = shape
    outer = body.parent_node.graph if body.parent_node is not None else None
    for name in body.outer_references():
        src = _outer_value(outer, name) if outer is not None else None
        if src is not None:
            v = body.value(name)
            v.dtype, v.shape = src.dtype, src.shape


def _resolve_body(body: Graph, inputs: list[Type], run_pass: BodyPass, opsets: Mapping[str, int],
                  dims: Mapping[str, int], output_shapes: object) -> list[Type]:
    _prepare_body(body, inputs)
    run_pass(body, dict(opsets), dims, output_shapes)
    return [(body.values[o].dtype, body.values[o].shape) if o in body.values else (0, None) for o in body.outputs]


def _merge(a: Shape | None, b: Shape | None, tag: str) -> Shape | None:
    if a is None or b is None or len(a) != len(b):
        return None
    return tuple(x if x == b[i] else f"unk__{tag}_d{i}{DATA_DEPENDENT}" for i, x in enumerate(a))


def _const_scalar(name: str, consts: Mapping[str, np.ndarray]) -> object:
    arr = consts.get(name)
    return None if arr is None or arr.size != 1 else arr.reshape(-1)[0].item()


def _passes_condition(body: Graph) -> bool:
    """The body's condition output is its condition input (directly or through Identity) or a constant true."""
    if len(body.inputs) < 2 or not body.outputs:
        return False
    out = body.outputs[0]
    for _ in range(8):
        if out == body.inputs[1]:
            return True
        v = body.values.get(out)
        p = v.producer if v is not None else None
        if p is None:
            t = body.initializers.get(out)
            return t is not None and bool(np.all(t.numpy()))
        if p.op_type == "Identity" and p.inputs:
            out = p.inputs[0]
        elif p.op_type == "Constant" and p.attr("value") is not None:
            from onnx import numpy_helper

            return bool(np.all(numpy_helper.to_array(p.attr("value"))))
        else:
            return False
    return False


def loop_trip_count(node: Node, consts: Mapping[str, np.ndarray]) -> int | None:
    """The number of iterations of a Loop when it is known before running, else None (data-dependent)."""
    body = node.attr("body")
    m = node.inputs[0] if node.inputs else ""
    trip = _const_scalar(m, consts) if m else None
    if trip is None or body is None:
        return None
    cond = node.inputs[1] if len(node.inputs) > 1 else ""
    if cond and _const_scalar(cond, consts) is not True:
        return None
    return max(int(trip), 0) if _passes_condition(body) else None


def infer_control_flow(node: Node, graph: Graph, opsets: Mapping[str, int], dims: Mapping[str, int],
                       consts: Mapping[str, np.ndarray], run_pass: BodyPass,
                       output_shapes: object = None) -> list[Type] | None:
    """(dtype, shape) per output of an If / Loop / Scan node, resolving its bodies on the way."""
    ins: list[Type] = [(graph.values[n].dtype, graph.values[n].shape) if n and n in graph.values else (0, None)
                       for n in node.inputs]
    tag = node.name.replace("/", "_").strip("_") or node.op_type
    if node.op_type == "If":
        then_b, else_b = node.attr("then_branch"), node.attr("else_branch")
        if then_b is None or else_b is None:
            return None
        t = _resolve_body(then_b, [], run_pass, opsets, dims, output_shapes)
        e = _resolve_body(else_b, [], run_pass, opsets, dims, output_shapes)
        return [(ta[0] or eb[0], _merge(ta[1], eb[1], f"{tag}_o{k}")) for k, (ta, eb) in enumerate(zip(t, e))]
    body = node.attr("body")
    if body is None:
        return None
    if node.op_type == "Loop":
        carried = ins[2:]
        outs = _resolve_body(body, [(7, ()), (9, ())] + carried, run_pass, opsets, dims, output_shapes)
        n = len(carried)
        trip = loop_trip_count(node, consts)
        lead = trip if trip is not None else f"unk__{tag}_trip_count{DATA_DEPENDENT}"
        result = [(o[0] or c[0], _merge(o[1], c[1], f"{tag}_o{k}")) for k, (o, c) in enumerate(zip(outs[1:1 + n], carried))]
        result += [(d, None if s is None else (lead, *s)) for d, s in outs[1 + n:]]
        return result
    m = node.attr("num_scan_inputs")
    if m is None:
        return None
    n_state = len(node.inputs) - m
    in_axes = list(node.attr("scan_input_axes") or [0] * m)
    slices: list[Type] = []
    seq = None
    for (dtype, shape), axis in zip(ins[n_state:], in_axes):
        if shape is None:
            slices.append((dtype, None))
            continue
        ax = axis + len(shape) if axis < 0 else axis
        seq = shape[ax] if seq is None or not isinstance(seq, int) else seq
        slices.append((dtype, shape[:ax] + shape[ax + 1:]))
    outs = _resolve_body(body, ins[:n_state] + slices, run_pass, opsets, dims, output_shapes)
    result = [(o[0] or s[0], _merge(o[1], s[1], f"{tag}_o{k}")) for k, (o, s) in enumerate(zip(outs, ins[:n_state]))]
    n_out = len(outs) - n_state
    out_axes = list(node.attr("scan_output_axes") or [0] * n_out)
    for (dtype, shape), axis in zip(outs[n_state:], out_axes):
        if shape is None or seq is None:
            result.append((dtype, None))
            continue
        ax = axis + len(shape) + 1 if axis < 0 else axis
        result.append((dtype, shape[:ax] + (seq,) + shape[ax:]))
    return result
