"""Weight streaming, planned: which decoder layers stay resident on the device, which are streamed
(weights in host memory, copied into one of two device slots just before the layer runs) and which run
on the CPU, chosen by ort-partition's cost model and held to the device budget by the exact plan check.

`session.weight_streaming`: `off` keeps today's placement exactly; `on` streams every layer that does not
fit resident and can stream; `auto` (default) streams where the cost model predicts a faster run than
the placement without streaming, and only on a device whose published speeds are known (a CUDA device
profile) that is present (a plan-only profile for an absent GPU: `on` only); the simulated GPU's stand-in speeds (`ort_partition.SIMULATED_DEVICE`) serve `on` only, so a
simulated-GPU session without the option is placed as before."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

import ort_partition
from ort_graph import Model, constant_names

from ._errors import InvalidOptionError
from ._options import WEIGHT_STREAMING, WEIGHT_STREAMING_CPU, cpu_profile

__all__ = ["WEIGHT_STREAMING", "StreamedLayer", "StreamingPlan", "device_speeds_for", "streaming_mode",
           "with_streaming"]


MODES = ("off", "on", "auto")
SLOTS = 2  # double buffering
ALIGN = 256  # each weight's offset in a slot


def streaming_mode(options: Any) -> str:
    value = str(options.get(WEIGHT_STREAMING) or "auto").strip().lower()
    if value not in MODES:
        raise InvalidOptionError(f"option {WEIGHT_STREAMING!r}={value!r} is not one of {MODES!r}; use 'off' (no "
                                 "streaming), 'on' (stream every layer that does not fit) or 'auto' (the cost model "
                                 "decides)")
    return value


@attrs.frozen
class StreamedLayer:
    layer: int
    weights: tuple[tuple[str, int, int], ...]  # (initializer, offset in the slot, bytes)

    @property
    def nbytes(self) -> int:
        return sum(n for _, _, n in self.weights)


@attrs.define
class StreamingPlan:
    """What streaming chose: per layer resident/streamed/cpu, the streamed layers' slot layouts, the slot
    size, and the predicted seconds per run of each strategy (for the plan's table)."""

    device: str
    ep: str
    mode: str
    choice: dict[int, str]
    layers: tuple[StreamedLayer, ...]
    slot_bytes: int
    times: dict[str, float]
    per_layer: dict[int, dict[str, float]]
    speeds: ort_partition.DeviceSpeeds
    cpu: ort_partition.CpuProfile
    slots: int = SLOTS
    pinned: bool = False  # the device stages copies in pinned host memory (one buffer per slot): host bytes

    @property
    def pinned_bytes(self) -> int:
        """Pinned (page-locked) host memory the streamed run holds for staging: one slot's size per slot."""
        return self.slot_total if self.pinned else 0

    @property
    def weight_names(self) -> set[str]:
        return {name for layer in self.layers for name, _, _ in layer.weights}

    @property
    def slot_keys(self) -> tuple[str, ...]:
        """The slots' names as run-long blocks of the device's memory plan (`ort_memplan.plan_graph(run_long=)`)."""
        return tuple(f"weight-streaming slot {k}" for k in range(self.slots)) if self.layers else ()

    @property
    def slot_total(self) -> int:
        return self.slots * self.slot_bytes if self.layers else 0

    def copies(self) -> dict[str, int]:
        """Host-to-device copies per run (one per streamed weight) and the bytes they move."""
        return {"count": sum(len(layer.weights) for layer in self.layers),
                "bytes": sum(layer.nbytes for layer in self.layers), "layers": len(self.layers),
                "slot_bytes": self.slot_bytes, "slots": self.slots if self.layers else 0,
                "pinned_host_bytes": self.pinned_bytes}

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "device": self.device, "ep": self.ep, "copies": self.copies(),
                "predicted_seconds_per_run": dict(self.times),
                "layers": [{"layer": lid, "choice": c, **{f"{k}_s": v for k, v in self.per_layer[lid].items()}}
                           for lid, c in sorted(self.choice.items())],
                "device_speeds": attrs.asdict(self.speeds), "cpu": attrs.asdict(self.cpu)}


def device_speeds_for(provider: Any) -> ort_partition.DeviceSpeeds | None:
    """The one place device profiles are read: a provider's own profile (ort-cuda-ep's, today), else the
    simulated GPU's documented defaults; None when the device's speeds are unknown."""
    profile = getattr(getattr(provider, "inner", provider), "profile", None)
    if profile is not None:
        return ort_partition.device_speeds(profile)
    if getattr(provider, "device", None) == "simgpu":
        return ort_partition.SIMULATED_DEVICE
    return None


def _layers(graph: Any, target: Any) -> tuple[dict[int, list[Any]], set[int], dict[int, list[str]]]:
    """Nodes per decoder layer, the layers that can stream (every node claimed by `target`) and each one's
    own weights (read only inside the layer); a weight shared with other layers (rotary tables, tied
    embeddings) stays resident, since it cannot leave a slot with one layer."""
    by_layer: dict[int, list[Any]] = {}
    readers: dict[str, set[Any]] = {}
    for node in graph.nodes:
        group = ort_partition.node_group(node)
        if isinstance(group, int):
            by_layer.setdefault(group, []).append(node)
        for name in list(node.inputs) + node.implicit_inputs():
            if name in graph.initializers:
                readers.setdefault(name, set()).add(group)
    consts = constant_names(graph)  # an overridable initializer is copied to the device as an input is
    own = {lid: sorted({n for node in nodes for n in node.inputs
                        if n in consts and readers[n] == {lid}})
           for lid, nodes in by_layer.items()}
    can = {lid for lid, nodes in by_layer.items() if own[lid] and all(target.claim(n).supported for n in nodes)}
    return by_layer, can, own


