"""Node replacements of one rewrite pass without a scan of `graph.nodes` per replacement.

`Graph.remove_node` and `nodes.index` / `nodes.insert` each scan the node list, so a pass that fuses a
pattern in every layer was quadratic (a 23k-node decoder spent seconds in them). `Rewriter.replace` gives
the same node order as "find the first old node's position, remove the old nodes, insert the new ones
there": when every other old node stands after the first, the old nodes are detached and the new ones
placed where the first stood by one `Graph.compact` at `finish`; otherwise (an old node before the first,
as in a file whose nodes are not in topological order; a new node replaced again) the pending edits are
applied and the rest of the pass edits the list directly, exactly as before.
"""

from __future__ import annotations

from collections.abc import Callable

from ._ir import Graph, Node


class Rewriter:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self._gone: set[int] = set()
        self._placed: dict[int, list[Node]] = {}
        self._pos: dict[int, int] | None = {id(n): i for i, n in enumerate(graph.nodes)}  # None: direct edits

    def removed(self, node: Node) -> bool:
        """Whether a replacement of this pass took `node` out (`node not in graph.nodes`, without the scan)."""
        return id(node) in self._gone

    def replace(self, old: list[Node], build: Callable[[int | None], list[Node]]) -> list[Node]:
        """Remove `old` and add what `build(position)` adds (`Graph.add_node(..., position=position + i)`
        for its i-th node; position None: appended, `finish` moves them) where `old[0]` stood."""
        first, pos = old[0], self._pos
        at = None if pos is None else pos.get(id(first))
        if at is not None and all(pos.get(id(n), -1) > at for n in old[1:]):
            for n in old:
                self.graph.detach_node(n)
                self._gone.add(id(n))
            new = build(None)
            self._placed[id(first)] = new
            return new
        self.finish()
        self._pos = None
        position = self.graph.nodes.index(first)
        for n in old:
            self.graph.remove_node(n)
            self._gone.add(id(n))
        return build(position)

    def finish(self) -> None:
        """Apply the pending edits to `graph.nodes` (one pass); the pass ends with this."""
        if self._placed:
            self.graph.compact(self._placed)
            self._placed = {}


__all__ = ["Rewriter"]
