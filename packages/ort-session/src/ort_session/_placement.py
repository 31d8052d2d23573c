"""Session glue to ort-partition: layer rules from the options, budgets (our string or ONNX Runtime's
resource-partitioning key), auto-fit when only a budget is given, then placement."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

import ort_partition
from ort_graph import Model, Node

from ._options import CUDA_PARTITIONING, SessionOptions


@attrs.define
class ProviderEstimator:
    """ort-partition's WorkspaceEstimator over the session's providers (Level 1)."""

    providers: Sequence[Any]
    _by_name: dict[str, Any] | None = attrs.field(default=None, init=False)

    def estimate(self, node: Node, ep_name: str) -> int | None:
        if self._by_name is None:  # the first provider of a name, as a search in priority order finds it
            self._by_name = {}
            for p in self.providers:
                self._by_name.setdefault(p.name, p)
        p = self._by_name.get(ep_name)
        return None if p is None else p.estimate(node)


@attrs.define(eq=False)
class SessionPlacement:
    result: Any  # ort_partition.Placement
    ep_of: dict[int, str]  # node index -> provider
    mode: str  # "rules", "auto-fit", "budget", "priority"
    layers_on_device: int | None = None
    # the unit placement chose by: "layers" (rules, or auto-fit by whole decoder layers) or "nodes" (auto-fit
    # by a segment of the topological order on a graph without layers that fit; the per-node accountant)
    granularity: str = "nodes"
    summary: str = ""  # auto-fit's one-line account of what it placed
    streaming: Any = None  # _streaming.StreamingPlan: layers streamed through device slots (None: none)


def _budgets(model: Model, options: SessionOptions) -> tuple[Any, Any]:
    stats = None
    budgets: Any = options.budgets
    setting = options.get(CUDA_PARTITIONING)
    if setting:
        model_dir = model.path.parent if model.path is not None else None
        parsed = ort_partition.parse_resource_partitioning_settings(setting, model_dir)
        stats = parsed.stats
        if budgets is None:
            budgets = parsed.budgets()
    return budgets, stats


def place(model: Model, order: Sequence[Node], providers: Sequence[Any], options: SessionOptions) -> SessionPlacement:
    graph = model.graph
    layering = ort_partition.assign_layers_from_options(graph, options.config, available_eps=providers)
    budgets, stats = _budgets(model, options)
    if budgets:  # to bytes per provider once: a share ('cuda:90%') needs the provider's device memory
        budgets = ort_partition.parse_budget(budgets).resolve(list(providers))
    estimator = ProviderEstimator(providers)
    if layering is None and budgets and len(providers) > 1:
        fits = None
        if not options.node_level_cutoff:
            from ._fit import plan_fits

            fits = plan_fits(model, providers, options, budgets)
        fit = ort_partition.auto_fit(graph, providers, budgets, estimator=estimator, stats=stats,
                                     node_level=options.node_level_cutoff, fits=fits)
        ep_of = {node.index: fit.placement.ep_of(node) for node in graph.nodes}
        placed = SessionPlacement(result=fit.placement, ep_of=ep_of, mode="auto-fit",
                                  layers_on_device=fit.layers_on_device, granularity=fit.granularity,
                                  summary=fit.summary())
        if not options.node_level_cutoff:  # weight streaming (session.weight_streaming; 'off': placed as is)
            from ._streaming import with_streaming

            placed = with_streaming(model, providers, options, budgets, placed, estimator, stats)
        return placed
    result = ort_partition.place(graph, providers, layering=layering, budgets=budgets, estimator=estimator,
                                 stats=stats, node_order=order)
    mode = "rules" if layering is not None else "budget" if budgets else "priority"
    ep_of = {node.index: result.ep_of(node) for node in graph.nodes}
    return SessionPlacement(result=result, ep_of=ep_of, mode=mode, granularity="layers" if layering else "nodes")


@attrs.define
class DeclaredWorkspace:
    """Level-2 estimates: what each finalized kernel declared for its node's resolved shapes."""

    slots: dict[tuple[int, int], int]
    _per_node: dict[int, int] = attrs.field(factory=dict, alias="per_node")

    def __attrs_post_init__(self) -> None:
        for (index, _slot), nbytes in self.slots.items():
            self._per_node[index] = self._per_node.get(index, 0) + nbytes

    def estimate(self, node: Node, ep_name: str) -> int | None:
        return self._per_node.get(node.index, 0)


def level2_recheck(model: Model, placement: SessionPlacement, slots: dict[tuple[int, int], int],
                   providers: Sequence[Any]) -> Any:
    """Recompute every device's cost on the final graph with declared (Level-2) workspace; warn, never move."""
    budgets = placement.result.budgets
    if not budgets:
        return ort_partition.RecheckResult(totals={}, budgets={}, overruns=(), costs={})
    return ort_partition.recheck_budget(model.graph, budgets or {}, estimator=DeclaredWorkspace(slots),
                                        eps=list(providers), warn=False)


def planned_overruns(memory: Any, placement: SessionPlacement, providers: Sequence[Any]) -> list[str]:
    """The precise Level-2 check: per budgeted device, weights + the liveness-aware plan's peak
    (activations, declared workspace, boundary copies) against the budget. One warning per overrun."""
    import warnings

    totals = memory.device_totals()
    found = []
    for p in providers:
        budget = placement.result.budgets.get(p.name)
        t = totals.get(p.device)
        if budget is None or t is None or t["total"] <= budget:
            continue
        msg = (f"Level-2 re-check: {p.name} ({p.device}) needs {t['total']} bytes (weights {t['weights']} + planned "
               f"activations and workspace {t['peak_activations_and_workspace']}), over its budget of {budget} bytes "
               f"by {t['total'] - budget} bytes; placement is kept as is — lower the batch or sequence, or give a "
               "smaller budget so fewer layers are placed")
        warnings.warn(msg, ort_partition.BudgetOverrunWarning, stacklevel=3)
        found.append(msg)
    return found
