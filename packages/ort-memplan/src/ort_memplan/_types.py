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
        """Bytes this block occupies in the plan: the aligned size, plus guard bytes if any."""
        return align_up(self.nbytes + red_zone, self.alignment)


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

    `red_zone` is the count of guard bytes reserved after every block (0 unless debugging);
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
