"""The two budget loops: one an in-tree provider runs itself, one the host runs over a plugin's
proposals. Both go through `node_cost_for_budget` and stop at the first node that would overrun."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from ._accounting import ResourceAccountant, WorkspaceEstimator, node_cost_for_budget, safe_estimate
from ._claims import Claim, Declined


@attrs.frozen
class BudgetStop:
    """Where a provider's budget ran out: the node that did not fit and the numbers."""

    ep: str
    node: str
    consumed: int
    cost: int
    budget: int

    @property
    def reason(self) -> str:
        return (f"{self.ep} budget stop at node {self.node!r}: {self.consumed} B used + {self.cost} B for "
                f"this node > budget {self.budget} B; this and later nodes go to the next provider")


@attrs.define
class CapabilityResult:
    """One provider's pass: accepted nodes in order, declines, and where the budget stopped it."""

    ep: str
    loop: str  # "in-tree" | "host"
    accepted: list[Any] = attrs.field(factory=list)
    declined: list[Any] = attrs.field(factory=list)  # claims with .supported False
    over_budget: list[Any] = attrs.field(factory=list)  # supported nodes refused by the budget
    stop: BudgetStop | None = None


def _estimate(claim: Claim, estimator: WorkspaceEstimator | None, node: Any, ep_name: str) -> int | None:
    est = getattr(claim, "workspace_estimate", None)
    if est is None:
        est = safe_estimate(estimator, node, ep_name)
    return est


def _label(node: Any) -> str:
    return getattr(node, "label", None) or node.name


def _declined(claim: Any, ep: str, node: Any) -> Any:
    """A partition Declined for any decline: ours, or a duck-typed one (ort-abi's Declined carries the
    same fields: rejected, accepts, remedy, opset)."""
    if isinstance(claim, Declined) or hasattr(claim, "reason") and getattr(claim, "reason", ""):
        return claim
    return Declined(ep=getattr(claim, "ep", None) or ep, node=_label(node), op=node.op_type, domain=node.domain,
                    opset=getattr(claim, "opset", None),
                    rejected=getattr(claim, "rejected", "") or "(no reason given by the provider)",
                    accepts=getattr(claim, "accepts", "") or "", remedy=getattr(claim, "remedy", "") or "")


def _budget_gate(result: CapabilityResult, accountant: ResourceAccountant, node: Any, claim: Claim,
                 estimator: WorkspaceEstimator | None) -> bool:
    """Shared by both loops: cost the node, accept it or stop the pass. Returns False to stop."""
    cost = node_cost_for_budget(accountant, node, _estimate(claim, estimator, node, result.ep))
    if accountant.would_exceed(cost):
        result.stop = BudgetStop(ep=result.ep, node=_label(node), consumed=accountant.consumed, cost=cost,
                                 budget=accountant.threshold)  # type: ignore[arg-type]
        accountant.stopped = True
        result.over_budget.append(node)
        return False
    accountant.account_for_node(node)
    result.accepted.append(node)
    return True


def in_tree_loop(ep: Any, nodes: Sequence[Any], accountant: ResourceAccountant,
                 estimator: WorkspaceEstimator | None = None) -> CapabilityResult:
    """The provider's own GetCapability loop: ask, cost, check, in the given (topological) order."""
    result = CapabilityResult(ep=ep.name, loop="in-tree")
    accountant.reset_for_new_pass()
    stopped = False
    for node in nodes:
        claim = ep.claim(node)
        if not claim.supported:
            result.declined.append(_declined(claim, ep.name, node))
            continue
        if stopped:
            result.over_budget.append(node)
            continue
        stopped = not _budget_gate(result, accountant, node, claim, estimator)
    return result


def host_loop(ep_name: str, proposals: Iterable[tuple[Any, Claim]], order: Sequence[Any],
              accountant: ResourceAccountant, estimator: WorkspaceEstimator | None = None) -> CapabilityResult:
    """The host's loop over what a plugin proposed (no budget on the plugin side), in `order`."""
    result = CapabilityResult(ep=ep_name, loop="host")
    accountant.reset_for_new_pass()
    claims: dict[Any, Claim] = {}
    for node, claim in proposals:
        claims[node] = claim
    stopped = False
    for node in order:
        claim = claims.get(node)
        if claim is None:
            continue
        if not claim.supported:
            result.declined.append(_declined(claim, ep_name, node))
            continue
        if stopped:
            result.over_budget.append(node)
            continue
        stopped = not _budget_gate(result, accountant, node, claim, estimator)
    return result


def run_capability(ep: Any, nodes: Sequence[Any], accountant: ResourceAccountant,
                   estimator: WorkspaceEstimator | None = None) -> CapabilityResult:
    """The host loop for providers that `propose`, the in-tree loop for those that only `claim`."""
    if hasattr(ep, "propose"):
        return host_loop(ep.name, ep.propose(list(nodes)), nodes, accountant, estimator)
    if hasattr(ep, "claim"):
        return in_tree_loop(ep, nodes, accountant, estimator)
    raise TypeError(f"execution provider {ep!r} has neither claim(node) nor propose(nodes); implement one")
