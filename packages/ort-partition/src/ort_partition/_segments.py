"""Auto-fit at node granularity, for graphs without decoder layers (CNNs, MLPs, encoders named otherwise).

The unit is a node. `candidates` are the nodes the device provider supports, in topological order; the
nodes it declines stay on the fallback provider and do not end a segment (their inputs and outputs cross
the boundary, and the exact check counts those copies: a segment whose copies do not fit is rejected).

- Without an exact check, ONNX Runtime's accountant is the rule: candidates in order are claimed until the
  next one would exceed the budget (`node_cost_for_budget`), and none after it.
- With the exact check `fits(placement)` (weights + planned activations + workspace + boundary copies
  <= budget), the device gets one contiguous run of candidates: the one that puts the most weight bytes on
  the device among all runs that fit (`_heaviest`, exact: a larger budget never places fewer weight bytes),
  then the one with more nodes, then the larger per-node cost sum (the bytes it holds there: weights, outputs,
  workspace), then the earlier start. The first candidates to compare are the longest run that fits from the
  first candidate and from the start of the window of per-node costs that holds the most weight bytes within
  the budget (a CNN's first convolutions carry the largest activations and the least weight); one segment
  means two boundaries at most: few copies. Each length is found by galloping from an estimate and bisecting
  (`largest_passing`); when no run fits with weights, candidates are tried alone and extended, in the order of
  a lower bound of what one node alone needs on the device (its weights + the larger of its copied-in inputs
  and its outputs: nothing less can hold it, whatever in-place reuse the plan finds), only while that bound is
  within the budget, at most `SINGLETON_TRIES`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from ._accounting import ResourceAccountant, WorkspaceEstimator, node_cost_breakdown
from ._heaviest import heavier_segment, reads_weights
from ._loops import _estimate
from ._placement import Placement, place
from ._search import largest_passing

SINGLETON_TRIES = 16


@attrs.define(eq=False)
class Segment:
    """Candidates [start, end) on the device, and the placement that realizes it."""

    start: int
    end: int
    placement: Placement
    weights: int  # weight bytes on the device (deduplicated; as the exact check reports them when it does)
    cost: int = 0  # the per-node cost sum of the segment (weights, outputs, workspace)


@attrs.define(eq=False)
class _Costs:
    """Per-candidate cost and weight bytes as the accountant charges them in topological order."""

    total: list[int]
    weights: list[int]


def _costs(candidates: Sequence[Any], claims: Mapping[Any, Any], estimator: WorkspaceEstimator | None,
           stats: Any, ep: str) -> _Costs:
    acc = ResourceAccountant(None, stats, ep)
    out = _Costs(total=[], weights=[])
    for n in candidates:
        cost = node_cost_breakdown(acc, n, _estimate(claims[n], estimator, n, ep))
        acc.account_for_node(n)
        out.total.append(cost.total)
        out.weights.append(cost.weights)
    return out


def alone_lower_bound(node: Any) -> int:
    """Bytes one node needs on a device when it is placed there alone, at least: its weights, plus the larger
    of its inputs (copied in) and its outputs (values of unknown size count 0)."""
    graph = node.graph
    weights = inputs = outputs = 0
    for name in dict.fromkeys(n for n in node.inputs if n):
        init = graph.initializers.get(name)
        if init is not None:
            weights += init.nbytes
        else:
            v = graph.values.get(name)
            inputs += (v.nbytes or 0) if v is not None else 0
    for name in node.outputs:
        v = graph.values.get(name) if name else None
        outputs += (v.nbytes or 0) if v is not None else 0
    return weights + max(inputs, outputs)


def accountant_count(candidates: Sequence[Any], claims: Mapping[Any, Any], estimator: WorkspaceEstimator | None,
                     stats: Any, ep: str, budget: int) -> int:
    """How many candidates, from the first, ONNX Runtime's accountant claims before the budget stops it."""
    acc = ResourceAccountant(budget, stats, ep)
    for i, n in enumerate(candidates):
        cost = node_cost_breakdown(acc, n, _estimate(claims[n], estimator, n, ep))
        if acc.would_exceed(cost.total):
            return i
        acc.account_for_node(n)
    return len(candidates)


