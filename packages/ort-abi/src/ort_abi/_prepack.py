"""Planned constant-weight pre-packing (ABI version 5: OrtKernelImpl::DeclarePrePackedBytes / PrePackWeightInto).

A kernel first declares how many bytes it will pack for a constant input (`declare_prepacked`), before the memory
plan's budget check, so that the packed copy is counted as the node's weights; then, before any Compute,
`prepack_weight` hands it the initializer and a host-owned buffer of exactly those bytes (`PackedBuffer`, aligned
to ORT_PREPACK_ALIGNMENT), which lives as long as the kernel. Python kernels take part with the same two methods
(`declare_prepacked(shapes, index) -> int`, `prepack(index, array, buffer) -> bool`); kernels without them, and C
kernels of ABI versions before 5 or with NULL entries, pack nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from . import ABI_PREPACK_ALIGNMENT as ALIGNMENT
from ._errors import AbiError, KernelError
from ._status import ErrorCode
from ._workspace import WorkspaceInputShape


class PrePackError(KernelError):
    """A kernel's pre-packing failed at initialization (its status, or a bad declaration); names the node."""


def aligned_buffer(nbytes: int) -> np.ndarray:
    """`nbytes` of zeroed host memory starting on an ALIGNMENT-byte boundary (a view into a slightly larger array)."""
    raw = np.zeros(nbytes + ALIGNMENT, dtype=np.uint8)
    offset = (-raw.ctypes.data) % ALIGNMENT
    return raw[offset:offset + nbytes]


def _call(fn: Any, args: tuple[Any, ...], *, node: str | None, operation: str, what: str) -> Any:
    """fn(*args); a kernel's error status or any other exception as a PrePackError naming the node."""
    try:
        return fn(*args)
    except PrePackError:
        raise
    except KernelError as e:  # the kernel's error status
        raise PrePackError(e.code, e.message, node=node or e.node, library=e.library, operation=e.operation) from e
    except AbiError:
        raise
    except Exception as e:
        raise PrePackError(ErrorCode.RUNTIME_EXCEPTION, f"{what} raised {e!r}", node=node, operation=operation) from e


def declare_prepacked(kernel: Any, shapes: Sequence[WorkspaceInputShape], index: int, *,
                      node: str | None = None) -> int:
    """Bytes `kernel` will pack for constant input `index` (0: none, or the kernel does not pre-pack)."""
    fn = getattr(kernel, "declare_prepacked", None)
    if fn is None:
        return 0
    value = _call(fn, (list(shapes), index), node=node, operation="DeclarePrePackedBytes", what="declare_prepacked")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise PrePackError(ErrorCode.INVALID_ARGUMENT, f"declared {value!r} packed bytes for input {index}; declare "
                           "an int >= 0 (0: not packed)", node=node, operation="DeclarePrePackedBytes")
    return int(value)


def prepack_weight(kernel: Any, index: int, array: np.ndarray, nbytes: int, *, node: str | None = None) -> bool:
    """Pack constant input `index` (`array`) into a host buffer of the declared `nbytes`; True when the kernel
    packed it (False: the buffer is dropped). A C kernel's buffer is kept by its CKernel until release; a Python
    kernel keeps the `buffer` it was given itself."""
    fn = getattr(kernel, "prepack", None)
    if fn is None or nbytes <= 0:
        return False
    buffer = aligned_buffer(nbytes)
    return bool(_call(fn, (index, np.ascontiguousarray(array), buffer), node=node, operation="PrePackWeightInto",
                      what=f"prepack of input {index}"))
