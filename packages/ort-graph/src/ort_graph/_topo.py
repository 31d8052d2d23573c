"""Topological order and structural validation (cycles, dangling inputs)."""

from __future__ import annotations

from collections import deque

from ._errors import GraphStructureError
from ._ir import Graph, Node


def _dependencies(graph: Graph, node: Node) -> list[str]:
    return [n for n in node.inputs if n] + node.implicit_inputs()


def topological_order(graph: Graph) -> list[Node]:
    """Kahn's algorithm, stable on file order; raises GraphStructureError on a cycle."""
    indeg: dict[int, int] = {}
    waiting: dict[str, list[Node]] = {}
    values = graph.values
    for node in graph.nodes:
        count = 0
        for name in set(_dependencies(graph, node) if node.attributes else node.inputs):  # '' has no producer
            v = values.get(name)
            if v is not None and v.producer is not None and v.producer.graph is graph:
                waiting.setdefault(name, []).append(node)
                count += 1
        indeg[id(node)] = count
    ready = deque(n for n in graph.nodes if indeg[id(n)] == 0)
    order: list[Node] = []
    while ready:
        node = ready.popleft()
        order.append(node)
        for out in node.outputs:
            for consumer in waiting.get(out, ()):
                indeg[id(consumer)] -= 1
                if indeg[id(consumer)] == 0:
                    ready.append(consumer)
    if len(order) != len(graph.nodes):
        stuck = [n.name or f"#{n.index} {n.op_type}" for n in graph.nodes if indeg[id(n)] > 0]
        raise GraphStructureError(
            f"graph {graph.name!r} has a cycle through {len(stuck)} node(s), e.g. {stuck[:5]!r}; "
            "ONNX graphs must be acyclic — check the exporter or the edit that added these edges"
        )
    return order


def validate(graph: Graph, outer: set[str] | None = None) -> None:
    """Every input is a graph input, an initializer, a node output or an outer-scope value; no cycles."""
    known = set(graph.inputs) | set(graph.initializers) | (outer or set())
    for node in graph.nodes:
        known.update(o for o in node.outputs if o)
    for node in graph.nodes:
        for i, name in enumerate(node.inputs):
            if name and name not in known:
                raise GraphStructureError(
                    f"node {node.name!r} ({node.op_type}) input {i} reads {name!r}, which no node produces "
                    "and which is neither a graph input nor an initializer (dangling input); "
                    "add it as a graph input or initializer, or fix the producing node"
                )
        for sub in node.subgraphs:
            validate(sub, known)
    for name in graph.outputs:
        if name not in known:
            raise GraphStructureError(
                f"graph output {name!r} of graph {graph.name!r} is never produced; "
                "remove it from the outputs or add the node that computes it"
            )
    topological_order(graph)
