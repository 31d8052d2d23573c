"""Access to the compiled cffi bridge, which may be absent: pure-Python parts keep working without it."""

from __future__ import annotations

from typing import Any

from ._errors import CFeaturesUnavailableError

try:
    from ._cffi_bridge import ffi as _ffi
    from ._cffi_bridge import lib as _lib

    _IMPORT_ERROR: BaseException | None = None
except ImportError as e:  # the extension did not build or was not installed
    _ffi = _lib = None
    _IMPORT_ERROR = e


def c_available() -> bool:
    """True when the compiled bridge is importable (C kernels and libraries can be used)."""
    return _ffi is not None


_BOUND: tuple[Any, Any] | None = None  # (ffi, lib) once the host functions are bound


def require_c(feature: str) -> tuple[Any, Any]:
    """(ffi, lib), or a clear error naming the feature that needs the compiled bridge."""
    global _BOUND
    if _BOUND is not None:  # asked per kernel call and per estimate: the import below only once
        return _BOUND
    if _ffi is None:
        raise CFeaturesUnavailableError(
            f"{feature} needs the compiled cffi bridge 'ort_abi._cffi_bridge', which failed to import "
            f"({_IMPORT_ERROR!r}); reinstall ort-abi with a C compiler and cffi>=1.16 available "
            "(pip install --force-reinstall ort-abi)"
        ) from _IMPORT_ERROR
    from . import _host_c  # noqa: F401  (binds the extern "Python" host functions)

    _BOUND = (_ffi, _lib)
    return _BOUND
