"""Give the C heap's free pages back to the system between initialization stages.

Loading and shape inference go through onnx's C++ code (a serialized copy of the model, the inferred proto):
tens of bytes per node that glibc keeps resident after they are freed, while the Python objects the later
stages make come from other memory (pymalloc's arenas). `release_free_heap()` asks glibc (`malloc_trim(0)`)
to return those pages, so they do not add to the process's peak; elsewhere (no glibc) it does nothing.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from collections.abc import Callable

__all__ = ["release_free_heap"]


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        trim = ctypes.CDLL(None).malloc_trim  # the process's own C library: glibc has it, musl does not
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def release_free_heap() -> bool:
    """Return the C heap's free pages to the system; whether the platform can (glibc)."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
