"""Intra-op threads of the CPU provider: one place that says how many threads a CPU kernel may use now.

`intra_op_thread_scope(n)` is entered around a run (the provider's `run_scope()`, which the session
enters through `ort_abi.provider_run_scope`). For its duration:
- `intra_op_threads()` returns n: the thread count the provider's own multi-threaded kernels read;
- numpy's BLAS (OpenBLAS, MKL, BLIS: whatever threadpoolctl finds loaded) is limited to n threads, and
  its previous limits are restored when the scope ends (also when the run fails).

n = 0 means the default: the physical cores this process may run on. Physical is determined from the
CPUs in the affinity mask (`os.sched_getaffinity`, else `os.cpu_count()`), grouped by the Linux sysfs
topology (`/sys/devices/system/cpu/cpuN/topology/core_cpus_list`, else `thread_siblings_list`): the
hardware threads of one core count once. Where the topology is unreadable (not Linux, a restricted
container) every logical CPU counts as a core.

BLAS limits are process-wide: two sessions running at once in different threads share them. Scopes
are counted, so the limits of the most recently entered scope still open apply, and the original
limits come back when the last one closes. OpenBLAS itself ignores a limit set from a thread other
than the main one once the main thread has set one (seen with numpy's OpenBLAS 0.3.31): runs started
from worker threads then keep the main thread's BLAS limit; `intra_op_threads()` is per thread always.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import pathlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

from ._errors import ThreadCountError

MAX_THREADS = 1024  # more intra-op threads than this is a mistake, not a machine

_REQUESTED: contextvars.ContextVar[int | None] = contextvars.ContextVar("ort_cpu_ep_intra_op_threads", default=None)
_SYSFS_CPU = pathlib.Path("/sys/devices/system/cpu")


def check_thread_count(value: Any, option: str = "intra_op_num_threads") -> int:
    """`value` as an int thread count from 0 (the default: physical cores) to MAX_THREADS, else
    `ThreadCountError` naming the option."""
    import numbers

    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 <= int(value) <= MAX_THREADS:
        raise ThreadCountError(
            f"{option}={value!r} ({type(value).__name__}): expected an int from 0 to {MAX_THREADS}, the threads of "
            f"the CPU kernels and BLAS; 0 uses the physical cores ({physical_cores()} here), 1 runs single-threaded")
    return int(value)


def _allowed_cpus() -> list[int]:
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def _core_of(cpu: int) -> str | None:
    topology = _SYSFS_CPU / f"cpu{cpu}" / "topology"
    for name in ("core_cpus_list", "thread_siblings_list"):
        try:
            return (topology / name).read_text().strip()
        except OSError:
            continue
    return None


def physical_cores() -> int:
    """The physical cores among the CPUs this process may run on (see the module doc); at least 1."""
    cpus = _allowed_cpus()
    cores = [_core_of(cpu) for cpu in cpus]
    if any(c is None for c in cores):
        return max(1, len(cpus))
    return max(1, len(set(cores)))


@functools.cache
def _default_threads() -> int:
    return physical_cores()


def resolve_threads(threads: int) -> int:
    """The thread count a scope of `threads` uses: `threads`, or the physical cores for 0."""
    n = check_thread_count(threads)
    return n if n else _default_threads()


def requested_threads() -> int:
    """The count of the innermost open scope of this thread (and context), 0 when none is open."""
    n = _REQUESTED.get()
    return 0 if n is None else n


_LISTENERS: list[Callable[[int], Any]] = []
_NATIVE: contextvars.ContextVar[int | None] = contextvars.ContextVar("ort_cpu_ep_native_threads", default=None)


def add_thread_listener(listener: Callable[[int], Any]) -> None:
    """Call `listener(n)` on the thread entering or leaving a scope with that thread's count from then on
    (0: no scope open, the default). The C kernels keep a per-thread copy this way."""
    _LISTENERS.append(listener)


def _notify(n: int) -> None:
    for listener in _LISTENERS:
        listener(n)


def intra_op_threads() -> int:
    """The threads a CPU kernel running now may use: the innermost `intra_op_thread_scope` of this thread
    (and context), else the default (the physical cores)."""
    n = _REQUESTED.get()
    return n if n is not None else _default_threads()


class _BlasLimits:
    """Counted, process-wide BLAS thread limits, set through each BLAS library's own get/set calls (threadpoolctl
    finds the libraries once; its `limit()` would inspect every loaded library at each scope, tens of us a run).
    The limits from before the first open scope are read as that scope opens and set back when the last one
    closes; a library already at the count wanted is not called again."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: list[int] = []  # the thread counts of the scopes open now, in the order they were entered
        self._original: list[int] = []  # each library's threads before the first open scope
        self._applied: list[int | None] = []  # each library's threads as last set here (None: not set)
        self._controller: Any = None

    def _libs(self) -> list[Any]:
        """The BLAS libraries' controllers (get_num_threads / set_num_threads), found once."""
        if self._controller is None:  # finding the loaded libraries takes milliseconds: once
            from threadpoolctl import ThreadpoolController

            self._controller = ThreadpoolController().select(user_api="blas").lib_controllers
        return self._controller

    def _apply(self, counts: list[int]) -> None:
        for k, (lib, n) in enumerate(zip(self._libs(), counts, strict=True)):
            if self._applied[k] != n:
                lib.set_num_threads(n)
                self._applied[k] = n

    def enter(self, n: int) -> None:
        with self._lock:
            libs = self._libs()
            if not self._open:
                self._original = [lib.get_num_threads() for lib in libs]
                self._applied = list(self._original)
            self._apply([n] * len(libs))
            self._open.append(n)

    def exit(self, n: int) -> None:
        with self._lock:
            self._open.remove(n)
            self._apply([self._open[-1]] * len(self._libs()) if self._open else self._original)


