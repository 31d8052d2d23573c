"""The exact budget check auto-fit uses: realize a candidate placement on a structural copy of the
model (boundary copies, kernels, declared workspace, the liveness-aware memory plan) and compare
weights + planned peak with each budget. What passes here is what initialization will allocate."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs

import ort_graph
from ort_graph import Model
from ort_partition import FitCheck

from . import _progress
from ._boundaries import insert_copies
from ._device_memory import memory_types_of
from ._ep_passes import ep_passes_enabled, run_ep_passes
from ._options import SessionOptions

TRIAL_ALGORITHM = "greedy_by_size"


@attrs.define
class TrialCache:
    """What auto-fit's trials share: each node's declared workspace (and pre-packed bytes) per provider. A declaration depends on
    the node (op, attributes) and its input shapes and types, which placement does not change (a boundary
    copy has its source's shape and type), and on the provider that makes the kernel: so it is kept per
    (node of the model, provider), and per (copy op, copied value, provider) for boundary copies. Valid
    while the model's graph is not edited (one auto-fit call)."""

    slots: dict[tuple[Any, ...], tuple[tuple[int, int], ...]] = attrs.field(factory=dict)
    packed: dict[tuple[Any, ...], tuple[tuple[int, int], ...]] = attrs.field(factory=dict)  # pre-packed inputs
    releases: dict[tuple[Any, ...], bool] = attrs.field(factory=dict)  # its kernel computes without them once packed

    @staticmethod
    def key(node: Any, source: int | None) -> tuple[Any, ...]:
        """(model node index, provider), or for a boundary copy (op, the value it copies, provider): a copy's
        input has its source value's shape and type."""
        return (source, node.ep) if source is not None else (node.op_type, node.inputs[0], node.ep)


def device_totals_for(model: Model, placement: Any, providers: Sequence[Any], options: SessionOptions,
                      cache: TrialCache | None = None, streaming: Any = None) -> dict[str, dict[str, int]]:
    """Per-device totals (weights, planned peak) that `placement` would need, without touching `model`.
    With `cache`, declarations of earlier trials are reused (kernels are made for new (node, provider) only);
    `streaming`: a StreamingPlan whose weights stay on the host and whose slots count on the device."""
    from . import _memory
    from ._placement import SessionPlacement
    from ._prepack import node_prepacked, releases_packed

    cache = cache if cache is not None else TrialCache()
    trial = ort_graph.copy_model(model)
    origin: dict[int, int] = {}  # id(trial node) -> index of the model node it copies (copies have none)
    for node, source in zip(trial.graph.nodes, model.graph.nodes):
        node.ep = placement.ep_of(source)
        origin[id(node)] = source.index
    originals = list(trial.graph.nodes)  # kept alive: a node a pass removes must not lend its id() to a new one
    if ep_passes_enabled(options):  # the providers' own passes, as the session runs them after placement
        run_ep_passes(trial.graph, providers)
        alive = {id(n) for n in trial.graph.nodes}  # removed nodes leave `origin` before their id() can be reused
        origin = {id(n): origin[id(n)] for n in originals if id(n) in alive}
    insert_copies(trial.graph, {p.name: p.device for p in providers}, providers[-1].name,
                  memory_types_of(providers))
    order = ort_graph.topological_order(trial.graph)
    by_name = {p.name: p for p in providers}
    # kernels in node order, as the session makes them, for what no earlier trial declared
    kernels = {n.index: by_name[n.ep].create_kernel(n) for n in trial.graph.nodes
               if cache.key(n, origin.get(id(n))) not in cache.slots}

    def declared(node: Any) -> tuple[tuple[int, int], ...]:
        key = cache.key(node, origin.get(id(node)))
        found = cache.slots.get(key)
        if found is None:
            found = cache.slots[key] = _memory.declared_slots(node, kernels[node.index])
        return found

    def packs(node: Any) -> tuple[tuple[int, int], ...]:
        key = cache.key(node, origin.get(id(node)))
        found = cache.packed.get(key)
        if found is None:
            found = cache.packed[key] = node_prepacked(trial.graph, node, kernels[node.index])
            cache.releases[key] = releases_packed(kernels[node.index])
        return found

    by_index = {n.index: n for n in trial.graph.nodes}

    def releases(index: int) -> bool:  # asked only of nodes `packs` saw pack something
        node = by_index[index]
        return cache.releases.get(cache.key(node, origin.get(id(node))), False)

    trial_placement = SessionPlacement(result=placement, ep_of={n.index: n.ep for n in trial.graph.nodes}, mode="trial")
    quiet = attrs.evolve(options, config={k: v for k, v in options.config.items()
                                          if k != "session.pre_allocate_execution_buffers"}, red_zones=0)
    # greedy-by-size is one of the candidates "auto" keeps the best of, so a trial that fits with it fits
    # with the final plan too: conservative, and several times faster than "auto" on large graphs
    memory = _memory.plan_memory(trial, order, kernels, trial_placement, providers, quiet, algorithm=TRIAL_ALGORITHM,
                                  allocate=False, declared=declared, packs=packs, releases=releases,
                                  streaming=streaming)
    return memory.device_totals()


def plan_fits(model: Model, providers: Sequence[Any], options: SessionOptions, budgets: dict[str, int]) -> Callable[[Any], FitCheck]:
    """fits(placement): every budgeted device's weights + planned peak is within its budget. The trials of
    one call share a `TrialCache`; make a new `fits` after editing the model."""
    device_of = {p.name: p.device for p in providers}
    cache = TrialCache()

    def fits(placement: Any) -> FitCheck:
        _progress.tick("auto-fit trials (each plans the memory of a candidate placement)")
        totals = device_totals_for(model, placement, providers, options, cache)
        used = {ep: totals.get(device_of[ep], {}).get("total", 0) for ep in budgets if ep in device_of}
        weights = {ep: totals.get(device_of[ep], {}).get("weights", 0) for ep in used}
        return FitCheck(all(used[ep] <= budgets[ep] for ep in used), used, weights)

    return fits
