"""The exact budget check auto-fit uses: realize a candidate placement on a structural copy of the
model (boundary copies, kernels, declared workspace, the liveness-aware memory plan) and compare
weights + planned peak with each budget. What passes here is what initialization will allocate."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs

import ort_graph
from ort_graph import Model

from . import _progress
from ._boundaries import insert_copies
from ._device_memory import memory_types_of
from ._options import SessionOptions

TRIAL_ALGORITHM = "greedy_by_size"


def device_totals_for(model: Model, placement: Any, providers: Sequence[Any], options: SessionOptions,
                      streaming: Any = None) -> dict[str, dict[str, int]]:
    """Per-device totals (weights, planned peak) that `placement` would need, without touching `model`
    (`streaming`: a StreamingPlan whose weights stay on the host and whose slots count on the device)."""
    from . import _memory
    from ._placement import SessionPlacement

    trial = ort_graph.copy_model(model)
    by_index = {n.index: placement.ep_of(n) for n in model.graph.nodes}
    for node in trial.graph.nodes:
        node.ep = by_index[node.index]
    insert_copies(trial.graph, {p.name: p.device for p in providers}, providers[-1].name,
                  memory_types_of(providers))
    order = ort_graph.topological_order(trial.graph)
    by_name = {p.name: p for p in providers}
    kernels = {n.index: by_name[n.ep].create_kernel(n) for n in trial.graph.nodes}
    trial_placement = SessionPlacement(result=placement, ep_of={n.index: n.ep for n in trial.graph.nodes}, mode="trial")
    quiet = attrs.evolve(options, config={k: v for k, v in options.config.items()
                                          if k != "session.pre_allocate_execution_buffers"}, red_zones=0)
    # greedy-by-size is one of the candidates "auto" keeps the best of, so a trial that fits with it fits
    # with the final plan too: conservative, and several times faster than "auto" on large graphs
    memory = _memory.plan_memory(trial, order, kernels, trial_placement, providers, quiet, algorithm=TRIAL_ALGORITHM,
                                  allocate=False, streaming=streaming)
    return memory.device_totals()


def plan_fits(model: Model, providers: Sequence[Any], options: SessionOptions, budgets: dict[str, int]) -> Callable[[Any], bool]:
    """fits(placement): every budgeted device's weights + planned peak is within its budget."""
    device_of = {p.name: p.device for p in providers}

    def fits(placement: Any) -> bool:
        _progress.tick("auto-fit trials (each plans the memory of a candidate placement)")
        totals = device_totals_for(model, placement, providers, options)
        return all(totals.get(device_of[ep], {}).get("total", 0) <= limit
                   for ep, limit in budgets.items() if ep in device_of)

    return fits
