"""Debug red zones: guard bytes after every block, checked after each kernel.

Plan with `plan(..., red_zone=N)` so that N guard bytes follow every block and belong to it for
its whole life. Around each step call `before_step(step)` (fills the guards of blocks that start
there) and `after_step(step)` (checks the guards of every block live at that step). A changed
guard byte can only have been written by the kernel of that step, so the error names that node.
"""

from __future__ import annotations

from collections.abc import Sequence

from ._buffers import ExecutionBuffers, HostAccess
from ._errors import InvalidRequestError, RedZoneViolation
from ._types import AllocationRequest


class RedZoneGuard:
    """Writes and checks the guard bytes of an `ExecutionBuffers`' plan, step by step, in order."""

    def __init__(self, buffers: ExecutionBuffers, *, node_names: Sequence[str] | None = None,
                 pattern: int = 0xA5) -> None:
        rz = buffers.plan.red_zone
        if rz <= 0:
            raise InvalidRequestError(f"the plan has red_zone={rz!r}; plan with red_zone=N (e.g. 64) to "
                                      "reserve guard bytes after every block")
        if not buffers.requests:
            raise InvalidRequestError("the buffers know no requests; pass the plan's requests to "
                                      "ExecutionBuffers so that guards can be placed")
        for device, alloc in buffers.allocators.items():
            if not isinstance(alloc, HostAccess):
                raise InvalidRequestError(
                    f"allocator {alloc!r} for device {device!r} has no read/write host access; red zones "
                    "need an allocator implementing HostAccess (read(buffer, offset, n), write(...))")
        if not 0 <= pattern <= 255:
            raise InvalidRequestError(f"pattern={pattern!r} is not a byte value 0..255")
        self.buffers = buffers
        self.red_zone = rz
        self.node_names = list(node_names or [])
        self.guard = bytes([pattern]) * rz
        self._starts: dict[int, list[AllocationRequest]] = {}
        for r in buffers.requests.values():
            self._starts.setdefault(r.first, []).append(r)
        self._live: dict[int, AllocationRequest] = {}
        self.checks = 0

    def _where(self, r: AllocationRequest) -> tuple[HostAccess, object, int]:
        alloc = self.buffers.allocators[r.device]
        return alloc, self.buffers.buffers[r.device], self.buffers.plan.offset(r.id) + r.nbytes  # type: ignore[return-value]

    def before_step(self, step: int) -> None:
        """Fill the guards of the blocks whose life starts at `step` (call before its kernel)."""
        for r in self._starts.get(step, ()):
            alloc, buf, at = self._where(r)
            alloc.write(buf, at, self.guard)
            self._live[r.id] = r

    def after_step(self, step: int, node: str | None = None) -> None:
        """Check the guards of every block live at `step`; raise RedZoneViolation naming the node."""
        bad: list[tuple[int, AllocationRequest, int]] = []
        for r in self._live.values():
            alloc, buf, at = self._where(r)
            got = alloc.read(buf, at, self.red_zone)
            self.checks += 1
            if got != self.guard:
                k = next(i for i in range(self.red_zone) if got[i] != self.guard[i])
                bad.append((at, r, k))
        if bad:
            at, r, k = min(bad, key=lambda x: x[0])
            who = node or (self.node_names[step] if step < len(self.node_names) else f"step {step}")
            block = self.buffers.names.get(r.id, f"id {r.id}")
            raise RedZoneViolation(
                f"node {who!r} (step {step}) wrote past the end of {block!r} (id {r.id}, {r.nbytes} bytes at "
                f"offset {at - r.nbytes} on {r.device!r}): guard byte {k} of {self.red_zone} was changed; "
                "the kernel writes more than the declared output/workspace size: fix its bounds or "
                "declare a larger block", node=who, block=block, step=step, first_bad_byte=k)
        for rid in [rid for rid, r in self._live.items() if r.last <= step]:
            del self._live[rid]
