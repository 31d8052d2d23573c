"""Placement: providers in priority order claim nodes, layer rules restrict who may take what,
budgets stop a provider, and whatever is left goes to the fallback provider.

The fallback's budget is no cut-off here: a node it would refuse has nowhere else to go, and the per-node
cost sum (no liveness reuse) can be many times the real plan (67 MiB summed against a 2.1 MiB plan on a
small CNN). Its pass counts what it takes (`consumed`) and the memory plan holds the device to the budget
exactly (ort-session refuses a plan over it at initialization, `PlanOverBudgetError`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from ort_graph import topological_order

from ._accounting import NodeCost, ResourceAccountant, WorkspaceEstimator
from ._budget import Budgets, NodeAllocationStats, parse_budget
from ._claims import Supported
from ._devices import CPU_EP, ep_info
from ._errors import PlacementError
from ._layering import LayeringIndex
from ._loops import BudgetStop, CapabilityResult, run_capability


@attrs.define
class _AcceptAll:
    """A provider given only by name: it takes every node it is offered."""

    name: str

    def claim(self, node: Any) -> Supported:
        return Supported()


@attrs.define(eq=False)
class Placement:
    """Where every (top-level) node goes, what it costs there, and every decline and budget stop."""

    assignments: dict[Any, str]  # node -> provider name, in topological order
    costs: dict[Any, NodeCost]  # node -> its cost on the provider that took it (budgeted or not)
    declines: list[Any]  # every claim with .supported False, from every provider
    stops: dict[str, BudgetStop]
    budgets: dict[str, int]
    consumed: dict[str, int]
    loops: dict[str, str]  # provider -> "in-tree" | "host"
    fallback: str
    layering: LayeringIndex | None = None
    order: list[Any] = attrs.field(factory=list, repr=False)
    subgraph_nodes: dict[Any, str] = attrs.field(factory=dict, repr=False)  # inherit the parent's provider

    def ep_of(self, node: Any) -> str | None:
        return self.assignments.get(node) or self.subgraph_nodes.get(node)

    def nodes_on(self, ep: str) -> list[Any]:
        return [n for n, e in self.assignments.items() if e == ep]

    def by_name(self) -> dict[str, str]:
        return {n.name: e for n, e in self.assignments.items()}

    def apply(self) -> None:
        """Write the provider into every node's `ep` field (subgraph nodes get their parent's)."""
        for node, ep in self.assignments.items():
            node.ep = ep
        for node, ep in self.subgraph_nodes.items():
            node.ep = ep


def _graph(graph_or_model: Any) -> Any:
    return graph_or_model.graph if hasattr(graph_or_model, "graph") and not hasattr(graph_or_model, "nodes") else graph_or_model


def _walk_sub(node: Any, ep: str, out: dict[Any, str]) -> None:
    for g in node.subgraphs:
        for sub in g.nodes:
            out[sub] = ep
            _walk_sub(sub, ep, out)


def place(graph: Any, eps: Sequence[Any], *, layering: LayeringIndex | None = None,
          budgets: Budgets | str | Mapping[str, Any] | None = None, estimator: WorkspaceEstimator | None = None,
          fallback: str = CPU_EP, stats: Mapping[str, NodeAllocationStats] | None = None,
          allowed: Mapping[Any, str] | None = None, node_order: Sequence[Any] | None = None) -> Placement:
    """Assign every top-level node of `graph` (a Graph or Model) to a provider.

    `eps` are providers in priority order: objects with `claim(node)` (in-tree loop) or `propose(nodes)`
    (host loop), or plain names (take everything). With `layering`, a node matched by a rule may only go
    to that rule's provider and unmatched nodes go to `fallback`; `allowed` (node -> provider) is the
    same restriction given directly (auto-fit uses it). `budgets` limits bytes per device; `stats` is
    a measured per-node profile (the larger of measured and computed cost is used).
    """
    g = _graph(graph)
    providers = [_AcceptAll(e) if isinstance(e, str) else e for e in eps]
    names = [p.name for p in providers]
    if len(set(names)) != len(names):
        raise PlacementError(f"execution providers {names} repeat a name; list each provider once")
    infos = [ep_info(p) for p in providers]
    if fallback not in names:
        providers.append(_AcceptAll(fallback))
        infos.append(ep_info(fallback))
    if layering is not None and allowed is not None:
        raise PlacementError("give either `layering` or `allowed`, not both")
    limits = parse_budget(budgets).resolve(infos) if budgets else {}
    order = list(node_order) if node_order is not None else topological_order(g)

    def permitted(node: Any, ep: str) -> bool:
        if ep == fallback:
            return True  # the fallback takes whatever is left: declined, over budget, unmatched
        if layering is not None:
            want = layering.ep_of(node)
            return want == ep if want is not None else ep == fallback
        if allowed is not None:
            want = allowed.get(node)
            return want == ep if want is not None else ep == fallback
        return True

    assignments: dict[Any, str] = {}
    costs: dict[Any, NodeCost] = {}
    declines: list[Any] = []
    stops: dict[str, BudgetStop] = {}
    consumed: dict[str, int] = {}
    loops: dict[str, str] = {}
    results: dict[str, CapabilityResult] = {}
    ordered = [p for p in providers if p.name != fallback] + [p for p in providers if p.name == fallback]
    for provider in ordered:
        candidates = [n for n in order if n not in assignments and permitted(n, provider.name)]
        last = provider.name == fallback  # counted, never stopped: the exact plan checks its budget
        acc = ResourceAccountant(None if last else limits.get(provider.name), None if last else stats,
                                 provider.name)
        res = run_capability(provider, candidates, acc, estimator)
        results[provider.name] = res
        loops[provider.name] = res.loop
        for node in res.accepted:
            assignments[node] = provider.name
            cost = acc.cost_of(node)
            if cost is not None:
                costs[node] = cost
        declines.extend(res.declined)
        if res.stop is not None:
            stops[provider.name] = res.stop
        consumed[provider.name] = acc.consumed
    missing = [n for n in order if n not in assignments]
    if missing:
        fb = results.get(fallback)
        names = {getattr(n, "label", None) or n.name for n in missing} | {n.name for n in missing}
        mine = [d for d in declines if getattr(d, "node", None) in names]
        # the fallback's own reasons first: they say why nothing could take the node
        mine.sort(key=lambda d: getattr(d, "ep", None) != fallback)
        why = [d.reason for d in mine][:5]
        raise PlacementError(
            f"{len(missing)} node(s) have no execution provider, e.g. {[getattr(n, 'label', n.name) for n in missing[:5]]}; "
            f"the fallback {fallback!r} could not take them"
            + (f"; declines: {why}" if why else "")
            + (f"; fallback pass accepted {len(fb.accepted)} node(s)" if fb is not None else "")
            + " — register a provider that supports them"
        )
    ordered_assign = {n: assignments[n] for n in order}
    sub: dict[Any, str] = {}
    for node, ep in ordered_assign.items():
        _walk_sub(node, ep, sub)
    return Placement(assignments=ordered_assign, costs=costs, declines=declines, stops=stops, budgets=limits,
                     consumed=consumed, loops=loops, fallback=fallback, layering=layering, order=order,
                     subgraph_nodes=sub)
