"""A run's guard: `RunOptions.terminate` and the host memory bound, checked between the top-level nodes (as
the executor's progress callback) and inside kernels that loop for long (as the `ort_abi.RunChecks` the
run installs: Loop / Scan iterations, every node of a subgraph, nested bodies included).

What is not interruptible: one numpy call or one C kernel; a terminate set while it runs is seen when it
returns (between two nodes or two iterations).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from ._errors import InvalidOptionError, RunTerminatedError, UnplannedAllocationError


@attrs.define(eq=False)
class RunGuard:
    """`run_options` (a RunOptions, or None); `progress` the caller's callback; `bound` the bytes one node may
    accumulate on the host (a Loop's scan outputs) and `bound_what` what the bound is, or None: no bound."""

    run_options: Any
    progress: Callable[[int, int], None] | None
    total: int
    bound: int | None = None
    bound_what: str = ""
    done: int = 0

    def __call__(self, done: int, total: int) -> None:
        self.done = done
        if self.progress is not None and done:
            self.progress(done, total)
        if self.run_options is not None and self.run_options.terminate:
            raise RunTerminatedError(f"the run was terminated (RunOptions.terminate) after {done} of {total} "
                                     "nodes; its outputs are discarded — set terminate = False to run again")

    @property
    def callback(self) -> Callable[[int, int], None] | None:
        """The executor's progress callback: this guard when there is a terminate flag to check after every
        node, else the caller's own (a guard for the memory bound only costs nothing per node)."""
        return self if self.run_options is not None else self.progress

    @property
    def can_terminate(self) -> bool:
        """Whether `tick` may raise (a RunOptions to watch): else the C step runner computes If / Loop nodes
        whole, checks of the memory bound alone needing no look at every iteration (`ort_abi.RunChecks`)."""
        return self.run_options is not None

    def tick(self, where: str) -> None:
        if self.run_options is not None and self.run_options.terminate:
            raise RunTerminatedError(f"the run was terminated (RunOptions.terminate) inside node {where!r}, after "
                                     f"{self.done} of {self.total} nodes; its outputs are discarded — set "
                                     "terminate = False to run again")

    def grow(self, where: str, nbytes: int) -> None:
        if self.bound is not None and nbytes > self.bound:
            raise UnplannedAllocationError(
                f"node {where!r} has accumulated {nbytes} bytes of scan outputs, over {self.bound_what} "
                f"({self.bound} bytes): its output has no static bound and would exceed the memory the session "
                "promised; give the Loop a constant trip count (input M) so that its outputs are planned, bound "
                "its iterations, or raise the budget", node=where, requested=nbytes, planned=self.bound)


def terminating(run_options: Any, progress: Callable[[int, int], None] | None, nodes: int,
                bound: tuple[int, str] | None = None) -> Callable[[int, int], None] | None:
    """The run's progress callback: a RunGuard checking `run_options.terminate` before the first node and
    after each (and, installed with `ort_abi.run_checks_scope`, inside long kernels), or `progress` itself
    when there is nothing to check. `bound`: (bytes, what they are) a node may accumulate on the host."""
    if run_options is None and bound is None:
        return progress
    if run_options is not None and not hasattr(run_options, "terminate"):
        raise InvalidOptionError(f"run_options must be a RunOptions, got {type(run_options).__name__}; the third "
                                 "argument of run() is run_options (pass progress= by keyword)")
    guard = RunGuard(run_options, progress, nodes, *(bound or (None, "")))
    if run_options is not None and run_options.terminate:  # set before the run: no node runs
        guard(0, nodes)
    return guard


__all__ = ["RunGuard", "terminating"]
