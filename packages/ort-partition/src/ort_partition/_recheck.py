"""Level-2 re-check: recompute costs on the post-fusion graph, warn with the overrun; never reassign."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from ort_graph import topological_order

from ._accounting import NodeCost, ResourceAccountant, WorkspaceEstimator, node_cost_breakdown, safe_estimate
from ._budget import Budgets, NodeAllocationStats, parse_budget
from ._errors import BudgetOverrunWarning
from ._placement import _graph


@attrs.frozen
class Overrun:
    ep: str
    budget: int
    total: int

    @property
    def overrun(self) -> int:
        return self.total - self.budget

    @property
    def message(self) -> str:
        return (f"post-fusion budget re-check: {self.ep!r} needs {self.total} bytes, over its budget of "
                f"{self.budget} bytes by {self.overrun} bytes. The Level-1 estimate was too optimistic; "
                "improve the workspace estimate of the fused ops (placement is kept as is; a run may run "
                "out of memory)")


@attrs.frozen
class RecheckResult:
    totals: dict[str, int]
    budgets: dict[str, int]
    overruns: tuple[Overrun, ...]
    costs: dict[Any, NodeCost] = attrs.field(eq=False, repr=False)

    @property
    def ok(self) -> bool:
        return not self.overruns


def recheck_budget(graph: Any, budgets: Budgets | str | Mapping[str, Any], *,
                   estimator: WorkspaceEstimator | None = None, eps: Sequence[Any] | None = None,
                   stats: Mapping[str, NodeAllocationStats] | None = None, warn: bool = True) -> RecheckResult:
    """Cost every top-level node on the provider in its `ep` field and compare per-provider totals with
    the budgets. Emits one `BudgetOverrunWarning` per provider over budget (when `warn`). Node
    assignments are never changed."""
    g = _graph(graph)
    order = topological_order(g)
    present = list(dict.fromkeys(n.ep for n in order if n.ep))
    limits = parse_budget(budgets).resolve(list(eps) if eps is not None else present)
    accs: dict[str, ResourceAccountant] = {}
    costs: dict[Any, NodeCost] = {}
    for node in order:
        if not node.ep:
            continue
        acc = accs.setdefault(node.ep, ResourceAccountant(limits.get(node.ep), stats, node.ep))
        est = safe_estimate(estimator, node, node.ep)
        costs[node] = node_cost_breakdown(acc, node, est)
        acc.account_for_node(node)
    totals = {ep: a.consumed for ep, a in accs.items()}
    overruns = tuple(Overrun(ep, limits[ep], totals[ep]) for ep in totals if ep in limits and totals[ep] > limits[ep])
    if warn:
        for o in overruns:
            warnings.warn(o.message, BudgetOverrunWarning, stacklevel=2)
    return RecheckResult(totals=totals, budgets=dict(limits), overruns=overruns, costs=costs)
