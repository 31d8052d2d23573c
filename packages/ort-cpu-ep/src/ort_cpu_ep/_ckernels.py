"""ort-cpu-ep's C kernels: the shared library built from `csrc/` (see `_cbuild`), loaded exactly like a
third-party kernel library (`ort_abi.load_kernel_library`: its `OrtRegisterKernels` calls
`KernelRegistry_AddKernelV2` with a Level-1 estimate, its kernels declare Level-2 workspace).

The provider consults `c_registry()` before the numpy kernels, for the nodes `c_kernel_applies` accepts.
Where the library is absent (no compiler at install) or does not load, `c_registry()` is None, the numpy
kernels run, and `status()` says why. The library's intra-op thread count follows `ort_cpu_ep._threads`
(its default is set at load, each `intra_op_thread_scope` sets the calling thread's count).
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import pathlib
from typing import Any

import attrs

import ort_abi

from . import _threads
from ._c_rules import C_CONV_ACTIVATIONS, c_kernel_applies
from ._cbuild import LIBRARY_NAME

_log = logging.getLogger("ort_cpu_ep")
EP_NAME = "CPUExecutionProvider"
DISABLE_ENV = "ORT_CPU_EP_NO_C_KERNELS"  # set to 1: use the numpy kernels even where the C library is built
_LISTENING: list[bool] = []
_LIB: list[Any] = []  # the loaded library (ctypes), once `_load` has loaded it: its thread-count calls


@attrs.frozen
class CKernelStatus:
    """Whether the C kernels are in use, the library path, and why not when they are not."""

    loaded: bool
    path: pathlib.Path
    reason: str
    openmp: bool = False


def library_path() -> pathlib.Path:
    return pathlib.Path(__file__).resolve().parent / LIBRARY_NAME


@functools.cache
def _load() -> tuple[ort_abi.KernelRegistry | None, CKernelStatus]:
    path = library_path()
    if os.environ.get(DISABLE_ENV, "") not in ("", "0"):
        return None, CKernelStatus(False, path, f"disabled by {DISABLE_ENV}")
    if not path.is_file():
        return None, CKernelStatus(False, path, "not built (no C compiler at install?); build it with "
                                   "`python packages/ort-cpu-ep/src/ort_cpu_ep/_cbuild.py` or reinstall ort-cpu-ep")
    registry = ort_abi.KernelRegistry()
    try:
        ort_abi.load_kernel_library(path, registry)
        lib = ctypes.CDLL(str(path))  # the same loaded object: its thread-count setters
    except (ort_abi.AbiError, OSError) as e:
        _log.warning("ort-cpu-ep: C kernel library %s did not load (%s); using the numpy kernels", path, e)
        return None, CKernelStatus(False, path, f"did not load: {e}")
    lib.ort_cpu_ep_set_default_threads.argtypes = [ctypes.c_int]
    lib.ort_cpu_ep_set_threads.argtypes = [ctypes.c_int]
    lib.ort_cpu_ep_set_default_threads(_threads.physical_cores())
    if not _LISTENING:  # once per process: the library stays loaded when _load is asked again
        _threads.add_thread_listener(lib.ort_cpu_ep_set_threads)
        _LISTENING.append(True)
    lib.ort_cpu_ep_set_threads(_threads.requested_threads())
    _LIB[:] = [lib]
    return registry, CKernelStatus(True, path, "loaded", bool(lib.ort_cpu_ep_has_openmp()))


class CKernelsUnavailableWarning(UserWarning):
    """The C kernel library is not in use, so every op runs in numpy (a 4-bit decode step about 100x slower)."""


_NOTICED: list[bool] = []


def notice_once() -> None:
    """Warn once per process, when a provider is created, that the C kernels are not in use, with the reason and
    the fix; nothing when they are loaded or the user turned them off (ORT_CPU_EP_NO_C_KERNELS)."""
    import warnings

    st = status()
    if st.loaded or _NOTICED or st.reason.startswith("disabled by"):
        return
    _NOTICED.append(True)
    warnings.warn(f"ort-cpu-ep's C kernels are not in use ({st.reason}): every op runs in numpy, the LLM hot path "
                  "(MatMulNBits, MatMul, attention, norms) about 100x slower. Fix: install with a C compiler present "
                  "(`pip install --force-reinstall --no-deps ./packages/ort-cpu-ep`, editable installs included) or "
                  "build in place with `python packages/ort-cpu-ep/src/ort_cpu_ep/_cbuild.py`",
                  CKernelsUnavailableWarning, stacklevel=3)


def c_registry() -> ort_abi.KernelRegistry | None:
    """The registry of the C kernels for the CPU provider, or None (see `status()`)."""
    return _load()[0]


def status() -> CKernelStatus:
    return _load()[1]


def shared_estimate(memo: dict[tuple, int], entry: Any, node: Any, ep: Any) -> int | None:
    """`ort_abi.estimate_workspace(entry, node, ep)` for an entry of this library, shared through `memo` by the
    nodes that look alike to it (`ort_abi.node_query_key`, plus the calling thread's kernel threads, which the
    Conv estimates count buffers by): its estimates read the op, the inputs and the attributes, never the node's
    name nor the EP (test_ckernel_estimates checks the sources). A failed estimate (None) is not shared: the
    next node asks again, and the log names it."""
    key = ort_abi.node_query_key(node)
    if key is None:
        return ort_abi.estimate_workspace(entry, node, ep)
    key = (id(entry), _LIB[0].ort_cpu_ep_threads(), key)  # entries live as long as the cached registry
    found = memo.get(key)
    if found is None:
        found = ort_abi.estimate_workspace(entry, node, ep)
        if found is not None:
            memo[key] = found
    return found


def kernel_language(entry: Any) -> str:
    """'C' for an entry of the C library, else 'numpy' (in-tree Python) or the entry's own language."""
    from .ops import OpImpl

    if entry.library and pathlib.Path(entry.library).name == LIBRARY_NAME:
        return "C"
    if entry.library:
        return "c"  # another loaded kernel library
    return "numpy" if isinstance(entry.create_func_state, OpImpl) else entry.language


__all__ = ["C_CONV_ACTIVATIONS", "CKernelStatus", "c_kernel_applies", "c_registry", "kernel_language", "library_path", "status"]
