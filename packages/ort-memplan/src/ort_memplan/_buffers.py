"""Pre-allocated execution buffers: one buffer per device, allocated once, reused by every run.

`ExecutionBuffers` checks the plan against each device's budget before allocating anything (the
error names the bytes needed and available and the largest blocks live at the busiest step),
then allocates one buffer per device through an `Allocator`. `run()` hands the buffers to one run
at a time; a second, concurrent run is refused at once with `ConcurrentRunError`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ._arrays import by_device
from ._bound import busiest_step
from ._errors import (
    BudgetExceededError,
    ConcurrentRunError,
    HostMemoryError,
    InvalidRequestError,
    LookupMissError,
)
from ._types import AllocationRequest, MemoryPlan


@runtime_checkable
class Allocator(Protocol):
    """Allocates one device buffer of `nbytes` bytes (pre-allocated mode calls it once per device)."""

    def allocate(self, nbytes: int) -> Any: ...


@runtime_checkable
class HostAccess(Protocol):
    """Byte access to a buffer from the host; red zones need it to write and check guard bytes."""

    def read(self, buffer: Any, offset: int, nbytes: int) -> bytes: ...

    def write(self, buffer: Any, offset: int, data: bytes) -> None: ...


class HostAllocator:
    """Host memory as numpy uint8 arrays; counts its allocations. The bytes are not initialized (every
    planned block is written by its producer before it is read, and red zones write their own pattern):
    zeroing a fresh buffer costs a page fault per page on every run of the memory-pattern mode, whose
    buffers live for one run, where an uninitialized one reuses the pages the last run freed."""

    def __init__(self) -> None:
        self.allocations = 0
        self.allocated_bytes = 0

    def allocate(self, nbytes: int) -> np.ndarray:
        try:
            buf = np.empty(nbytes, np.uint8)
        except MemoryError as e:
            raise HostMemoryError(
                f"the host could not allocate a planned buffer of {nbytes} bytes ({nbytes / 2**30:.1f} GiB); the plan "
                "needs more memory than this machine gives: lower the planned shapes (free_dimension_overrides / "
                "max_shapes), give a cpu budget so the plan is checked at initialization, or use a model whose "
                "shape constants are sane") from e
        self.allocations += 1
        self.allocated_bytes += nbytes
        return buf

    def read(self, buffer: np.ndarray, offset: int, nbytes: int) -> bytes:
        return buffer[offset:offset + nbytes].tobytes()

    def write(self, buffer: np.ndarray, offset: int, data: bytes) -> None:
        buffer[offset:offset + len(data)] = np.frombuffer(data, np.uint8)


class RetainingHostAllocator(HostAllocator):
    """Host memory that keeps the largest buffer given back (`free`) for the next allocation it can hold, as
    onnxruntime's CPU arena keeps its memory between runs: a run's buffer then costs no allocation and no page
    faults. It holds at most that one idle buffer; `release()` drops it. `allocations` counts fresh ones."""

    def __init__(self) -> None:
        super().__init__()
        self._kept: np.ndarray | None = None
        self._lock = threading.Lock()

    def allocate(self, nbytes: int) -> np.ndarray:
        with self._lock:
            kept = self._kept
            if kept is not None and nbytes <= kept.nbytes:
                self._kept = None
                return kept[:nbytes]
        return super().allocate(nbytes)

    def free(self, buffer: np.ndarray) -> None:
        root = buffer if buffer.base is None else buffer.base
        if not isinstance(root, np.ndarray) or root.dtype != np.uint8 or root.ndim != 1:
            return  # not one of ours: nothing to keep
        with self._lock:
            if self._kept is None or root.nbytes > self._kept.nbytes:
                self._kept = root

    @property
    def kept_bytes(self) -> int:
        """Bytes of the idle buffer held for the next allocation (0: none)."""
        kept = self._kept
        return 0 if kept is None else int(kept.nbytes)

    def release(self) -> None:
        with self._lock:
            self._kept = None



def _human(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"


class ExecutionBuffers:
    """One buffer per device for `plan`, allocated at creation and reused by every run.

    `requests` and `names` (id -> readable name) are used for lookups and to name the largest
    contributors when a device's `budgets` entry is smaller than the plan's peak there.
    """

    def __init__(self, plan: MemoryPlan, allocators: Mapping[str, Allocator], *,
                 requests: Sequence[AllocationRequest] | Mapping[int, AllocationRequest] = (), budgets: Mapping[str, int] | None = None,
                 names: Mapping[int, str] | None = None) -> None:
        self.plan = plan
        # a mapping (id -> request) is used as it is, not copied: a plan's buffers made per run cost no pass over
        # its requests (GraphPlan.buffers gives its own `by_id`); names are read, never changed
        self.requests = requests if isinstance(requests, dict | Mapping) else {r.id: r for r in requests}
        self.names = names if names is not None else {}
        budgets = dict(budgets or {})
        for device in plan.peak:
            if device not in allocators:
                raise InvalidRequestError(
                    f"the plan uses device {device!r} but no allocator was given for it "
                    f"(allocators for {sorted(allocators)!r}); pass one per device")
        for device, needed in sorted(plan.peak.items()):
            available = budgets.get(device)
            if available is not None and needed > available:
                raise self._budget_error(device, needed, available)
        self.allocators = dict(allocators)
        self.buffers: dict[str, Any] = {}
        try:
            for d, n in sorted(plan.peak.items()):
                self.buffers[d] = allocators[d].allocate(n)
        except BaseException:
            self._free_all()  # one device could not allocate: the others give theirs back, nothing leaks
            raise
        self._lock = threading.Lock()
        self.runs = 0
        self.closed = False

    def _budget_error(self, device: str, needed: int, available: int) -> BudgetExceededError:
        group = by_device(list(self.requests.values())).get(device, [])
        step = busiest_step(group, device, self.plan.red_zone) if group else None
        live = [r for r in group if step is not None and r.first <= step <= r.last]
        live.sort(key=lambda r: (-r.nbytes, r.id))
        top = [(self.names.get(r.id, f"id {r.id}"), r.nbytes) for r in live[:5]]
        listed = ", ".join(f"{name!r} {_human(nb)}" for name, nb in top) or "(no requests given)"
        return BudgetExceededError(
            f"device {device!r}: the memory plan needs {needed} bytes ({_human(needed)}) but the budget "
            f"allows {available} bytes ({_human(available)}); largest blocks live at the busiest step "
            f"{step!r}: {listed}. Raise the budget, lower batch/sequence, or place nodes on another device",
            device=device, needed=needed, available=available, contributors=top)

    @contextmanager
    def run(self) -> Iterator[ExecutionBuffers]:
        """Hold the buffers for one run; a concurrent second run raises ConcurrentRunError."""
        if not self._lock.acquire(blocking=False):
            raise ConcurrentRunError(
                "a run is already using the pre-allocated execution buffers; pre-allocated mode allows "
                "one run at a time: wait for it to finish, or disable pre-allocation for concurrent runs")
        try:
            if self.closed:
                raise InvalidRequestError("these execution buffers were closed (freed); create new ones for more runs")
            self.runs += 1
            yield self
        finally:
            self._lock.release()

    def close(self) -> None:
        """Free every buffer through the allocator that made it (allocators with a `free(buffer)`;
        host arrays are simply dropped). Refused during a run; later runs are refused."""
        if not self._lock.acquire(blocking=False):
            raise ConcurrentRunError("cannot close execution buffers while a run is using them; wait for it to finish")
        try:
            self._free_all()
            self.closed = True
        finally:
            self._lock.release()

    def _free_all(self) -> None:
        buffers, self.buffers = self.buffers, {}
        for device, buf in buffers.items():
            free = getattr(self.allocators[device], "free", None)
            if free is not None:
                free(buf)

    @property
    def busy(self) -> bool:
        return self._lock.locked()

    def block(self, request_id: int) -> tuple[Any, int, int]:
        """(device buffer, offset, nbytes) of a planned request."""
        req = self.requests.get(request_id)
        if req is None:
            raise LookupMissError(f"request id {request_id!r} is unknown to these buffers; "
                                  "pass the plan's requests when creating ExecutionBuffers")
        return self.buffers[req.device], self.plan.offset(request_id), req.nbytes

    def view(self, request_id: int) -> Any:
        """A slice of the device buffer for `request_id` (host buffers: a numpy uint8 view)."""
        buf, off, nb = self.block(request_id)
        return buf[off:off + nb]
