"""The graph-free data model: allocation requests in, a memory plan out."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from ._errors import InvalidRequestError, LookupMissError, SizeOverflowError

DEFAULT_ALIGNMENT = 256
MAX_BYTES = (1 << 63) - 1  # the largest byte count / offset a plan holds (numpy int64 columns, C int64_t)


def align_up(value: int, alignment: int) -> int:
    """The smallest multiple of `alignment` (a power of two) that is >= value."""
    return (value + alignment - 1) & ~(alignment - 1)


BUFFER_MARGIN = 64 * 1024  # red zones: guard bytes at each end of a device's planned buffer (at least)


def lead_guard(red_zone: int, alignment: int) -> int:
    """Guard bytes a block owns before its data: `red_zone` rounded up to the alignment (0 when off), so the
    data stays aligned."""
    return align_up(red_zone, alignment) if red_zone > 0 else 0


def buffer_margin(red_zone: int) -> int:
    """Guard bytes at each end of a planned buffer that belong to no block: max(red_zone, 64 KiB) rounded up to
    4 KiB when red zones are on, else 0; a write that runs off the first or last block lands there."""
    return align_up(max(red_zone, BUFFER_MARGIN), 4096) if red_zone > 0 else 0


def _check_request(inst: AllocationRequest, _attr: attrs.Attribute, _value: object) -> None:
    if inst.nbytes < 0:
        raise InvalidRequestError(f"request {inst.id!r}: nbytes={inst.nbytes!r} is negative; pass a size >= 0")
    if inst.nbytes > MAX_BYTES:
        raise SizeOverflowError(
            f"request {inst.id!r}: nbytes={inst.nbytes!r} exceeds the largest plannable size {MAX_BYTES!r} "
            "(int64); such a block cannot exist: fix the shape that produced it")
    if inst.first < 0 or inst.last < inst.first:
        raise InvalidRequestError(
            f"request {inst.id!r}: lifetime first={inst.first!r}, last={inst.last!r} is not a step range; "
            "steps are >= 0 and last >= first (both inclusive)")
    if inst.alignment <= 0 or inst.alignment & (inst.alignment - 1):
        raise InvalidRequestError(
            f"request {inst.id!r}: alignment={inst.alignment!r} is not a positive power of two (e.g. 256)")


@attrs.define(frozen=True)
class AllocationRequest:
    """A block of `nbytes` live from step `first` to step `last` (both inclusive) on `device`.

    The planner reserves `align_up(nbytes, alignment)` bytes at an offset that is a multiple of
    `alignment`, like ONNX Runtime's aligned allocation size.
    """

    id: int
    nbytes: int
    first: int
    last: int
    device: str = "cpu"
    alignment: int = attrs.field(default=DEFAULT_ALIGNMENT, validator=_check_request)

    def reserved(self, red_zone: int = 0) -> int:
        """Bytes this block occupies in the plan: the aligned size, plus guard bytes if any (`lead_guard`
        before its data, at least `red_zone` after it)."""
        return align_up(lead_guard(red_zone, self.alignment) + self.nbytes + red_zone, self.alignment)

    def guards(self, red_zone: int) -> tuple[int, int]:
        """(bytes before, bytes after) the data that this block owns as guards in a plan with `red_zone`."""
        lead = lead_guard(red_zone, self.alignment)
        return lead, self.reserved(red_zone) - lead - self.nbytes


def check_unique(requests: Iterable[AllocationRequest]) -> list[AllocationRequest]:
    """The requests as a list; raises InvalidRequestError on a duplicate id."""
    out = list(requests)
    seen: set[int] = set()
    for r in out:
        if not isinstance(r, AllocationRequest):
            raise InvalidRequestError(f"expected AllocationRequest, got {r!r}; build one per block")
        if r.id in seen:
            raise InvalidRequestError(f"request id {r.id!r} appears twice; every block needs its own id")
        seen.add(r.id)
    return out


@attrs.define(frozen=True)
class MemoryPlan:
    """Offsets per request id, the peak and the lower bound per device, and how it was made.

    `red_zone` is the count of guard bytes reserved before and after every block (0 unless debugging;
    `AllocationRequest.guards`), and each device's buffer then starts and ends with `buffer_margin` bytes;
    `candidates` maps each algorithm tried to its summed peak over devices.
    """

    offsets: Mapping[int, int]
    peak: Mapping[str, int]
    lower_bound: Mapping[str, int]
    algorithm: str
    red_zone: int = 0
    candidates: Mapping[str, int] = attrs.field(factory=dict)

    def offset(self, request_id: int) -> int:
        try:
            return self.offsets[request_id]
        except KeyError:
            raise LookupMissError(
                f"request id {request_id!r} is not in this plan ({len(self.offsets)} ids); "
                "plan the request before asking for its offset") from None

    @property
    def total_peak(self) -> int:
        return sum(self.peak.values())

    def ratio(self, device: str | None = None) -> float:
        """peak / lower bound for one device (or all summed); 1.0 when the bound is 0."""
        if device is None:
            peak, bound = self.total_peak, sum(self.lower_bound.values())
        else:
            peak, bound = self.peak.get(device, 0), self.lower_bound.get(device, 0)
        return peak / bound if bound else 1.0
