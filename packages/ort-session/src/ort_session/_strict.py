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
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ort_graph import Node

from ._errors import UnplannedAllocationError

__all__ = ["Refusals"]

FIX = ("declare the workspace the kernel uses (DeclareWorkspaceRequirements / declare_workspace) so that the plan "
       "holds it, or disable session.pre_allocate_execution_buffers to allow runtime allocations")


class Refusals:
    """One node's refusals in a strict run; also the node's scratch allocator (which refuses)."""

    def __init__(self, node: Node, workspace: Mapping[int, Any]) -> None:
        self.node = node
        self.planned_workspace = {slot: int(buf.nbytes) for slot, buf in workspace.items()}
        self.first: UnplannedAllocationError | None = None

    def _who(self) -> str:
        return f"node {self.node.name!r} ({self.node.qualified_op}) on {self.node.ep or 'CPUExecutionProvider'}"

    def _refuse(self, message: str, requested: int, planned: int | None) -> None:
        error = UnplannedAllocationError(message, node=self.node.name, requested=requested, planned=planned)
        if self.first is None:
            self.first = error
        raise error

    def alloc(self, nbytes: int) -> Any:
        """A scratch request: refused, naming the bytes asked for and the workspace the plan holds."""
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
        return None  # nothing is ever handed out

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
