"""Where kernel workspace lives on each device: packed with the activations in one arena (a slot may reuse
activation memory dead at its step), or in a separate workspace arena after the activations' (the slots
planned among themselves). Packing can never need more memory than the best plan, but the planners are
heuristics: on some graphs the packed plan they find is larger than the two arenas side by side. Both are
planned and the smaller total is kept, per device.

The separate layout is one buffer per device as well: the workspace arena starts where the activations'
peak ends (aligned), so every offset, lookup and buffer works unchanged."""

from __future__ import annotations

from collections.abc import Sequence

from ._planners import plan
from ._types import AllocationRequest, MemoryPlan, align_up

PACKED, SEPARATE = "packed", "separate"


def plan_with_workspace(others: Sequence[AllocationRequest], slots: Sequence[AllocationRequest],
                        algorithm: str, red_zone: int = 0) -> tuple[MemoryPlan, dict[str, str]]:
    """The plan of `others` (activations, run-long blocks) and workspace `slots`, and per device with
    requests the layout it uses ("packed" or "separate"), the one with the smaller peak (packed on a tie)."""
    packed = plan([*others, *slots], algorithm, red_zone=red_zone)
    devices = sorted(packed.peak)
    layouts = dict.fromkeys(devices, PACKED)
    slot_devices = {r.device for r in slots}
    # a packed peak at the lower bound of all requests is optimal: no separate layout can beat it
    open_devices = [d for d in devices if d in slot_devices and packed.peak[d] > packed.lower_bound.get(d, 0)]
    if not open_devices:
        return packed, layouts
    chosen = set(open_devices)
    acts = plan([r for r in others if r.device in chosen], algorithm, red_zone=red_zone)
    work = plan([r for r in slots if r.device in chosen], algorithm, red_zone=red_zone)
    offsets, peak = dict(packed.offsets), dict(packed.peak)
    for device in open_devices:
        alignment = max((r.alignment for r in slots if r.device == device), default=1)
        base = align_up(acts.peak.get(device, 0), alignment)
        total = base + work.peak.get(device, 0)
        if total >= packed.peak[device]:
            continue
        layouts[device], peak[device] = SEPARATE, total
        offsets.update({r.id: acts.offsets[r.id] for r in others if r.device == device})
        offsets.update({r.id: base + work.offsets[r.id] for r in slots if r.device == device})
    if SEPARATE not in layouts.values():
        return packed, layouts
    return (MemoryPlan(offsets=offsets, peak=peak, lower_bound=packed.lower_bound, algorithm=packed.algorithm,
                       red_zone=red_zone, candidates=packed.candidates), layouts)
