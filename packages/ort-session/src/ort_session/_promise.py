"""The budget promise at initialization: every byte a budgeted device will hold must be in the plan.

A value whose size is unknown at initialization (a symbolic dimension no override or max shape bound) on a
device with a budget cannot be held to that budget by the plan: a run could need any amount there. Such a
session is refused at initialization, naming the values, the dimensions that left them unsized and the
fix. `session.allow_unplanned_shapes = 1` accepts it knowingly: the device's allocator still holds it to its
budget at run time, so a run that needs more fails at its node (and frees what it allocated), and a
`UnplannedShapesWarning` says so at initialization. Plan-only sessions (a device profile without the
device) warn instead of refusing: they never run.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ort_graph

from ._errors import InvalidOptionError, PlanOverBudgetError, UnplannedShapesWarning
from ._options import ALLOW_UNPLANNED_SHAPES

SHOWN = 5

__all__ = ["ALLOW_UNPLANNED_SHAPES", "check_budgeted_values_planned", "check_plan_within_budgets", "largest_blocks_text"]


def check_budgeted_values_planned(graph: Any, unknown_sizes: Sequence[str], device_of_value: Mapping[str, str],
                                  budgets: Mapping[str, int], *, allow: bool, can_run: bool) -> None:
    """Refuse (or, when allowed or plan-only, warn about) values of unknown size on budgeted devices."""
    unplanned: dict[str, list[str]] = {}
    for name in unknown_sizes:
        device = device_of_value.get(name)
        if device in budgets:
            unplanned.setdefault(device, []).append(name)
    if not unplanned:
        return
    where = "; ".join(f"{d} (budget {budgets[d]} bytes): {len(v)} value(s), e.g. {v[:SHOWN]!r}"
                      for d, v in sorted(unplanned.items()))
    hint = ort_graph.dynamic_dims_hint(graph)
    origin = None if hint else ort_graph.first_unresolved_node(graph)  # every input sized: a node is why
    if hint:
        why, fix = f"dynamic input dimensions: {hint}", "give those sizes"
    elif origin is not None:
        why = f"this node: {ort_graph.unresolved_hint(origin)}"
        fix = f"make node {origin.name!r} ({origin.qualified_op}) sizable as said above"
    else:
        why = "shape inference could not size them (see the shape warnings)"
        fix = ("give each dynamic dimension a size (free_dimension_overrides, ortrun --dim NAME=N) or the largest "
               "shapes you will run (max_shapes / session.max_shape_override, ortrun --max-shape INPUT=[d0,...])")
    if allow or not can_run:
        warnings.warn(f"the budget cannot be guaranteed by the plan: values of unknown size are placed on budgeted "
                      f"devices ({where}) because of {why}; runs are held to the budget only by the device allocator "
                      f"and one that needs more fails at its node. To plan them, {fix}",
                      UnplannedShapesWarning, stacklevel=4)
        return
    raise InvalidOptionError(
        f"the budget cannot be planned: values of unknown size would live on budgeted devices ({where}) because of "
        f"{why}. To plan them, {fix}; or set {ALLOW_UNPLANNED_SHAPES}=1 to accept runs held to the budget only by "
        "the device allocator at run time (a run that needs more then fails at its node)")


def largest_blocks_text(gplan: Any, graph: Any, device: str, count: int = 3) -> str:
    """The largest planned blocks on `device`, each with the node that writes it: what an over-budget
    refusal points at."""
    producer = {o: n for n in graph.nodes for o in n.outputs if o}
    parts = []
    for name, nbytes in gplan.largest(device, count):
        node = producer.get(name.split(" (+", 1)[0])
        by = f" written by node {node.name!r} ({node.op_type})" if node is not None else ""
        parts.append(f"{name!r} {nbytes} B{by}")
    return f"largest planned blocks: {', '.join(parts)}" if parts else ""


def check_plan_within_budgets(stages: Mapping[str, Any], *, can_run: bool,
                              detail: Callable[[str], str] | None = None) -> None:
    """Refuse a session whose memory plan needs more than a device's budget (weights + the plan's peak of
    activations, workspace, boundary copies and streaming slots): runs could not be served within it. Rules
    place where the user says, the fallback provider takes whatever is left without a cut-off, and a
    provider's own graph passes run after auto-fit, so this can happen; a plan-only session keeps the
    Level-2 warning instead (it never runs). `detail(device)` names what is large there."""
    over = [s for s in stages.values() if s.budget is not None and s.weights + s.peak > s.budget]
    if not over or not can_run:
        return

    def one(s: Any) -> str:
        extra = detail(s.device) if detail is not None else ""
        return (f"{s.device}: weights {s.weights} + planned peak {s.peak} = {s.weights + s.peak} bytes, over its "
                f"budget of {s.budget} bytes by {s.weights + s.peak - s.budget}" + (f" ({extra})" if extra else ""))

    what = "; ".join(one(s) for s in over)
    raise PlanOverBudgetError(
        f"the memory plan does not fit the budget ({what}); nothing was allocated. Give a larger budget, plan "
        "smaller shapes (free_dimension_overrides / max_shapes), put fewer layers on the device in the rules, or "
        "give only a budget (auto-fit places what fits)")
