"""The cost model that chooses, per decoder layer, where its weights live and where it computes:
resident on the device, streamed to the device before it runs (double-buffered slots, the next copy in
flight while the current layer computes), or computed on the CPU.

Inputs: the device's speeds (`DeviceSpeeds`: memory, host-to-device bandwidth, compute, memory
bandwidth; built from a device profile by `device_speeds`) and the CPU's (`CpuProfile`, measured once by
`measure_cpu_profile` or given), and per layer its weight bytes and FLOPs for the planned shapes
(`LayerWork`: prefill with a long sequence is compute-bound, single-token decode is bandwidth-bound).

A layer's time is the roofline max(FLOPs / compute, weight bytes / memory bandwidth). A run's time is
`run_time`: layers in order on one compute queue; streamed layers' copies on one copy engine, each
issued when the previous streamed layer starts and into a slot only once the layer that used it ended.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np

__all__ = ["CpuProfile", "DeviceSpeeds", "LayerWork", "RESIDENT", "STREAMED", "CPU", "SIMULATED_DEVICE",
           "choose_layers", "device_speeds", "layer_work", "measure_cpu_profile", "run_time"]

RESIDENT, STREAMED, CPU = "resident", "streamed", "cpu"
_MATMULS = ("MatMul", "Gemm", "MatMulNBits", "FusedMatMul")


@attrs.frozen
class DeviceSpeeds:
    """What the cost model needs from a device: bytes per second host->device and to its memory, FLOP/s."""

    name: str
    memory_bytes: int
    h2d_bandwidth: float
    flops: float
    memory_bandwidth: float


@attrs.frozen
class CpuProfile:
    """The host's FLOP/s and memory bandwidth (bytes per second)."""

    flops: float
    memory_bandwidth: float


# host-to-device (effective PCIe / link) bandwidth and dense fp16 tensor FLOP/s, vendors' published figures
_LINKS: dict[str, tuple[float, float]] = {
    "h200": (55e9, 989e12), "h100": (55e9, 989e12), "a100": (25e9, 312e12), "a100-40gb": (25e9, 312e12),
    "l4": (25e9, 121e12), "rtx4090": (25e9, 165e12)}
# a device without a profile (the simulated GPU): a PCIe 4 x16 card of modest compute
SIMULATED_DEVICE = DeviceSpeeds("simulated", 1 << 34, 25e9, 50e12, 1e12)


def device_speeds(profile: Any) -> DeviceSpeeds:
    """Speeds from a device profile (anything with `name`, `memory_bytes`, `memory_bandwidth`, `sm_count`)."""
    link, flops = _LINKS.get(str(profile.name).lower(), (25e9, float(getattr(profile, "sm_count", 64)) * 2e12))
    return DeviceSpeeds(str(profile.name), int(profile.memory_bytes), link, flops, float(profile.memory_bandwidth))


@functools.lru_cache(maxsize=1)
def measure_cpu_profile() -> CpuProfile:
    """A tiny probe, once per process: a 256x256 float32 matmul and a 16 MiB copy, best of three."""
    a = np.ones((256, 256), np.float32)
    src = np.ones(1 << 22, np.float32)
    dst = np.empty_like(src)
    best_mm = best_copy = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        a @ a
        best_mm = min(best_mm, time.perf_counter() - t)
        t = time.perf_counter()
        np.copyto(dst, src)
        best_copy = min(best_copy, time.perf_counter() - t)
    return CpuProfile(flops=2 * 256**3 / max(best_mm, 1e-9), memory_bandwidth=2 * src.nbytes / max(best_copy, 1e-9))


@attrs.frozen
class LayerWork:
    """One layer for the planned shapes: its weight bytes and its FLOPs per run."""

    layer: Any
    weight_bytes: int
    flops: float

    def on(self, flops: float, bandwidth: float) -> float:
        return max(self.flops / flops, self.weight_bytes / bandwidth)


def _rows(graph: Any, name: str) -> int:
    value = graph.values.get(name)
    shape = getattr(value, "shape", None)
    if not shape:
        return 1
    return int(np.prod([d if isinstance(d, int) else 1 for d in shape[:-1]])) or 1


def layer_work(graph: Any, layer: Any, nodes: Sequence[Any]) -> LayerWork:
    """Weight bytes (initializers its nodes read, each once) and FLOPs: 2 x rows x weight elements for
    each matrix product with a weight, plus one FLOP per weight element for the rest."""
    inits = graph.initializers
    seen: set[str] = set()
    weight_bytes, flops = 0, 0.0
    for node in nodes:
        for name in node.inputs:
            if name in inits and name not in seen:
                seen.add(name)
                weight_bytes += inits[name].nbytes
                elements = int(np.prod(inits[name].dims or (1,)))
                act = next((i for i in node.inputs if i and i not in inits), None)
                rows = _rows(graph, act) if act is not None else 1
                flops += 2.0 * rows * elements if node.op_type in _MATMULS else float(rows * elements)
    return LayerWork(layer, weight_bytes, flops)


def run_time(works: Sequence[LayerWork], choice: Mapping[Any, str], device: DeviceSpeeds, cpu: CpuProfile) -> float:
    """Predicted seconds per run for the layers in order under `choice` (layer -> resident/streamed/cpu)."""
    compute_end = copy_end = 0.0
    slot_free = [0.0, 0.0]
    issue = 0.0  # a streamed layer's copy is issued when the previous streamed layer starts (run start for the first)
    k = 0
    for w in works:
        where = choice.get(w.layer, CPU)
        if where == CPU:
            compute_end += w.on(cpu.flops, cpu.memory_bandwidth)
            continue
        start = compute_end
        if where == STREAMED:
            copy_start = max(issue, copy_end, slot_free[k % 2])
            copy_end = copy_start + w.weight_bytes / device.h2d_bandwidth
            start = max(compute_end, copy_end)
            issue = start
        compute_end = start + w.on(device.flops, device.memory_bandwidth)
        if where == STREAMED:
            slot_free[k % 2] = compute_end
            k += 1
    return compute_end


def choose_layers(works: Sequence[LayerWork], resident: Sequence[Any], candidates: Sequence[Any],
                  device: DeviceSpeeds, cpu: CpuProfile, force: bool = False) -> dict[Any, str]:
    """Per layer: resident (given), streamed or CPU. A candidate streams when its streamed time (the copy
    overlapped with the compute before it) beats the CPU's, or always with `force`."""
    choice = {w.layer: CPU for w in works}
    choice.update({layer: RESIDENT for layer in resident})
    for w in works:
        if w.layer not in candidates or w.layer in resident:
            continue
        streamed = max(w.weight_bytes / device.h2d_bandwidth, w.on(device.flops, device.memory_bandwidth))
        if force or streamed < w.on(cpu.flops, cpu.memory_bandwidth):
            choice[w.layer] = STREAMED
    return choice