_BLAS = _BlasLimits()


@contextlib.contextmanager
def intra_op_thread_scope(threads: int = 0, *, blas: int | None = None, native: int | None = None) -> Iterator[int]:
    """Run the body with `threads` intra-op threads (0: the physical cores): `intra_op_threads()` returns
    it, BLAS is limited to `blas` threads and the C kernels use `native` threads (both default to it); all
    are restored afterwards. Yields the resolved count."""
    n = resolve_threads(threads)
    blas_n = n if blas is None else max(1, min(n, int(blas)))
    native_n = n if native is None else max(1, min(n, int(native)))
    token, native_token = _REQUESTED.set(n), _NATIVE.set(native_n)
    try:
        _BLAS.enter(blas_n)
    except BaseException:
        _REQUESTED.reset(token)
        _NATIVE.reset(native_token)
        raise
    try:
        _notify(native_n)
        yield n
    finally:
        _BLAS.exit(blas_n)
        _REQUESTED.reset(token)
        _NATIVE.reset(native_token)
        outer = _NATIVE.get()
        _notify(0 if outer is None else outer)


class native_thread_scope:  # noqa: N801 - used as a context manager, like intra_op_thread_scope
    """Only the C kernels' threads (`add_thread_listener`) at `native` for the body, then back to the enclosing
    scope's: for a run that calls no numpy kernel and no BLAS (an all-C replay), which needs neither the BLAS
    limit nor the Python thread count `intra_op_thread_scope` sets. A class, not a generator: a few hundred ns."""

    __slots__ = ("native",)

    def __init__(self, native: int) -> None:
        self.native = native

    def __enter__(self) -> int:
        _notify(self.native)
        return self.native

    def __exit__(self, *exc: object) -> None:
        outer = _NATIVE.get()
        _notify(0 if outer is None else outer)


__all__ = ["MAX_THREADS", "add_thread_listener", "native_thread_scope", "check_thread_count", "intra_op_thread_scope", "intra_op_threads", "physical_cores",
           "requested_threads", "resolve_threads"]
