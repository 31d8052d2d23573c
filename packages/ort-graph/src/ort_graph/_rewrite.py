"""Node replacements of one rewrite pass without a scan of `graph.nodes` per replacement.

`Graph.remove_node` and `nodes.index` / `nodes.insert` each scan the node list, so a pass that fuses a
pattern in every layer was quadratic (a 23k-node decoder spent seconds in them). `Rewriter.replace` gives
the same node order as "find the first old node's position, remove the old nodes, insert the new ones
there": when every other old node stands after the first, the old nodes are detached and the new ones
placed where the first stood by one `Graph.compact` at `finish`. When every other old node stands before
the first (SiLU: Mul(x, Sigmoid(x)) replaced from the Mul), the list edit put the new nodes after as many
nodes past the first as old nodes stood before it, and so does `replace`, counting in the list as edited
so far. Otherwise (old nodes on both sides; a new node replaced again; the end of the list) the pending
edits are applied and the rest of the pass edits the list directly, exactly as before.
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
        self._count = len(graph.nodes)  # the nodes `_pos` knows; those added since stand at the end until `finish`

    def removed(self, node: Node) -> bool:
        """Whether a replacement of this pass took `node` out (`node not in graph.nodes`, without the scan)."""
        return id(node) in self._gone

    def replace(self, old: list[Node], build: Callable[[int | None], list[Node]]) -> list[Node]:
        """Remove `old` and add what `build(position)` adds (`Graph.add_node(..., position=position + i)`
        for its i-th node; position None: appended, `finish` moves them) where `old[0]` stood."""
        first, pos = old[0], self._pos
        at = None if pos is None else pos.get(id(first))
        if at is not None and all(pos.get(id(n), -1) > at for n in old[1:]):
            return self._detach_and_build(old, build, self._placed.setdefault(id(first), []), None)
        if at is not None and all(-1 < pos.get(id(n), -1) < at for n in old[1:]):
            spot = self._after_survivors(at, len(old) - 1)
            if spot is not None:
                return self._detach_and_build(old, build, *spot)
        self.finish()
        self._pos = None
        position = self.graph.nodes.index(first)
        for n in old:
            self.graph.remove_node(n)
            self._gone.add(id(n))
        return build(position)

    def _detach_and_build(self, old: list[Node], build: Callable[[int | None], list[Node]], into: list[Node],
                          index: int | None) -> list[Node]:
        for n in old:
            self.graph.detach_node(n)
            self._gone.add(id(n))
        new = build(None)
        if index is None:
            into.extend(new)
        else:
            into[index:index] = new
        return new

    def _after_survivors(self, at: int, k: int) -> tuple[list[Node], int] | None:
        """Where the new nodes go when they follow the first k nodes past position `at` in the list as edited:
        (a placed list, the index in it), or None when that runs past the end of the list."""
        nodes, detached = self.graph.nodes, self.graph._detached
        i = at + 1
        while i < self._count:
            n = nodes[i]
            placed = self._placed.get(id(n), [])
            if k <= len(placed):  # after the k-th of the nodes placed before n
                return placed, k
            k -= len(placed)
            if id(n) not in detached:
                k -= 1
                if k == 0:  # after n: at the front of what stands before the next node
                    if i + 1 >= self._count:
                        return None
                    return self._placed.setdefault(id(nodes[i + 1]), []), 0
            i += 1
        return None

    def finish(self) -> None:
        """Apply the pending edits to `graph.nodes` (one pass); the pass ends with this."""
        if self._placed:
            self.graph.compact(self._placed)
            self._placed = {}


__all__ = ["Rewriter"]
