"""Resource accounting: base cost per node, weights deduplicated, and the one budget helper.

`node_cost_for_budget(accountant, node, workspace_estimate)` is what every placement loop calls:
base (output bytes + initializer bytes not already charged) plus the Level-1 workspace estimate, or
base x 1.5 (`apply_workspace_heuristic`) when no estimate exists. Where a measured profile (the node
statistics CSV) has a row for the node, the larger of measured and computed cost is used, never the sum.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import attrs

from ort_graph import body_weights

from ._budget import NodeAllocationStats, NodeStats
from ._errors import WorkspaceEstimateWarning

WORKSPACE_HEURISTIC = 1.5


@runtime_checkable
class WorkspaceEstimator(Protocol):
    """Level-1 workspace estimates (e.g. ort-abi's kernel registry): bytes, or None if unknown."""

    def estimate(self, node: Any, ep_name: str) -> int | None: ...


def safe_estimate(estimator: WorkspaceEstimator | None, node: Any, ep_name: str) -> int | None:
    """Ask an estimator; a failing estimator counts as "no estimate" (the heuristic applies), as an
    error status from an ONNX Runtime estimate function does, but with a warning naming the node."""
    if estimator is None:
        return None
    try:
        return estimator.estimate(node, ep_name)
    except Exception as e:  # noqa: BLE001 - any estimator failure degrades to the heuristic
        warnings.warn(
            f"workspace estimate for node {node.name!r} ({node.op_type}) on {ep_name} failed: {e!r}; "
            "using the 1.5x heuristic — fix the estimate function of this kernel",
            WorkspaceEstimateWarning, stacklevel=3,
        )
        return None


def apply_workspace_heuristic(base: int) -> int:
    """base x 1.5, in exact integer arithmetic (rounded down)."""
    return base * 3 // 2


@attrs.frozen
class NodeCost:
    """What one node costs a device, and why."""

    node: str
    weights: int  # initializer bytes first charged to this node (shared weights count once)
    activations: int  # bytes of the node's statically sized outputs
    workspace: int  # Level-1 estimate, the heuristic's extra 0.5 x base, or the measured excess
    workspace_source: str  # "estimate" | "heuristic" | "measured"
    total: int
    unknown_outputs: int = 0  # outputs whose size is unknown (counted as 0 bytes)

    @property
    def base(self) -> int:
        return self.weights + self.activations


def _initializer(graph: Any, name: str) -> Any:
    g = graph
    while g is not None:
        t = g.initializers.get(name)
        if t is not None:
            return t
        parent = g.parent_node
        g = parent.graph if parent is not None else None
    return None


def _read_weights(node: Any) -> dict[str, int]:
    """Initializers `node` reads (inputs, and a subgraph's outer-scope names) -> bytes, each once."""
    names = [n for n in dict.fromkeys(node.inputs) if n]
    if node.attributes and node.subgraphs:
        names += [n for n in node.implicit_inputs() if n not in names]
    graph = node.graph
    if graph is not None and graph.parent_node is None:  # a main graph: its own initializers only
        inits = graph.initializers
        return {n: inits[n].nbytes for n in names if n in inits}
    found = {n: _initializer(graph, n) for n in names}
    return {n: t.nbytes for n, t in found.items() if t is not None}


def node_weights(node: Any) -> dict[str, int]:
    """Every weight `node` costs its device -> bytes: the initializers it reads, and what its subgraphs hold
    (their initializers and Constant tensors, nested bodies included, keyed `<node>/<attribute>/<name>`)."""
    out = _read_weights(node)
    if node.attributes and node.subgraphs:
        for w in body_weights(node):
            out.setdefault(w.key, w.nbytes)
    return out


def weight_names(node: Any) -> list[str]:
    """The weights `node` costs (see `node_weights`), each once."""
    return list(node_weights(node))


def weight_bytes(node: Any, name: str) -> int:
    """Bytes of weight `name` as `node` sees it (an initializer of its graph or an enclosing one, or a
    weight inside its subgraphs)."""
    t = _initializer(node.graph, name)
    return t.nbytes if t is not None else node_weights(node)[name]


class ResourceAccountant:
    """Tracks bytes consumed on one device; weights charged once (pending -> committed).

    `compute_resource_count(node)` returns the base cost and marks the node's not-yet-charged
    initializers pending for it; `account_for_node(node)` commits them and adds the node's recorded
    cost to `consumed`; `reset_for_new_pass()` forgets pending weights (committed ones stay).
    """

    def __init__(self, threshold: int | None = None, stats: Mapping[str, NodeAllocationStats] | None = None,
                 ep_name: str = "") -> None:
        self.threshold = threshold
        self.ep_name = ep_name
        self.stats = stats if stats is None or isinstance(stats, NodeStats) else NodeStats(stats)
        self.consumed = 0
        self.committed: set[str] = set()
        self.pending: set[str] = set()
        self._pending_by_node: dict[Any, tuple[str, ...]] = {}
        self._costs: dict[Any, NodeCost] = {}
        self.stopped = False

    # -- base cost ----------------------------------------------------------------------------
    def base_parts(self, node: Any) -> tuple[int, int, int]:
        """(weight bytes newly charged, output bytes, outputs of unknown size); marks weights pending."""
        graph = node.graph
        charged: list[str] = list(self._pending_by_node.get(node, ()))
        sizes = node_weights(node)
        for name in sizes:
            if name in self.committed or name in self.pending:
                continue
            self.pending.add(name)
            charged.append(name)
        self._pending_by_node[node] = tuple(charged)
        weights = sum(sizes[n] if n in sizes else weight_bytes(node, n) for n in charged)
        activations, unknown = 0, 0
        for out in node.outputs:
            if not out:
                continue
            v = graph.values.get(out)
            n = v.nbytes if v is not None else None
            if n is None and v is not None and v.shape is not None and any(
                    isinstance(d, int) and not isinstance(d, bool) and d == 0 for d in v.shape):
                n = 0  # a known-zero extent ([0, unknown, K]): empty whatever the unknown extents are
            if n is None:
                unknown += 1
            else:
                activations += n
        return weights, activations, unknown

    def compute_resource_count(self, node: Any) -> int:
        w, a, _ = self.base_parts(node)
        return w + a

    def measured(self, node: Any) -> NodeAllocationStats | None:
        return None if self.stats is None else self.stats.lookup(node.name)

    # -- bookkeeping --------------------------------------------------------------------------
    def record_cost(self, node: Any, cost: NodeCost) -> None:
        self._costs[node] = cost

    def cost_of(self, node: Any) -> NodeCost | None:
        return self._costs.get(node)

    def would_exceed(self, cost: int) -> bool:
        return self.threshold is not None and self.consumed + cost > self.threshold

    def account_for_node(self, node: Any) -> None:
        """Commit the node's pending weights and add its recorded cost to `consumed`."""
        for name in self._pending_by_node.pop(node, ()):
            self.pending.discard(name)
            self.committed.add(name)
        cost = self._costs.get(node)
        if cost is not None:
            self.consumed += cost.total

    def copy(self) -> ResourceAccountant:
        """An independent copy (to try a placement without committing it)."""
        other = ResourceAccountant(self.threshold, self.stats, self.ep_name)
        other.consumed = self.consumed
        other.committed = set(self.committed)
        other.pending = set(self.pending)
        other._pending_by_node = dict(self._pending_by_node)
        other._costs = dict(self._costs)
        other.stopped = self.stopped
        return other

    def reset_for_new_pass(self) -> None:
        self.pending.clear()
        self._pending_by_node.clear()
        self.stopped = False

    reset_pending_weights = reset_for_new_pass


def node_cost_breakdown(accountant: ResourceAccountant, node: Any, workspace_estimate: int | None) -> NodeCost:
    """`node_cost_for_budget` with its parts; also records the cost in the accountant."""
    weights, activations, unknown = accountant.base_parts(node)
    base = weights + activations
    if workspace_estimate is not None:
        if workspace_estimate < 0:
            raise ValueError(f"workspace estimate {workspace_estimate!r} for node {node.name!r} is negative")
        computed, source = base + workspace_estimate, "estimate"
    else:
        computed, source = apply_workspace_heuristic(base), "heuristic"
    total = computed
    row = accountant.measured(node)
    if row is not None:
        # measured initializer bytes are replaced by the deduplicated charge: shared weights count once
        measured = row.input_sizes + row.total_dynamic_sizes + row.total_temp_allocations + weights
        if workspace_estimate is None:
            total, source = max(measured, base), "measured"
        elif measured > computed:
            total, source = measured, "measured"
    cost = NodeCost(node=node.name, weights=weights, activations=activations, workspace=total - base,
                    workspace_source=source, total=total, unknown_outputs=unknown)
    accountant.record_cost(node, cost)
    return cost


def node_cost_for_budget(accountant: ResourceAccountant, node: Any, workspace_estimate: int | None) -> int:
    """Bytes a node costs its device: base + estimate, or base x 1.5 without one (see module doc)."""
    return node_cost_breakdown(accountant, node, workspace_estimate).total
