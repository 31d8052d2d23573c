"""Auto-fit by budget alone: as many whole decoder layers as fit, in layer order, the rest on the
fallback provider (optionally continuing node by node into the first layer that does not fit). A graph
without decoder layers is fitted node by node (`_segments`), and so is the first layer of one whose layers
place nothing."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from ort_graph import topological_order

from ._accounting import (
    ResourceAccountant,
    WorkspaceEstimator,
    node_cost_for_budget,
    weight_bytes,
    weight_names,
)
from ._budget import Budgets, NodeAllocationStats, parse_budget
from ._devices import CPU_EP, ep_info
from ._errors import PlacementError
from ._layers import node_group
from ._loops import _declined, _estimate
from ._placement import Placement, _AcceptAll, _graph, place
from ._search import FitCheck, largest_passing
from ._segments import fit_segment


@attrs.frozen
class AutoFitResult:
    """What auto-fit chose and the placement that realizes it."""

    ep: str
    budget: int
    layers_on_device: int  # whole decoder layers placed on `ep`
    total_layers: int
    layer_ids: tuple[int, ...]  # the layers on `ep`, in order
    tail_on_device: bool  # final norm / lm_head and other nodes after the last layer
    partial_nodes: int  # nodes of the next layer taken by the node-level cut-off
    cost_on_device: int  # bytes the chosen nodes cost on `ep`
    placement: Placement = attrs.field(repr=False)
    granularity: str = "layers"  # "layers": whole decoder layers; "nodes": a run of the topological order
    nodes_on_device: int = 0  # granularity "nodes": nodes placed on `ep`
    total_nodes: int = 0  # granularity "nodes": nodes `ep` supports
    segment: tuple[int, int] | None = None  # granularity "nodes": first and last topological position on `ep`

    def _bytes(self) -> str:
        from ._units import format_bytes

        return (f"budget {format_bytes(self.budget)}; per-node cost sum {format_bytes(self.cost_on_device)}, which "
                "counts no liveness reuse: the memory plan decides")

    def summary(self) -> str:
        if self.granularity == "nodes":
            where = f" (topological positions {self.segment[0]}-{self.segment[1]})" if self.segment else ""
            return (f"{self.nodes_on_device}/{self.total_nodes} supported nodes on {self.ep}{where} "
                    f"({self._bytes()})")
        text = (f"{self.layers_on_device}/{self.total_layers} decoder layers on {self.ep} "
                f"({self._bytes()})")
        if self.tail_on_device:
            text += ", output head too"
        if self.partial_nodes:
            text += f", plus {self.partial_nodes} node(s) of the next layer"
        return text


def _sum_cost(acc: ResourceAccountant, nodes: Sequence[Any], claims: Mapping[Any, Any],
              estimator: WorkspaceEstimator | None) -> int:
    total = 0
    for node in nodes:
        total += node_cost_for_budget(acc, node, _estimate(claims[node], estimator, node, acc.ep_name))
        acc.account_for_node(node)
    return total


def auto_fit(graph: Any, eps: Sequence[Any], budgets: Budgets | str | Mapping[str, Any], *,
             estimator: WorkspaceEstimator | None = None, fallback: str = CPU_EP, node_level: bool = False,
             include_tail: bool = True, stats: Mapping[str, NodeAllocationStats] | None = None,
             fits: Callable[[Placement], bool] | None = None) -> AutoFitResult:
    """Place the largest number of whole layers that fits the first budgeted provider's budget.

    Layers come from node names (`layers.N`, or the path derived from torch dynamo metadata); nodes the
    provider declines stay on the fallback and cost nothing. When every layer fits, the nodes after
    the last layer (final norm, lm_head) are tried as one more unit (`include_tail`). `node_level`
    continues into the first unit that does not fit, node by node, until the budget stops it.

    `fits(placement) -> bool` is the exact check (e.g. weights + a liveness-planned memory peak <= the
    budget): the per-node cost sum picks a start, then whole units are dropped while the placement
    does not fit and added while it does. The budget is then enforced by `fits` alone.
    """
    g = _graph(graph)
    providers = [_AcceptAll(e) if isinstance(e, str) else e for e in eps]
    infos = [ep_info(p) for p in providers] + ([ep_info(fallback)] if fallback not in [p.name for p in providers] else [])
    limits = parse_budget(budgets).resolve(infos)
    target = next((p for p in providers if p.name != fallback and p.name in limits), None)
    if target is None:
        raise PlacementError(
            f"auto-fit needs a budget for a non-fallback provider; budgets {limits} name none of "
            f"{[p.name for p in providers if p.name != fallback]} — give one like 'cuda:6GiB'"
        )
    budget = limits[target.name]
    order = topological_order(g)
    pos = {n: i for i, n in enumerate(order)}
    groups = {n: node_group(n) for n in order}
    layer_ids = sorted({k for k in groups.values() if isinstance(k, int)})
    if hasattr(target, "propose"):
        claims = dict(target.propose(list(order)))
    else:
        claims = {n: target.claim(n) for n in order}
    ok = {n for n in order if n in claims and claims[n].supported}
    by_layer: dict[int, list[Any]] = {lid: [] for lid in layer_ids}
    for n in order:
        if isinstance(groups[n], int) and n in ok:
            by_layer[groups[n]].append(n)
    units: list[tuple[Any, list[Any]]] = [(lid, by_layer[lid]) for lid in layer_ids]
    if include_tail and layer_ids:
        last = max(pos[n] for n in order if isinstance(groups[n], int))
        tail = [n for n in order if not isinstance(groups[n], int) and pos[n] > last and n in ok]
        if tail:
            units.append(("tail", tail))

    candidates = [n for n in order if n in ok]
    if not layer_ids:
        return _fit_nodes(g, eps, limits, target, order, candidates, claims, fits, estimator, fallback, stats)
    # where not even the first layer fits, node granularity fits part of it: never more weight bytes than the
    # first layer holds, which a larger budget places whole (auto-fit stays monotone in the budget)
    candidates = next((nodes for _, nodes in units if nodes), [])

    chosen: list[Any] = []
    acc = ResourceAccountant(budget, stats, target.name)
    taken: list[Any] = []
    next_unit: list[Any] | None = None
    last_pos = -1
    for key, nodes in units:
        if not nodes:  # every node of this unit was declined: nothing of it goes on the device
            continue
        if min(pos[n] for n in nodes) > last_pos:
            trial = acc.copy()
            _sum_cost(trial, nodes, claims, estimator)
            merged = chosen + nodes
        else:  # interleaved with what is already chosen: re-cost the union in topological order
            merged = sorted(chosen + nodes, key=pos.__getitem__)
            trial = ResourceAccountant(budget, stats, target.name)
            _sum_cost(trial, merged, claims, estimator)
        if trial.consumed > budget:
            next_unit = nodes
            break
        acc, chosen = trial, merged
        last_pos = max(last_pos, max(pos[n] for n in nodes))
        taken.append(key)

    if fits is not None:
        fit = _fit_exactly(g, eps, limits, target, units, taken, order, fits, estimator, fallback, stats,
                           len(layer_ids), budget)
        _add_claim_declines(fit.placement, claims, order, target.name)
        return _nodes_if_layers_place_nothing(fit, g, eps, limits, target, order, candidates, claims, fits,
                                              estimator, fallback, stats)
    allowed = {n: target.name for n in chosen}
    partial = 0
    if node_level and next_unit is not None:
        allowed.update({n: target.name for n in next_unit})
    placement = place(g, eps, budgets=dict(limits), estimator=estimator, fallback=fallback,
                      stats=stats, allowed=allowed, node_order=order)
    _add_claim_declines(placement, claims, order, target.name)
    on_device = set(placement.nodes_on(target.name))
    if node_level and next_unit is not None:
        partial = sum(1 for n in next_unit if n in on_device)
    whole = [k for k in taken if isinstance(k, int)]
    fit = AutoFitResult(ep=target.name, budget=budget, layers_on_device=len(whole), total_layers=len(layer_ids),
                        layer_ids=tuple(whole), tail_on_device="tail" in taken,
                        partial_nodes=partial, cost_on_device=placement.consumed.get(target.name, 0),
                        placement=placement)
    return _nodes_if_layers_place_nothing(fit, g, eps, limits, target, order, candidates, claims, fits, estimator,
                                          fallback, stats)


def _nodes_if_layers_place_nothing(fit: AutoFitResult, *args: Any) -> AutoFitResult:
    """Layers that place nothing (the first one alone is over the budget) give way to node granularity within
    the first layer when that places something."""
    if fit.placement.nodes_on(fit.ep):
        return fit
    nodes = _fit_nodes(*args, total_layers=fit.total_layers)
    return nodes if nodes.nodes_on_device else fit


def _fit_nodes(g: Any, eps: Sequence[Any], limits: dict[str, int], target: Any, order: list[Any],
               candidates: list[Any], claims: Mapping[Any, Any], fits: Callable[[Placement], bool] | None,
               estimator: WorkspaceEstimator | None, fallback: str, stats: Any, total_layers: int = 0) -> AutoFitResult:
    """Node granularity: ONNX Runtime's accountant without an exact check, the best contiguous segment
    with one (`_segments.fit_segment`)."""
    budget = limits[target.name]
    if fits is not None:
        others = {ep: b for ep, b in limits.items() if ep != target.name}
        placement = fit_segment(g, eps, target.name, candidates, claims, fits, budget=budget, others=others,
                                order=order, estimator=estimator, fallback=fallback, stats=stats).placement
        placement.budgets = dict(limits)
    else:
        placement = place(g, eps, budgets=dict(limits), estimator=estimator, fallback=fallback, stats=stats,
                          allowed={n: target.name for n in candidates}, node_order=order)
    _add_claim_declines(placement, claims, order, target.name)
    pos = {n: i for i, n in enumerate(order)}
    on = [pos[n] for n in placement.nodes_on(target.name)]
    return AutoFitResult(ep=target.name, budget=budget, layers_on_device=0, total_layers=total_layers, layer_ids=(),
                         tail_on_device=False, partial_nodes=0,
                         cost_on_device=sum(c.total for n, c in placement.costs.items()
                                            if placement.assignments.get(n) == target.name),
                         placement=placement, granularity="nodes", nodes_on_device=len(on),
                         total_nodes=len(candidates), segment=(min(on), max(on)) if on else None)


def _fit_exactly(g: Any, eps: Sequence[Any], limits: dict[str, int], target: Any, units: list[tuple[Any, list[Any]]],
                 taken: list[Any], order: list[Any], fits: Callable[[Placement], bool],
                 estimator: WorkspaceEstimator | None, fallback: str, stats: Any, total_layers: int,
                 budget: int) -> AutoFitResult:
    others = {ep: b for ep, b in limits.items() if ep != target.name}
    units = [(key, nodes) for key, nodes in units if nodes]
    count = sum(1 for key, _ in units if key in taken)

    def realize(k: int) -> Placement:
        allowed = {n: target.name for _, nodes in units[:k] for n in nodes}
        return place(g, eps, budgets=others or None, estimator=estimator, fallback=fallback, stats=stats,
                     allowed=allowed, node_order=order)

    # bytes only grow with more units: gallop away from the estimate (the answer is usually a few units from
    # it), then bisect the last step, for the largest count that fits; each check plans a whole placement
    checked: dict[int, Placement] = {}
    answers: dict[int, Any] = {}

    def ok(k: int) -> bool:
        if k not in answers:
            checked[k] = realize(k)
            answers[k] = fits(checked[k])
        return bool(answers[k])

    weights = _unit_weights(units)
    start = max(count, _count_within(weights, budget))
    if start > count and not ok(start):  # fewer fit than the weights alone allow: aim below them
        used = answers[start].used.get(target.name) if isinstance(answers[start], FitCheck) else None
        if used is not None:  # the rest of the device's bytes (activations, workspace) stays about the same
            count = max(count, _count_within(weights, budget - (used - weights[start - 1])))
        count = largest_passing(min(count, start - 1), start - 1, ok)
    else:
        count = largest_passing(start, len(units), ok)
    current = checked[count] if count in checked else realize(count)
    chosen = units[:count]
    current.budgets = dict(limits)
    whole = [k for k, _ in chosen if isinstance(k, int)]
    return AutoFitResult(ep=target.name, budget=budget, layers_on_device=len(whole), total_layers=total_layers,
                         layer_ids=tuple(whole), tail_on_device=any(k == "tail" for k, _ in chosen), partial_nodes=0,
                         cost_on_device=current.consumed.get(target.name, 0), placement=current)


def _unit_weights(units: list[tuple[Any, list[Any]]]) -> list[int]:
    """Weight bytes of the first 1, 2, ... units (each initializer once)."""
    seen: set[str] = set()
    total, out = 0, []
    for _, nodes in units:
        for node in nodes:
            for name in weight_names(node):
                if name not in seen:
                    seen.add(name)
                    total += weight_bytes(node, name)
        out.append(total)
    return out


def _count_within(weights: list[int], budget: int) -> int:
    """How many leading units' weights fit `budget`: where the exact search starts. The per-node cost sum
    frees no activation, so it starts far below the answer when activations weigh more than weights (long
    prompts, narrow models: 15 of 162 layers where all fit); the device holds the weights of every node
    placed on it, so the answer is rarely above this count (only where weights are streamed)."""
    return next((k for k, w in enumerate(weights) if w > budget), len(weights))


def _add_claim_declines(placement: Placement, claims: Mapping[Any, Any], order: Sequence[Any], ep: str) -> None:
    """Declines found while choosing units are part of the placement's story."""
    listed = {(getattr(d, "ep", None), getattr(d, "node", None)) for d in placement.declines}
    for n in order:
        c = claims.get(n)
        if c is not None and not c.supported:
            d = _declined(c, ep, n)
            if (d.ep, d.node) not in listed:
                placement.declines.append(d)
