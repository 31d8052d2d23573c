"""The ort-memplan exception hierarchy. Every error quotes the offending value and says how to fix it."""

from __future__ import annotations


class MemPlanError(Exception):
    """Base class of every error raised by ort-memplan."""


class InvalidRequestError(MemPlanError, ValueError):
    """An allocation request is malformed (negative size, last < first, bad alignment, duplicate id)."""


class SizeOverflowError(InvalidRequestError):
    """A block, or all of one device's blocks together, needs more bytes than a signed 64-bit byte
    offset can address (2**63 - 1): no plan can place it, so the request itself is invalid."""


class PlanValidationError(MemPlanError):
    """A memory plan is wrong: it misses a request, misaligns one, or overlaps two live blocks."""


class OverlapError(PlanValidationError):
    """Two blocks live at the same step share bytes. Carries both ids and the shared step."""

    def __init__(self, message: str, *, first_id: int, second_id: int, step: int) -> None:
        super().__init__(message)
        self.first_id = first_id
        self.second_id = second_id
        self.step = step


class MisalignedError(PlanValidationError):
    """A block's offset is not a multiple of its request's alignment."""


class TraceError(MemPlanError):
    """An allocate/free trace is inconsistent (double free, unknown id, reused id)."""


class LookupMissError(MemPlanError, KeyError):
    """A value, id or workspace slot was asked for that the plan does not contain."""

    def __str__(self) -> str:  # KeyError would quote the whole message again
        return str(self.args[0]) if self.args else ""


class BudgetExceededError(MemPlanError):
    """A plan needs more bytes on a device than its budget allows (raised at buffer creation)."""

    def __init__(self, message: str, *, device: str, needed: int, available: int,
                 contributors: list[tuple[str, int]]) -> None:
        super().__init__(message)
        self.device = device
        self.needed = needed
        self.available = available
        self.contributors = contributors


class HostMemoryError(MemPlanError, MemoryError):
    """The host could not allocate a planned buffer (the plan needs more memory than the machine gives)."""


class ConcurrentRunError(MemPlanError, RuntimeError):
    """A second run tried to use pre-allocated execution buffers while another run holds them."""


class RedZoneViolation(MemPlanError):
    """A kernel wrote outside its block, into the guard bytes before or after it (`side`), or into a margin at
    an end of the planned buffer (`block` is then "<planned buffer>"). `distance`: (nearest, farthest) changed
    byte counted from the block's edge (1 = the byte right next to it); `first_bad_byte` is nearest - 1."""

    def __init__(self, message: str, *, node: str, block: str, step: int, first_bad_byte: int,
                 side: str = "after", distance: tuple[int, int] | None = None) -> None:
        super().__init__(message)
        self.node = node
        self.block = block
        self.step = step
        self.first_bad_byte = first_bad_byte
        self.side = side
        self.distance = distance if distance is not None else (first_bad_byte + 1, first_bad_byte + 1)


class ConstInputWritten(MemPlanError):
    """Under red zones, a kernel changed the bytes of an input it reads (a feed, a weight, an earlier value)."""

    def __init__(self, message: str, *, node: str, input_name: str, step: int) -> None:
        super().__init__(message)
        self.node = node
        self.input_name = input_name
        self.step = step
