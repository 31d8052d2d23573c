"""The validator: proves every request is placed, aligned, and never overlaps a block live beside it."""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from ._arrays import by_device
from ._errors import MisalignedError, OverlapError, PlanValidationError
from ._types import AllocationRequest, MemoryPlan, check_unique


def validate(plan: MemoryPlan, requests: Iterable[AllocationRequest]) -> None:
    """Raise a PlanValidationError subclass unless `plan` is a correct plan for `requests`.

    Checked: every id has an offset; offsets are non-negative multiples of the request's alignment;
    each block with its guards (`AllocationRequest.guards` of the plan's red zone) starts at or after 0 and
    ends at or below its device's peak; and no two blocks that are live at a common step share a byte. Runs a sweep over time in O(n log n + k)
    where k is the number of live neighbours visited.
    """
    reqs = check_unique(requests)
    rz = plan.red_zone
    for r in reqs:
        if r.id not in plan.offsets:
            raise PlanValidationError(f"request {r.id!r} has no offset in the plan ({plan.algorithm!r}); "
                                      "plan all requests together")
        off = plan.offsets[r.id]
        if off < 0 or off % r.alignment:
            raise MisalignedError(f"request {r.id!r}: offset {off!r} is not a non-negative multiple of its "
                                  f"alignment {r.alignment!r} (plan {plan.algorithm!r})")
        lead, tail = r.guards(rz) if rz else (0, 0)
        if off - lead < 0:
            raise PlanValidationError(f"request {r.id!r}: its {lead}-byte lead guard starts at byte {off - lead!r}, "
                                      f"before the buffer (plan {plan.algorithm!r}); place guarded blocks at "
                                      "offset >= their lead guard")
        end = off + r.nbytes + tail
        peak = plan.peak.get(r.device)
        if peak is None or end > peak:
            raise PlanValidationError(f"request {r.id!r} ends at byte {end!r}, past the peak {peak!r} "
                                      f"reported for device {r.device!r}; the peak must cover every block")
    for group in by_device(reqs).values():
        _sweep(plan, group)


def _sweep(plan: MemoryPlan, group: list[AllocationRequest]) -> None:
    import bisect

    rz = plan.red_zone
    # Live blocks as a list sorted by offset: (offset, end, id, first, last). Blocks live at the same step
    # must be pairwise disjoint, so checking each new block against its offset neighbours suffices.
    live: list[tuple[int, int, int, int, int]] = []
    expiry: list[tuple[int, int, int]] = []  # (last, offset, id)
    for r in sorted(group, key=lambda q: (q.first, q.id)):
        while expiry and expiry[0][0] < r.first:
            _, off, rid = heapq.heappop(expiry)
            i = bisect.bisect_left(live, (off, -1, rid))
            while live[i][2] != rid:
                i += 1
            del live[i]
        lead, tail = r.guards(rz) if rz else (0, 0)
        extent = lead + r.nbytes + tail
        if extent == 0:
            continue
        off = plan.offsets[r.id] - lead
        item = (off, off + extent, r.id, r.first, r.last)
        i = bisect.bisect_left(live, item)
        for j in (i - 1, i):
            if 0 <= j < len(live):
                o, e, oid, ofirst, olast = live[j]
                if o < off + extent and off < e:
                    a, b = sorted((oid, r.id))
                    raise OverlapError(
                        f"blocks {oid!r} (bytes [{o}, {e}), steps {ofirst}..{olast}) and {r.id!r} (bytes "
                        f"[{off}, {off + extent}), steps {r.first}..{r.last}) on device {r.device!r} are "
                        f"both live at step {r.first!r} and overlap (plan "
                        f"{plan.algorithm!r}); the planner must place them apart",
                        first_id=a, second_id=b, step=r.first)
        live.insert(i, item)
        heapq.heappush(expiry, (r.last, off, r.id))
