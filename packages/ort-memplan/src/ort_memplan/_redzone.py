"""Debug red zones: guard bytes before and after every block and at both ends of each buffer, checked
after each kernel; checksums of what a kernel reads, checked after it.

Plan with `plan(..., red_zone=N)`: every block then owns `AllocationRequest.guards(N)` bytes before and after
its data (at least N each) for its whole life, and each device's buffer starts and ends with
`buffer_margin(N)` bytes (at least 64 KiB) that belong to no block. Around each step call
`before_step(step, reads)` (fills the guards of blocks that start there, checksums the inputs in `reads`)
and `after_step(step)` (checks the margins, the guards of every block live at that step, and the
checksums). A changed guard or input byte can only have been written by the kernel of that step, so the
error names that node.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ._buffers import ExecutionBuffers, HostAccess
from ._errors import ConstInputWritten, InvalidRequestError, RedZoneViolation
from ._types import AllocationRequest, buffer_margin

BUFFER = "<planned buffer>"  # the block name of a buffer's end margins in a RedZoneViolation


def checksum(arr: Any) -> int | None:
    """CRC-32 of a host array's bytes (None for what has no host bytes: device tensors, sequences)."""
    if not isinstance(arr, np.ndarray | np.generic) or arr.dtype.kind == "O":
        return None
    a = np.asarray(arr)
    a = a if a.flags.c_contiguous else np.ascontiguousarray(a)
    return zlib.crc32(a.reshape(-1).view(np.uint8))  # bytes, whatever the dtype (bfloat16, float8, int4...)


class RedZoneGuard:
    """Writes and checks the guard bytes of an `ExecutionBuffers`' plan, step by step, in order."""

    def __init__(self, buffers: ExecutionBuffers, *, node_names: Sequence[str] | None = None,
                 pattern: int = 0xA5) -> None:
        rz = buffers.plan.red_zone
        if rz <= 0:
            raise InvalidRequestError(f"the plan has red_zone={rz!r}; plan with red_zone=N (e.g. 64) to "
                                      "reserve guard bytes around every block")
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
        self.pattern = pattern
        self.margin = buffer_margin(rz)
        self._starts: dict[int, list[AllocationRequest]] = {}
        for r in buffers.requests.values():
            self._starts.setdefault(r.first, []).append(r)
        self._live: dict[int, AllocationRequest] = {}
        self._reads: dict[str, tuple[Any, int]] = {}
        self._filled: dict[int, bytes] = {}  # n -> n pattern bytes (a few sizes: margins, guards)
        self.checks = 0
        for device in buffers.plan.peak:  # the margins at both ends of every buffer, for the buffers' life
            for at in self._margins(device):
                self._fill(device, at, self.margin)

    def _margins(self, device: str) -> tuple[int, int]:
        return 0, self.buffers.plan.peak[device] - self.margin

    def _bytes(self, n: int) -> bytes:
        found = self._filled.get(n)
        if found is None:
            found = self._filled[n] = bytes([self.pattern]) * n
        return found

    def _fill(self, device: str, at: int, n: int) -> None:
        if n:
            self.buffers.allocators[device].write(self.buffers.buffers[device], at, self._bytes(n))  # type: ignore[union-attr]

    def _changed(self, device: str, at: int, n: int) -> list[int]:
        """Offsets in [at, at + n) of the device's buffer whose byte is not the pattern."""
        if not n:
            return []
        got = self.buffers.allocators[device].read(self.buffers.buffers[device], at, n)  # type: ignore[union-attr]
        self.checks += 1
        if got == self._bytes(n):
            return []
        return (np.flatnonzero(np.frombuffer(got, np.uint8) != self.pattern) + at).tolist()

    def before_step(self, step: int, reads: Mapping[str, Any] | None = None) -> None:
        """Fill the guards of the blocks whose life starts at `step`, and checksum the host arrays the step's
        kernel reads (`reads`: input name -> array; call before its kernel)."""
        for r in self._starts.get(step, ()):
            lead, tail = r.guards(self.red_zone)
            off = self.buffers.plan.offset(r.id)
            self._fill(r.device, off - lead, lead)
            self._fill(r.device, off + r.nbytes, tail)
            self._live[r.id] = r
        self._reads = {}
        for name, arr in (reads or {}).items():
            crc = checksum(arr)
            if crc is not None and name not in self._reads:
                self._reads[name] = (arr, crc)

    def after_step(self, step: int, node: str | None = None) -> None:
        """Check the margins, the guards of every block live at `step` and the checksums of its inputs; raise
        RedZoneViolation (ConstInputWritten for an input) naming the node."""
        who = node or (self.node_names[step] if step < len(self.node_names) else f"step {step}")
        bad: list[tuple[int, str, str, AllocationRequest | None, list[int]]] = []
        for device in self.buffers.plan.peak:
            start, end = self._margins(device)
            if changed := self._changed(device, start, self.margin):
                bad.append((changed[0], device, "before", None, [self.margin - p for p in changed]))
            if changed := self._changed(device, end, self.margin):
                bad.append((changed[0], device, "after", None, [p - end + 1 for p in changed]))
        for r in self._live.values():
            lead, tail = r.guards(self.red_zone)
            off = self.buffers.plan.offset(r.id)
            if changed := self._changed(r.device, off - lead, lead):
                bad.append((changed[0], r.device, "before", r, [off - p for p in changed]))
            if changed := self._changed(r.device, off + r.nbytes, tail):
                bad.append((changed[0], r.device, "after", r, [p - off - r.nbytes + 1 for p in changed]))
        if bad:
            self._raise(step, who, *min(bad, key=lambda x: (x[3] is None, x[0])))
        reads, self._reads = self._reads, {}
        for name, (arr, crc) in reads.items():
            if checksum(arr) != crc:
                raise ConstInputWritten(
                    f"node {who!r} (step {step}) wrote through its const input {name!r} ({arr.dtype}"
                    f"{list(arr.shape)}): its bytes changed during the kernel; kernels must not write their inputs "
                    "(Value_GetTensorData is const): compute into the output, or declare workspace "
                    "(DeclareWorkspaceRequirements) for scratch", node=who, input_name=name, step=step)
        for rid in [rid for rid, r in self._live.items() if r.last <= step]:
            del self._live[rid]

    def _raise(self, step: int, who: str, _first: int, device: str, side: str, r: AllocationRequest | None,
               distances: list[int]) -> None:
        near, far = min(distances), max(distances)
        span = f"{near} byte{'s' if near != 1 else ''}" if near == far else f"{near} to {far} bytes"
        if r is None:
            raise RedZoneViolation(
                f"node {who!r} (step {step}) wrote {span} {'before the first' if side == 'before' else 'past the last'} "
                f"block of the planned buffer on {device!r} ({self.buffers.plan.peak[device]} bytes), into its "
                f"{self.margin}-byte {'start' if side == 'before' else 'end'} margin: a write far outside its output; "
                "the kernel's indexing is wrong: fix its bounds",
                node=who, block=BUFFER, step=step, first_bad_byte=near - 1, side=side, distance=(near, far))
        block = self.buffers.names.get(r.id, f"id {r.id}")
        edge = "before the start" if side == "before" else "past the end"
        raise RedZoneViolation(
            f"node {who!r} (step {step}) wrote {span} {edge} of {block!r} (id {r.id}, {r.nbytes} bytes at "
            f"offset {self.buffers.plan.offset(r.id)} on {r.device!r}); the kernel writes outside the declared "
            "output/workspace size: fix its bounds or declare a larger block",
            node=who, block=block, step=step, first_bad_byte=near - 1, side=side, distance=(near, far))
