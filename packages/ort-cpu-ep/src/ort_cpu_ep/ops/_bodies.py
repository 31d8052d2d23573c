"""What the bodies of control-flow nodes (If / Loop / Scan) cost and read while they run.

- Weights: a body's initializers and Constant tensors (`ort_graph.body_weights`) are the node's weights. On a
  device the session uploads them with the node and passes them after its explicit and implicit inputs;
  `body_weight_scope` makes the interpreter read those (on the host: one array per weight, made once per
  kernel) instead of decoding the model's tensors on every run.
- Memory: `body_bytes(node)` is the most bytes the node's bodies hold at once while it runs (their values
  by liveness, in the order the interpreter runs them, nested bodies and kernel scratch at their step, the
  arena of their C steps (`_body_c`), a Loop's iteration number and condition as the session's step runner writes
  them, plus the scan outputs a Loop or Scan accumulates and stacks). The control-flow kernels declare it as their
  workspace, so the session's plan and budget check include it; None where a body value's size is unknown.
- Errors: `SubgraphNodeError` names the inner node and op, and the nodes whose bodies enclose it.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ort_abi import LOOP_STATE_BYTES
from ort_graph import Graph, Node, body_weights

from ._errors import CpuOpError

_WEIGHTS: contextvars.ContextVar[Mapping[int, Any] | None] = contextvars.ContextVar("ort_cpu_body_weights",
                                                                                     default=None)


class SubgraphNodeError(CpuOpError):
    """A node inside a subgraph failed: `node` and `op_type` name it, `path` the enclosing nodes (innermost first)."""

    def __init__(self, node: Node, cause: BaseException, path: Sequence[str] = ()) -> None:
        self.node, self.op_type, self.path, self.cause = node.label, node.qualified_op, tuple(path), cause
        where = "".join(f" inside {p}" for p in self.path)
        super().__init__(f"node {node.label!r} ({node.qualified_op}){where} failed: {type(cause).__name__}: {cause}")

    def within(self, outer: str) -> SubgraphNodeError:
        err = SubgraphNodeError.__new__(SubgraphNodeError)
        err.node, err.op_type, err.path, err.cause = self.node, self.op_type, (*self.path, outer), self.cause
        where = "".join(f" inside {p}" for p in err.path)
        CpuOpError.__init__(err, f"node {err.node!r} ({err.op_type}){where} failed: "
                                 f"{type(err.cause).__name__}: {err.cause}")
        return err


def describe_body(graph: Graph) -> str:
    """`subgraph 'then' of node 'if0' (If)`: where a body sits, for messages."""
    parent = graph.parent_node
    owner = f" of node {parent.label!r} ({parent.qualified_op})" if parent is not None else ""
    return f"subgraph {graph.name!r}{owner}"


def body_weight(ident: int) -> Any:
    """The array to use for the body weight whose tensor has identity `ident`, or None (decode the model's)."""
    weights = _WEIGHTS.get()
    return None if weights is None else weights.get(ident)


def host_weights(node: Node) -> dict[int, np.ndarray]:
    """One host array per weight inside `node`'s subgraphs (what a kernel on the CPU reads every run)."""
    return {w.ident: w.numpy() for w in body_weights(node)}


@contextlib.contextmanager
def body_weight_scope(node: Node, extra: Sequence[Any], cached: Mapping[int, np.ndarray] | None) -> Iterator[None]:
    """While `node`'s bodies run: its weights are `extra` (the session's uploaded copies, staged to the host,
    in `body_weights(node)` order) where given, else `cached` (or the enclosing scope's)."""
    outer = _WEIGHTS.get()
    weights: dict[int, Any] = dict(outer or {})
    if cached:
        weights.update(cached)
    if extra:
        for w, arr in zip(body_weights(node), extra):
            weights[w.ident] = np.asarray(arr)
    token = _WEIGHTS.set(weights or None)
    try:
        yield
    finally:
        _WEIGHTS.reset(token)


def split_inputs(node: Node, inputs: list) -> tuple[list, dict[str, Any], list]:
    """A control-flow kernel's inputs: (explicit, outer-scope values by name, body weights)."""
    ne = len(node.inputs)
    implicit = node.implicit_inputs()
    return inputs[:ne], dict(zip(implicit, inputs[ne:ne + len(implicit)])), inputs[ne + len(implicit):]


# -- memory --------------------------------------------------------------------------------------------


def _size(graph: Graph, name: str) -> int | None:
    v = graph.values.get(name)
    return None if v is None else v.nbytes


def _weight_outputs(graph: Graph, order: Sequence[Node]) -> set[str]:
    return set(graph.initializers) | {n.outputs[0] for n in order
                                      if n.op_type == "Constant" and n.outputs and n.attr("value") is not None}


def _node_scratch(node: Node) -> int | None:
    from ._interp import node_opset
    from ._registry import find

    if node.attributes and node.subgraphs:
        return body_bytes(node)
    impl = find(node.op_type, node.domain, node_opset(node))
    if impl is None:
        return 0
    shapes = []
    for name in node.inputs:
        v = node.graph.values.get(name) if name and node.graph is not None else None
        shapes.append(tuple(v.shape) if v is not None and v.nbytes is not None else None)
    return sum(b for _slot, b in impl.workspace_bytes(node, shapes))


def graph_peak(graph: Graph) -> int | None:
    """Most bytes `graph`'s own values (not its weights, not the outer scope's) hold at once while the
    interpreter runs it; its inputs count for the whole run. None when a size is unknown."""
    from ._interp import _order

    order = _order(graph)
    weights = _weight_outputs(graph, order)
    last: dict[str, int] = {}
    for i, n in enumerate(order):
        for name in list(n.inputs) + n.implicit_inputs():
            if name:
                last[name] = i
    base = 0
    for name in graph.inputs:
        if name not in graph.initializers:
            size = _size(graph, name)
            if size is None:
                return None
            base += size
    produced: dict[str, int] = {}
    live, peak = 0, base
    for i, n in enumerate(order):
        for o in n.outputs:
            if o and o not in weights:
                size = _size(graph, o)
                if size is None:
                    return None
                produced[o] = size
                live += size
        scratch = _node_scratch(n)
        if scratch is None:
            return None
        peak = max(peak, base + live + scratch)
        for name in dict.fromkeys(list(n.inputs) + n.implicit_inputs()):
            if name in produced and last.get(name) == i and name not in graph.outputs:
                live -= produced.pop(name)
    return peak


def _scan_output_bytes(node: Node, first: int) -> int | None:
    total = 0
    for name in node.outputs[first:]:
        if not name:
            continue
        size = _size(node.graph, name) if node.graph is not None else None
        if size is None:
            return None
        total += size
    return total


def arena_bytes(graph: Graph, min_steps: int = 1) -> int:
    """The host arena of `graph`'s C steps (`_body_c.c_layout`: their outputs and declared workspace), 0 for none
    or fewer than `min_steps` (`_body_plan.BodyPlans.min_c_steps`: the body then runs in numpy) unless every node
    is one (the session's step runner then computes the body as steps of the node's own: `ort_abi.ControlSpec`)."""
    from ._body_c import c_layout
    from ._interp import _order, current_opsets

    order = _order(graph)
    layout = c_layout(graph, order, current_opsets())
    if layout is None:
        return 0
    layout.release()
    return layout.nbytes if len(layout.steps) >= min_steps or len(layout.steps) == len(order) else 0


def _body_peak(graph: Graph, min_steps: int = 1) -> int | None:
    peak = graph_peak(graph)
    return None if peak is None else peak + arena_bytes(graph, min_steps)


def body_bytes(node: Node) -> int | None:
    """Most bytes `node`'s bodies hold at once while it runs (see the module doc); None where unknown."""
    if node.op_type == "If":
        from ._body_plan import IF_MIN_C_STEPS

        peaks = [_body_peak(g, IF_MIN_C_STEPS) for g in node.subgraphs]
        return None if any(p is None for p in peaks) else max(peaks, default=0)
    body = node.attr("body")
    if body is None:
        return None
    peak = _body_peak(body)
    if node.op_type == "Loop":
        scans = _scan_output_bytes(node, len(node.inputs) - 2)
        copies = 2  # the per-iteration outputs, then the stacked result
        if peak is not None:  # the iteration number and condition the step runner writes for a body of C steps
            peak += LOOP_STATE_BYTES
    elif node.op_type == "Scan":
        m = node.attr("num_scan_inputs") or 0
        scans = _scan_output_bytes(node, len(node.inputs) - m)
        moved = any(node.attr("scan_output_axes") or ()) or any(node.attr("scan_output_directions") or ())
        copies = 3 if moved else 2  # moving the scan axis or reversing makes one more contiguous copy
    else:
        return peak
    return None if peak is None or scans is None else peak + copies * scans