def _slot_layout(graph: Any, lid: int, names: Sequence[str]) -> StreamedLayer:
    out, offset = [], 0
    for name in names:
        nbytes = graph.initializers[name].nbytes
        out.append((name, offset, nbytes))
        offset += -(-nbytes // ALIGN) * ALIGN
    return StreamedLayer(lid, tuple(out))


def with_streaming(model: Model, providers: Sequence[Any], options: Any, budgets: Mapping[str, int],
                   placement: Any, estimator: Any, stats: Any) -> Any:
    """The auto-fit placement, revised with streamed layers where `session.weight_streaming` asks for them
    (and the exact plan check, slots included, passes); the placement unchanged otherwise."""
    mode = streaming_mode(options)
    fit = placement.result
    target = next((p for p in providers if p.name in budgets and p is not providers[-1]), None)
    if mode == "off" or target is None or placement.granularity != "layers":
        return placement
    speeds = device_speeds_for(target)
    if mode == "auto" and (speeds is None or speeds is ort_partition.SIMULATED_DEVICE
                           or not getattr(target, "can_run", True)):
        # auto decides only with the device's published speeds (never stand-ins), and only where the device is
        # present: planning for an absent GPU, the CPU measured here is not the CPU beside that GPU
        return placement
    speeds = speeds or ort_partition.SIMULATED_DEVICE
    graph = model.graph
    by_layer, can, own = _layers(graph, target)
    order = sorted(by_layer)
    works = [ort_partition.layer_work(graph, lid, by_layer[lid]) for lid in order]
    given = options.get(WEIGHT_STREAMING_CPU)
    cpu = ort_partition.CpuProfile(*cpu_profile(given)) if given else ort_partition.measure_cpu_profile()
    resident0 = [lid for lid in order if all(fit.ep_of(n) == target.name for n in by_layer[lid])]
    times = {"all-CPU": ort_partition.run_time(works, {}, speeds, cpu),
             "partial offload": ort_partition.run_time(works, dict.fromkeys(resident0, ort_partition.RESIDENT), speeds,
                                                       cpu)}
    from ._fit import device_totals_for

    for k in range(len(resident0), -1, -1):
        resident = order[:k]
        choice = ort_partition.choose_layers(works, resident, sorted(can), speeds, cpu, force=mode == "on")
        streamed = [lid for lid in order if choice[lid] == ort_partition.STREAMED]
        if not streamed:
            return placement
        plan = _plan(target, speeds, cpu, mode, choice, works, [_slot_layout(graph, lid, own[lid])
                                                                for lid in streamed], times)
        if mode == "auto" and plan.times["with streaming"] >= times["partial offload"]:
            return placement
        on_device = {n: target.name for lid in resident + streamed for n in by_layer[lid]}
        trial = ort_partition.place(graph, list(providers), budgets={e: b for e, b in budgets.items()
                                                                      if e != target.name} or None,
                                    estimator=estimator, stats=stats, allowed=on_device)
        trial.budgets = dict(budgets)
        totals = device_totals_for(model, trial, providers, options, streaming=plan)
        if totals.get(target.device, {}).get("total", 0) <= budgets[target.name]:
            ep_of = {node.index: trial.ep_of(node) for node in graph.nodes}
            summary = (f"{len(resident)}/{len(order)} decoder layers resident on {target.name}, {len(streamed)} "
                       f"streamed through {SLOTS} slots of {ort_partition.format_bytes(plan.slot_bytes)}, "
                       f"{len(order) - len(resident) - len(streamed)} on the CPU")
            return attrs.evolve(placement, result=trial, ep_of=ep_of, layers_on_device=len(resident),
                                summary=summary, streaming=plan)
    return placement


def _plan(target: Any, speeds: Any, cpu: Any, mode: str, choice: dict[int, str], works: Sequence[Any],
          layers: list[StreamedLayer], times: dict[str, float]) -> StreamingPlan:
    per_layer = {w.layer: {"resident": w.on(speeds.flops, speeds.memory_bandwidth),
                           "streamed": max(w.weight_bytes / speeds.h2d_bandwidth,
                                           w.on(speeds.flops, speeds.memory_bandwidth)),
                           "cpu": w.on(cpu.flops, cpu.memory_bandwidth)} for w in works}
    times = {**times, "with streaming": ort_partition.run_time(works, choice, speeds, cpu)}
    pinned = bool(getattr(getattr(target, "inner", target), "pinned_host_staging", False))
    return StreamingPlan(device=target.device, ep=target.name, mode=mode, choice=dict(choice), layers=tuple(layers),
                         slot_bytes=max(layer.weights[-1][1] + layer.weights[-1][2] for layer in layers),
                         times=times, per_layer=per_layer, speeds=speeds, cpu=cpu, pinned=pinned)
