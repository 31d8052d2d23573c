"""Loading third-party C kernel libraries into a KernelRegistry."""

from __future__ import annotations

import logging
import os
import pathlib
from typing import Any

import attrs

from . import _elf
from ._errors import (
    AbiVersionMismatchError,
    DuplicateKernelError,
    KernelError,
    KernelLibraryError,
    LibraryNotFoundError,
    MissingSymbolError,
    RegistrationFailedError,
)
from ._ffi import require_c
from ._status import check, recording_failures
from ._views import RegistryScope, close_handle, open_handle

_log = logging.getLogger("ort_abi")
VERSION_SYMBOL = "OrtKernelLibraryAbiVersion"
_LOADED: list[Any] = []  # dl handles stay open for the process: kernels may outlive any registry


@attrs.define(eq=False)
class KernelLibrary:
    """A loaded kernel library: where it came from, its ABI version and what it registered."""

    path: pathlib.Path
    entry_point: str
    abi_version: int
    entries: list[Any]


def _library_path(path: Any) -> pathlib.Path:
    """The library path as text; bytes must be UTF-8 (the path crosses to C as UTF-8)."""
    try:
        raw = os.fspath(path)
    except TypeError as e:
        raise KernelLibraryError(f"kernel library path {path!r} is not a path (str, bytes or os.PathLike)") from e
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        text.encode("utf-8")  # str from os.fsdecode may carry surrogate escapes of undecodable bytes
    except UnicodeError as e:
        raise KernelLibraryError(f"kernel library path {raw!r} is not valid UTF-8; rename the file (or a folder on "
                                 "its path) to a UTF-8 name") from e
    return pathlib.Path(text)


def _dlsym(ffi: Any, lib: Any, handle: Any, name: str) -> Any:
    err = ffi.new("char[]", 1024)
    sym = lib.ort_abi_dlsym(handle, name.encode(), err, 1024)
    return None if sym == ffi.NULL else sym


def load_kernel_library(path: str | bytes | os.PathLike[str], registry: Any,
                        entry_point: str = "OrtRegisterKernels") -> KernelLibrary:
    """Load a shared library compiled against ort_kernel_abi.h and call its registration entry
    `OrtStatus* entry_point(const OrtKernelApi*, OrtKernelRegistry*)` on `registry`.

    All-or-nothing: if anything fails, the kernels it added are removed again. Raises
    LibraryNotFoundError, KernelLibraryError (not loadable), MissingSymbolError, AbiVersionMismatchError,
    DuplicateKernelError, or RegistrationFailedError (the entry returned an error or ignored one)."""
    p = _library_path(path)
    try:
        found = p.is_file()
    except (OSError, ValueError) as e:  # a name too long for the file system, a NUL byte
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        shown = str(p) if len(str(p)) <= 200 else str(p)[:200] + f"... ({len(str(p))} characters)"
        raise KernelLibraryError(f"kernel library path {shown!r} cannot be looked up ({reason}); give the path "
                                 "of the shared object (.so) you built, e.g. ./libmykernels.so") from e
    if not found:
        raise LibraryNotFoundError(f"kernel library {str(p)!r} does not exist; build it first "
                                   "(see the README of examples/c-kernel-library) or fix the path")
    ffi, lib = require_c("load_kernel_library")
    name = str(p)
    if _elf.applies():  # a truncated ELF file would kill the process with SIGBUS inside dlopen
        try:
            _elf.check_shared_object(p)
        except _elf.ElfProblem as e:
            raise KernelLibraryError(f"cannot load kernel library {name!r}: {e}; rebuild it as a shared object for "
                                     "this platform (cc -shared -fPIC ...) or copy it again") from e
    err = ffi.new("char[]", 1024)
    handle = lib.ort_abi_dlopen(str(p.resolve()).encode(), err, 1024)
    if handle == ffi.NULL:
        raise KernelLibraryError(f"cannot load kernel library {name!r}: {ffi.string(err).decode(errors='replace')}; "
                                 "it must be a shared object for this platform (cc -shared -fPIC ...)")
    version_sym = _dlsym(ffi, lib, handle, VERSION_SYMBOL)
    if version_sym is None:
        raise MissingSymbolError(f"kernel library {name!r} does not export {VERSION_SYMBOL!r}; add the line "
                                 "ORT_KERNEL_LIBRARY_DEFINE_ABI_VERSION() to one of its C files and rebuild")
    version = int(ffi.cast("OrtKernelLibraryAbiVersionFunc", version_sym)())
    host, oldest = lib.ORT_KERNEL_ABI_VERSION, lib.ORT_KERNEL_ABI_MIN_VERSION
    if not oldest <= version <= host:
        raise AbiVersionMismatchError(
            f"kernel library {name!r} was built against ABI version {version}, but this host accepts "
            f"{oldest}..{host}; rebuild it against the header of the installed ort-abi "
            "(python -c \"import ort_abi; print(ort_abi.get_include())\") or upgrade ort-abi")
    entry_sym = _dlsym(ffi, lib, handle, entry_point)
    if entry_sym is None:
        raise MissingSymbolError(
            f"kernel library {name!r} does not export the registration entry {entry_point!r}; define "
            f"ORT_KERNEL_EXPORT OrtStatus* {entry_point}(const OrtKernelApi*, OrtKernelRegistry*) "
            "or pass entry_point= the name it does export")
    _LOADED.append(handle)
    register = ffi.cast("OrtRegisterKernelsFunc", entry_sym)
    scope = RegistryScope(registry, name)
    reg_h = open_handle("OrtKernelRegistry", scope)
    try:
        with recording_failures(scope.errors):  # a host call that failed, even if the library drops its status
            status = register(lib.ort_abi_host_api(), reg_h)
    finally:
        close_handle("OrtKernelRegistry", reg_h)
    duplicate = next((e for e in scope.errors if isinstance(e, DuplicateKernelError)), None)
    try:
        check(status, library=name, operation=f"registration entry {entry_point!r}")
    except KernelError as e:
        _rollback(registry, scope)
        if duplicate is not None:
            raise DuplicateKernelError(f"kernel library {name!r}: {duplicate}") from e
        raise RegistrationFailedError(f"kernel library {name!r} failed to register: {e}; fix the library or "
                                      "the registry it is loaded into", code=e.code, library=name) from e
    if scope.errors:
        _rollback(registry, scope)
        first = scope.errors[0]
        if duplicate is not None:
            raise DuplicateKernelError(f"kernel library {name!r}: {duplicate}") from duplicate
        raise RegistrationFailedError(
            f"kernel library {name!r} returned success from {entry_point!r} but ignored a failing host call: "
            f"{first}; check every OrtStatus* the API returns", library=name) from first
    if not scope.added:
        _log.warning("kernel library %r registered no kernels", name)
    return KernelLibrary(p, entry_point, version, list(scope.added))


def _rollback(registry: Any, scope: RegistryScope) -> None:
    for entry in scope.added:
        registry.remove(entry)
    scope.added.clear()
