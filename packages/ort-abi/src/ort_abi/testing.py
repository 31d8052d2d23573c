"""Helpers for tests that build C kernel libraries against this ABI: the system compiler, and the compiled cffi
bridge such libraries load through (ort-abi's own tests and the cross-package integration tests)."""

from __future__ import annotations

import shutil

from ._ffi import c_available

__all__ = ["BridgeUnavailable", "c_compiler", "require_bridge"]


class BridgeUnavailable(Exception):
    """No C compiler on this machine, so the cffi bridge could not be built at install (tests skip with this)."""


def c_compiler() -> str | None:
    """The system C compiler's path (cc, gcc or clang), or None."""
    return shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


def require_bridge() -> None:
    """Return when the compiled cffi bridge is importable. Without it: BridgeUnavailable where no C compiler could
    have built it; beside a compiler the install failed, an AssertionError saying so."""
    if c_available():
        return
    if c_compiler() is None:
        raise BridgeUnavailable("no C compiler (cc) on PATH: ort_abi._cffi_bridge could not be built at install")
    raise AssertionError("ort_abi._cffi_bridge is not built although a C compiler is on PATH: reinstall ort-abi "
                         "(pip install -e packages/ort-abi) and read its build output")
