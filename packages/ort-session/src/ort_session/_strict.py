"""Pre-allocated means zero: every allocation a run could make outside the plan, refused at its node.

With `session.pre_allocate_execution_buffers` a run may allocate nothing. The places a run could
allocate, and what happens to each in that mode:
- an output the plan has no block for, or one larger than its block: refused (`output`);
- a scratch buffer, host or device (`KernelContext.scratch`: a kernel without a workspace declaration,
  an older ABI path, or one asking for more workspace than it declared): refused (`alloc`);
- the per-run buffers of the memory-pattern mode and of traced patterns: not used (the pre-allocated
  buffers serve every run; larger feeds are refused before the run starts).
The refusal is raised inside the kernel's call (a C kernel gets an error status) and again by the
executor after it, so a kernel that ignores the status still fails at that node.

`session.strict_workspace_verification` (the seeds' strict verification) checks only workspace, in every
run: a scratch request up to the largest slot the kernel declared for the run's shapes is served (the
plan may not hold it yet: a first traced run), one beyond it is `WorkspaceVerificationError` at the node.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

import ort_abi
from ort_graph import Node

from ._errors import UnplannedAllocationError, WorkspaceVerificationError

__all__ = ["Refusals"]

VERIFY_FIX = ("make the kernel declare (DeclareWorkspaceRequirements / declare_workspace) at least what it uses "
              "for these input shapes, or disable session.strict_workspace_verification to allow a scratch fallback")
FIX = ("declare the workspace the kernel uses (DeclareWorkspaceRequirements / declare_workspace) so that the plan "
       "holds it, or disable session.pre_allocate_execution_buffers to allow runtime allocations")


class Refusals:
    """One node's refusals in a strict run; also the node's scratch allocator (which refuses)."""

    def __init__(self, node: Node, workspace: Mapping[int, Any], *, outputs: bool = True,
                 declared: Mapping[int, int] | None = None, device: Any = None) -> None:
        """`outputs`: refuse unplanned outputs too (pre-allocated); `declared` (strict workspace verification):
        slot id -> bytes the kernel declared for this run's shapes, scratch within it is served (from `device`,
        the node's device allocator, or host memory) and beyond it refused."""
        self.node = node
        self.planned_workspace = {slot: int(buf.nbytes) for slot, buf in workspace.items()}
        self.refuses_outputs = outputs
        self.declared = None if declared is None else {int(k): int(v) for k, v in declared.items()}
        self.device = device
        self.first: UnplannedAllocationError | None = None

    def _who(self) -> str:
        return f"node {self.node.name!r} ({self.node.qualified_op}) on {self.node.ep or 'CPUExecutionProvider'}"

    def _refuse(self, message: str, requested: int, planned: int | None,
                kind: type[UnplannedAllocationError] = UnplannedAllocationError) -> None:
        error = kind(message, node=self.node.name, requested=requested, planned=planned)
        if self.first is None:
            self.first = error
        raise error

    def alloc(self, nbytes: int) -> Any:
        """A scratch request: refused, naming the bytes asked for and the workspace the plan holds (strict
        verification: served when within what the kernel declared)."""
        if self.declared is not None and not self.refuses_outputs:
            largest = max(self.declared.values(), default=0)
            if int(nbytes) <= largest:
                return self.device.alloc(int(nbytes)) if self.device is not None else np.empty(int(nbytes), np.uint8)
            self._refuse(f"{self._who()} asked at run time for a {int(nbytes)}-byte workspace buffer, more than it "
                         f"declared for these input shapes ({self.declared!r}, slot id -> bytes; largest {largest}); "
                         f"session.strict_workspace_verification makes that an error instead of a scratch fallback. "
                         f"Fix: {VERIFY_FIX}", int(nbytes), largest, WorkspaceVerificationError)
        planned = self.planned_workspace
        if planned:
            had = f"its planned workspace is {planned!r} (slot id -> bytes, declared at initialization): it asks " \
                  "for more than it declared"
        else:
            had = "the plan holds no workspace for it: the kernel has no workspace declaration (an older ABI path) " \
                  "or declared none for these shapes"
        self._refuse(f"{self._who()} asked for a {int(nbytes)}-byte scratch buffer during a run with pre-allocated "
                     f"execution buffers, which allow no runtime allocation; {had}. Fix: {FIX}",
                     int(nbytes), max(planned.values(), default=None))

    def free(self, buffer: Any) -> None:
        if self.device is not None and isinstance(buffer, ort_abi.DeviceBuffer):
            self.device.free(buffer)  # a verified scratch buffer on the device (pre-allocated: none is handed out)

    def output(self, index: int, name: str, shape: tuple[int, ...], dtype: np.dtype, planned: int | None) -> None:
        """An output the plan does not place: refused, naming its shape and bytes and the planned block."""
        nbytes = math.prod(shape) * np.dtype(dtype).itemsize
        where = (f"its planned block holds {planned} bytes" if planned is not None
                 else "the plan has no block for it")
        self._refuse(f"{self._who()} asked for output {index} {name!r} as {tuple(shape)!r} {np.dtype(dtype)} "
                     f"({nbytes} bytes) during a run with pre-allocated execution buffers, but {where}; the kernel's "
                     "output shape differs from the planned one: check the model's shapes (free_dimension_overrides, "
                     "max_shapes) or disable session.pre_allocate_execution_buffers", nbytes, planned)

    def raise_first(self) -> None:
        if self.first is not None:
            raise self.first
