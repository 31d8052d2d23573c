"""A control-flow node's bodies as C steps of the enclosing step table.

Where every node of an If's branches, or of a Loop's body, has a C kernel the step runner computes
(`_body_c.c_layout` takes each of them), the session's step runner can compute the node itself in C
(`ort_abi.ControlSpec`: the selected branch's steps, or the body's steps every iteration, inside the node's
step, their values in the node's declared workspace, which `_bodies.body_bytes` counts). `control_bodies`
gives the session each body's layout; the numpy path (`ops_control`, `_body_plan`) stays the reference and
the fallback: the step runner leaves the node to it whenever C does not finish it alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
from onnx import numpy_helper

from ort_graph import Graph, Node

from ._body_c import CLayout, c_layout

__all__ = ["BodySteps", "control_bodies"]


@attrs.frozen
class BodySteps:
    """One body: its graph, its nodes in order and their C steps (`layout.steps[i]` is node `order[i]`'s, its
    values by `layout.ids`, each C-made value's block at `layout.blocks` offsets of the body's arena), and the
    arrays of its Constant nodes by output name (weights, as its initializers are)."""

    graph: Graph
    order: list[Node]
    layout: CLayout
    constants: dict[str, Any] = attrs.field(factory=dict)


def _whole(graph: Graph, opsets: Mapping[str, int]) -> BodySteps | None:
    from ._interp import _order

    order = _order(graph)
    constants = {n.outputs[0]: numpy_helper.to_array(n.attr("value")) for n in order
                 if n.op_type == "Constant" and len(n.outputs) == 1 and hasattr(n.attr("value"), "dims")}
    computed = sum(1 for n in order if not (n.op_type == "Constant" and n.outputs and n.outputs[0] in constants))
    layout = c_layout(graph, order, opsets) if computed else CLayout({}, {}, {}, 0)
    if layout is None or len(layout.steps) != computed:
        if layout is not None:
            layout.release()
        return None
    return BodySteps(graph, order, layout, constants)


def control_bodies(kernel: Any) -> tuple[str, list[BodySteps]] | None:
    """(op type, bodies) for the CPU kernel (`NumpyKernel`) of an If (then, else), a Loop, or a Scan (opset 9+,
    every scan axis the first) whose every body node is a C step; None for any other kernel or body. The bodies'
    C kernels are created here: they live as long as the steps that hold them."""
    from ._interp import _LATEST
    from .ops_control import If, Loop, Scan

    impl, node = getattr(kernel, "impl", None), getattr(kernel, "node", None)
    if node is None or node.domain not in ("", "ai.onnx") or type(impl) not in (If, Loop, Scan):
        return None
    opsets = getattr(kernel, "opsets", None) or _LATEST
    body = node.attr("body")
    if type(impl) is If:
        graphs = [node.attr("then_branch"), node.attr("else_branch")]
    elif not isinstance(body, Graph) or len(body.inputs) != len(node.inputs) or not _first_axes(node):
        return None  # a malformed body, or a Scan along another axis: the numpy path
    elif type(impl) is Loop and len(body.outputs) != len(node.outputs) + 1:
        return None
    elif type(impl) is Scan and len(body.outputs) != len(node.outputs):
        return None
    else:
        graphs = [body]
    bodies = []
    for graph in graphs:
        found = _whole(graph, opsets) if isinstance(graph, Graph) else None
        if found is None:
            for b in bodies:
                b.layout.release()
            return None
        bodies.append(found)
    return node.op_type, bodies


def _first_axes(node: Node) -> bool:
    """Whether a Scan's scan axes are all the first of their value (a Loop: always)."""
    if node.op_type != "Scan":
        return True
    m = node.attr("num_scan_inputs") or 0
    graph = node.graph
    ins = node.inputs[len(node.inputs) - m:]
    outs = node.outputs[len(node.outputs) - len(node.attr("scan_output_axes") or ()):]
    for names, axes in ((ins, node.attr("scan_input_axes")), (outs, node.attr("scan_output_axes"))):
        for name, axis in zip(names, axes or ()):
            shape = graph.values[name].shape if graph is not None and name in graph.values else None
            if axis != 0 and (shape is None or axis != -len(shape)):
                return False
    return True
