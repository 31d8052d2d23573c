"""The lower bound: the largest total of reserved bytes live at one step, per device."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ._arrays import by_device, columns, live_profile
from ._types import AllocationRequest, check_unique


def lower_bound(requests: Iterable[AllocationRequest], red_zone: int = 0) -> dict[str, int]:
    """Per device, max over steps of the bytes live at that step; no offset plan can peak lower."""
    reqs = check_unique(requests)
    out: dict[str, int] = {}
    for device, group in by_device(reqs).items():
        _, live = live_profile(columns(group, red_zone))
        out[device] = int(live.max()) if live.size else 0
    return out


def busiest_step(requests: Iterable[AllocationRequest], device: str, red_zone: int = 0) -> int | None:
    """The first step at which `device` has the most bytes live (None when it has no requests)."""
    group = [r for r in requests if r.device == device]
    if not group:
        return None
    steps, live = live_profile(columns(group, red_zone))
    return int(steps[int(np.argmax(live))])
