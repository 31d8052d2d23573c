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

from ort_graph import Graph, Node

from ._body_c import CLayout, c_layout

__all__ = ["BodySteps", "control_bodies"]


@attrs.frozen
class BodySteps:
    """One body: its graph, its nodes in order and their C steps (`layout.steps[i]` is node `order[i]`'s, its
    values by `layout.ids`, each C-made value's block at `layout.blocks` offsets of the body's arena)."""

    graph: Graph
    order: list[Node]
    layout: CLayout


def _whole(graph: Graph, opsets: Mapping[str, int]) -> BodySteps | None:
    from ._interp import _order

    order = _order(graph)
    layout = c_layout(graph, order, opsets) if order else CLayout({}, {}, {}, 0)
    if layout is None or len(layout.steps) != len(order):
        if layout is not None:
            layout.release()
        return None
    return BodySteps(graph, order, layout)


def control_bodies(kernel: Any) -> tuple[str, list[BodySteps]] | None:
    """(op type, bodies) for the CPU kernel (`NumpyKernel`) of an If (then, else) or of a Loop without scan
    outputs whose every body node is a C step; None for any other kernel or body. The bodies' C kernels are
    created here: they live as long as the steps that hold them."""
    from ._interp import _LATEST
    from .ops_control import If, Loop

    impl, node = getattr(kernel, "impl", None), getattr(kernel, "node", None)
    if node is None or node.domain not in ("", "ai.onnx") or type(impl) not in (If, Loop):
        return None
    opsets = getattr(kernel, "opsets", None) or _LATEST
    if type(impl) is If:
        graphs = [node.attr("then_branch"), node.attr("else_branch")]
    else:
        body = node.attr("body")
        if body is None or len(body.outputs) != len(node.inputs) - 1 or len(body.inputs) != len(node.inputs):
            return None  # scan outputs (stacked per iteration) or a malformed body: the numpy path
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
