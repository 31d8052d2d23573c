"""Run-scoped checks that kernels which loop for long call between iterations.

A run's caller (the session) installs a `RunChecks` for the duration of the run (`run_checks_scope`); a kernel
that iterates (Loop, Scan, a subgraph interpreter, a long host loop) calls `check_run(where)` between iterations
and `check_growth(where, nbytes)` with what it has accumulated so far. Outside a run (no checks installed)
both are free no-ops. The checks raise the caller's own typed errors (a terminated run, memory over the run's
bound), which the kernel lets through unchanged: `raised_by_run_checks(e)` tells them apart from the kernel's
own errors (a subgraph interpreter that wraps its nodes' errors must not wrap these). What a single numpy call
or C kernel does is not interruptible: the checks run between calls, never inside one.

The checks live in a context variable: they follow the run's thread (and asyncio task), so concurrent runs of
one session each see their own.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Protocol, runtime_checkable


@runtime_checkable
class RunChecks(Protocol):
    """What a run asks of its long-running kernels."""

    def tick(self, where: str) -> None:
        """Raise when the run must stop now (e.g. `RunOptions.terminate` was set); `where` names the node."""

    def grow(self, where: str, nbytes: int) -> None:
        """Raise when a node holding `nbytes` it accumulated (a Loop's scan outputs) exceeds the run's bound."""

    # optional: `can_terminate` False says `tick` never raises (checks of a memory bound alone); absent: True


_CHECKS: contextvars.ContextVar[RunChecks | None] = contextvars.ContextVar("ort_abi_run_checks", default=None)


def checks_every_iteration() -> bool:
    """Whether the run's checks must see every iteration of a long kernel (installed, and `tick` may raise):
    the step runner's control-flow steps then leave their node to the host's Python kernel, which checks."""
    checks = _CHECKS.get()
    return checks is not None and getattr(checks, "can_terminate", True) is not False


@contextlib.contextmanager
def run_checks_scope(checks: RunChecks | None) -> Iterator[None]:
    """Install `checks` for the kernels that run inside the block (None: none, the block runs unchecked)."""
    token = _CHECKS.set(checks)
    try:
        yield
    finally:
        _CHECKS.reset(token)


_MARK = "_ort_abi_run_check"


def raised_by_run_checks(e: BaseException) -> bool:
    """Whether `e` came from the run's checks (a terminated run, a bound passed), to be let through unchanged."""
    return getattr(e, _MARK, False)


def check_run(where: str) -> None:
    """Between two iterations of a long-running kernel: raises what the run's checks raise (a terminated run)."""
    checks = _CHECKS.get()
    if checks is not None:
        try:
            checks.tick(where)
        except BaseException as e:
            setattr(e, _MARK, True)
            raise


def check_growth(where: str, nbytes: int) -> None:
    """A kernel has accumulated `nbytes` (and will hold them until it returns): raises when over the run's bound."""
    checks = _CHECKS.get()
    if checks is not None:
        try:
            checks.grow(where, nbytes)
        except BaseException as e:
            setattr(e, _MARK, True)
            raise


__all__ = ["RunChecks", "check_growth", "checks_every_iteration", "check_run", "raised_by_run_checks", "run_checks_scope"]