def heaviest_window_start(costs: _Costs, budget: int) -> int:
    """Start of the window of consecutive candidates whose cost sum is within the budget and whose weight
    bytes (then node count) are the largest: two pointers, one pass."""
    best, best_key, lo, cost, weights = 0, (-1, -1), 0, 0, 0
    for hi in range(len(costs.total)):
        cost += costs.total[hi]
        weights += costs.weights[hi]
        while cost > budget and lo <= hi:
            cost -= costs.total[lo]
            weights -= costs.weights[lo]
            lo += 1
        key = (weights, hi + 1 - lo)
        if lo <= hi and key > best_key:
            best, best_key = lo, key
    return best


def fit_segment(graph: Any, eps: Sequence[Any], target: str, candidates: Sequence[Any], claims: Mapping[Any, Any],
                fits: Callable[[Placement], bool], *, budget: int, others: Mapping[str, int], order: Sequence[Any],
                estimator: WorkspaceEstimator | None, fallback: str, stats: Any) -> Segment:
    """The contiguous segment of `candidates` to put on `target` (see the module doc); an empty segment
    (everything on the fallback) when not even one candidate fits."""
    realized: dict[tuple[int, int], Placement] = {}
    passed: dict[tuple[int, int], Any] = {}

    def realize(start: int, end: int) -> Placement:
        if (start, end) not in realized:
            allowed = {n: target for n in candidates[start:end]}
            realized[(start, end)] = place(graph, eps, budgets=dict(others) or None, estimator=estimator,
                                           fallback=fallback, stats=stats, allowed=allowed, node_order=order)
        return realized[(start, end)]

    def ok(start: int, end: int) -> bool:
        if end <= start:
            return True  # nothing on the device
        if (start, end) not in passed:
            passed[(start, end)] = fits(realize(start, end))
        return bool(passed[(start, end)])

    def segment(start: int, end: int) -> Segment:
        p = realize(start, end)
        on = set(p.nodes_on(target))
        mine = [c for n, c in p.costs.items() if n in on]
        reported = getattr(passed.get((start, end)), "weights", None) or {}
        weights = reported.get(target, sum(c.weights for c in mine))
        return Segment(start=start, end=end, placement=p, weights=weights, cost=sum(c.total for c in mine))

    def longest_from(start: int, guess: int, upper: int | None = None) -> Segment | None:
        upper = len(candidates) - start if upper is None else upper
        length = largest_passing(guess, upper, lambda k: ok(start, start + k))
        if not length:
            return None
        end = start + length
        start -= largest_passing(0, start, lambda k: ok(start - k, end))  # and as far back as it fits
        return segment(start, end)

    costs = _costs(candidates, claims, estimator, stats, target)
    found: list[Segment] = []
    for start in dict.fromkeys([0, heaviest_window_start(costs, budget)]):
        guess = accountant_count(candidates[start:], claims, estimator, stats, target, budget)
        seg = longest_from(start, guess)
        if seg is not None:
            found.append(seg)
    heavier = heavier_segment([reads_weights(n) for n in candidates], max((s.weights for s in found), default=0),
                              ok, lambda s, e: (s, e) in passed and not passed[(s, e)],
                              lambda s, e, cap: longest_from(s, e - s, cap - s), lambda seg: seg.weights)
    if heavier is not None:
        found.append(heavier)
    if not found:  # the first nodes are too large: single nodes by their lower bound, each extended as far as it fits
        bounds = [alone_lower_bound(n) for n in candidates]
        tries = [i for i in sorted(range(len(candidates)), key=bounds.__getitem__) if bounds[i] <= budget]
        for start in tries[:SINGLETON_TRIES]:
            seg = longest_from(start, 1) if ok(start, start + 1) else None
            if seg is not None:
                found.append(seg)
                break
    if not found:
        return Segment(start=0, end=0, placement=realize(0, 0), weights=0)
    return max(found, key=lambda s: (s.weights, s.end - s.start, s.cost, -s.start))
