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
from collections.abc import Mapping, Sequence
from typing import Any

import ort_graph

from ._errors import InvalidOptionError, PlanOverBudgetError, UnplannedShapesWarning
from ._options import ALLOW_UNPLANNED_SHAPES

SHOWN = 5

__all__ = ["ALLOW_UNPLANNED_SHAPES", "check_budgeted_values_planned", "check_plan_within_budgets"]


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
    inputs = [f"{name} (no shape)" if shape is None else f"{name} {list(shape)!r}"
              for name, shape in ort_graph.symbolic_inputs(graph).items()]
    why = (f"inputs with symbolic dimensions: {', '.join(inputs[:SHOWN])}" if inputs
           else "shape inference could not size them (see the shape warnings)")
    fix = ("give every symbolic dimension a value with free_dimension_overrides (ortrun: --dim name=N) or the "
           "largest shapes you will run with max_shapes / session.max_shape_override")
    loops = _unbounded_loops(graph, [n for names in unplanned.values() for n in names])
    if loops:  # a scan output concatenated per iteration: its length is the trip count, unknown at init
        why += f"; {loops} concatenate(s) scan outputs over a number of iterations shape inference could not bound"
        fix += "; give the Loop a constant trip count (input M), or a static bound its body cannot exceed"
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


def _unbounded_loops(graph: Any, names: Sequence[str]) -> str:
    """The Loop / Scan nodes among the producers of `names` ('' when none), for the refusal's message."""
    nodes = {}
    for name in names:
        v = graph.values.get(name)
        producer = v.producer if v is not None else None
        if producer is not None and producer.op_type in ("Loop", "Scan"):
            nodes[producer.label] = producer.op_type
    return ", ".join(f"{op} node {label!r}" for label, op in list(nodes.items())[:SHOWN])


def check_plan_within_budgets(stages: Mapping[str, Any], *, can_run: bool) -> None:
    """Refuse a session whose memory plan needs more than a device's budget (weights + the plan's peak of
    activations, workspace, boundary copies and streaming slots): runs could not be served within it. Rules
    place where the user says, and a provider's own graph passes run after auto-fit, so this can happen; a
    plan-only session keeps the Level-2 warning instead (it never runs)."""
    over = [s for s in stages.values() if s.budget is not None and s.weights + s.peak > s.budget]
    if not over or not can_run:
        return
    what = "; ".join(f"{s.device}: weights {s.weights} + planned peak {s.peak} = {s.weights + s.peak} bytes, over its "
                     f"budget of {s.budget} bytes by {s.weights + s.peak - s.budget}" for s in over)
    raise PlanOverBudgetError(
        f"the memory plan does not fit the budget ({what}); nothing was allocated. Give a larger budget, plan "
        "smaller shapes (free_dimension_overrides / max_shapes), put fewer layers on the device in the rules, or "
        "give only a budget (auto-fit places what fits)")
