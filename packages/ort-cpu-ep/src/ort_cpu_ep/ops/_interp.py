"""A simple sequential interpreter over ort_graph graphs using the CPU op table.

Used by the control-flow kernels (If / Loop / Scan subgraphs) and by the conformance runner.
Values are numpy arrays, Python lists (ONNX sequences) or None (empty optionals / omitted inputs).

Kernels of ops with subgraphs (`OpImpl.implicit_inputs = True`) receive their explicit inputs
followed by the values of `node.implicit_inputs()` in that order.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import onnx.defs

from ort_abi import check_run, raised_by_run_checks
from ort_graph import Graph, Node

from ._bodies import SubgraphNodeError, body_weight, describe_body
from ._errors import CpuOpError
from ._registry import _OUTPUT, _WORKSPACE, find

_LATEST = {"": onnx.defs.onnx_opset_version(), "ai.onnx.ml": 5, "ai.onnx.preview.training": 1}
_OPSETS: contextvars.ContextVar[dict[str, int] | None] = contextvars.ContextVar("ort_session_cpu_opsets", default=None)


def current_opsets() -> dict[str, int]:
    """The opset imports of the model being run (latest known opsets outside any `opset_scope`)."""
    return _OPSETS.get() or _LATEST


@contextlib.contextmanager
def opset_scope(opsets: Mapping[str, int]) -> Iterator[None]:
    """Make `opsets` (the model's opset imports) visible to subgraph-running kernels."""
    norm = {("" if d == "ai.onnx" else d): int(v) for d, v in opsets.items()}
    token = _OPSETS.set(norm)
    try:
        yield
    finally:
        _OPSETS.reset(token)


def node_opset(node: Node, opsets: Mapping[str, int] | None = None) -> int:
    ops = opsets or current_opsets()
    domain = "" if node.domain == "ai.onnx" else node.domain
    if domain in ops:
        return ops[domain]
    return _LATEST.get(domain, 1)


def run_node(node: Node, values: Mapping[str, Any], opsets: Mapping[str, int] | None = None) -> list[Any]:
    """Run one node reading its inputs (and implicit inputs) from `values`."""
    impl = find(node.op_type, node.domain, node_opset(node, opsets))
    if impl is None:
        raise CpuOpError(f"no CPU kernel for {node.qualified_op!r} at opset {node_opset(node, opsets)}; "
                         "run this node on another execution provider")
    args: list[Any] = []
    for name in node.inputs:
        if not name:
            args.append(None)
        elif name in values:
            args.append(values[name])
        else:
            raise CpuOpError(f"node {node.name!r} reads {name!r}, which no node, input or initializer defines; "
                             "check the graph")
    if impl.implicit_inputs:
        args.extend(values[n] for n in node.implicit_inputs())
    outs = [np.asarray(o) if isinstance(o, np.generic) else o for o in impl.compute(node, args)]
    if len(outs) < len([o for o in node.outputs if o]):
        raise CpuOpError(f"{node.qualified_op} kernel returned {len(outs)} outputs, node {node.name!r} expects "
                         f"{len(node.outputs)}")
    return outs


def run_graph(graph: Graph, feeds: Mapping[str, Any], outer: Mapping[str, Any] | None = None,
              opsets: Mapping[str, int] | None = None) -> dict[str, Any]:
    """Run `graph` on `feeds` (by input name); `outer` holds values of enclosing scopes.

    Returns the graph outputs by name. Nodes run in topological order."""
    values: dict[str, Any] = dict(outer or {})
    for name, t in graph.initializers.items():
        given = body_weight(id(t))  # the weight the node's kernel holds (uploaded with it on a device)
        values[name] = t.numpy() if given is None else given
    for name, v in feeds.items():
        values[name] = v
    missing = [n for n in graph.inputs if n not in values]
    if missing:
        raise CpuOpError(f"graph {graph.name!r} needs inputs {missing!r}; pass them in feeds")
    order = _order(graph)
    keep = set(graph.outputs) | set(outer or {})
    last_use: dict[str, int] = {}
    for i, node in enumerate(order):
        for name in list(node.inputs) + node.implicit_inputs():
            if name:
                last_use[name] = i
    ctx = opset_scope(opsets) if opsets is not None else contextlib.nullcontext()
    # the values of a (sub)graph run here are not planned: its nodes get fresh outputs and scratch, never
    # the blocks and workspace of the node that runs it
    out_token, ws_token = _OUTPUT.set(None), _WORKSPACE.set(None)
    try:
        with ctx:
            _run_nodes(order, values, last_use, keep, graph)
    finally:
        _WORKSPACE.reset(ws_token)
        _OUTPUT.reset(out_token)
    result: dict[str, Any] = {}
    for name in graph.outputs:
        if name not in values:
            raise CpuOpError(f"graph {graph.name!r} output {name!r} was never computed")
        result[name] = values[name]
    return result


def _run_nodes(order: list[Node], values: dict[str, Any], last_use: Mapping[str, int], keep: set[str],
               graph: Graph | None = None) -> None:
    inner = graph is not None and graph.parent_node is not None
    for i, node in enumerate(order):
        check_run(node.label)  # a terminated run stops between two nodes of a (sub)graph too
        given = body_weight(id(node.attr("value"))) if node.op_type == "Constant" and inner else None
        try:
            outs = [given] if given is not None else run_node(node, values)
        except SubgraphNodeError as e:  # from a body nested in this node's: name this node too
            if not inner:
                raise
            raise e.within(describe_body(graph)) from e.cause
        except Exception as e:
            if not inner or raised_by_run_checks(e):  # a terminated run is no error of this node
                raise
            raise SubgraphNodeError(node, e, [describe_body(graph)]) from e
        for name, val in zip(node.outputs, outs):
            if name:
                values[name] = val
        for name in list(node.inputs) + node.implicit_inputs():  # free what no later node reads
            if name and last_use.get(name) == i and name not in keep:
                values.pop(name, None)


def _order(graph: Graph) -> list[Node]:
    """Nodes in a topological order (file order when already sorted)."""
    produced: dict[str, Node] = {o: n for n in graph.nodes for o in n.outputs if o}
    done: set[int] = set()
    order: list[Node] = []

    def deps(n: Node) -> list[str]:
        return [i for i in list(n.inputs) + n.implicit_inputs() if i]

    for start in graph.nodes:
        if id(start) in done:
            continue
        stack: list[tuple[Node, bool]] = [(start, False)]
        while stack:
            n, expanded = stack.pop()
            if id(n) in done:
                continue
            if expanded:
                done.add(id(n))
                order.append(n)
                continue
            stack.append((n, True))
            for name in deps(n):
                p = produced.get(name)
                if p is not None and id(p) not in done and p is not n:
                    stack.append((p, False))
    return order


def as_array(x: Any) -> np.ndarray:
    return x if isinstance(x, np.ndarray) else np.asarray(x)
