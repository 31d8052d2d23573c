"""The ort-abi exception hierarchy. Every message quotes the offending value and says how to fix it."""

from __future__ import annotations


class AbiError(Exception):
    """Base class of every error raised by ort-abi."""


class CFeaturesUnavailableError(AbiError, ImportError):
    """The compiled cffi bridge is missing; only the pure-Python parts of ort-abi work."""


class KernelDefError(AbiError, ValueError):
    """A kernel definition is incomplete or inconsistent (no op type, bad version range...)."""


class RegistrationError(AbiError):
    """A kernel could not be added to a registry."""


class DuplicateKernelError(RegistrationError):
    """A kernel for the same EP, op, domain, opset range and types is already registered."""


class KernelError(AbiError):
    """A kernel (or the host on its behalf) reported an error status.

    Carries the status `code` (an `ErrorCode`), the kernel's `message`, the `node` it ran for and
    the kernel `library` it came from (None for in-tree Python kernels)."""

    def __init__(self, code: int, message: str, *, node: str | None = None, library: str | None = None,
                 operation: str | None = None) -> None:
        from ._status import ErrorCode

        try:
            self.code: ErrorCode | int = ErrorCode(code)
        except ValueError:
            self.code = code
        self.message = message
        self.node = node
        self.library = library
        self.operation = operation
        code_name = self.code.name if isinstance(self.code, ErrorCode) else f"code {code}"
        where = operation or "kernel"
        if node is not None:
            where += f" of node {node!r}"
        if library is not None:
            where += f" (library {library!r})"
        prefix = f"[{code_name}] {where}: "
        super().__init__(prefix + message)


class WorkspaceDeclarationError(AbiError):
    """A kernel declared workspace slots the planner cannot use (duplicate ids, too many, bad sizes)."""


class KernelLibraryError(AbiError):
    """A C kernel library could not be loaded or registered."""


class LibraryNotFoundError(KernelLibraryError, FileNotFoundError):
    """The kernel library path does not exist."""


class MissingSymbolError(KernelLibraryError):
    """The library does not export a required symbol (registration entry or ABI version)."""


class AbiVersionMismatchError(KernelLibraryError):
    """The library or kernel was compiled against an ABI version this host does not accept."""


class RegistrationFailedError(KernelLibraryError):
    """The library's registration entry returned an error status (or ignored one)."""

    def __init__(self, message: str, *, code: int | None = None, library: str | None = None) -> None:
        self.code = code
        self.library = library
        super().__init__(message)


class HandleError(AbiError):
    """C code passed a handle the host did not hand out (or already released)."""


class OwnershipError(AbiError):
    """A DeviceBuffer ownership rule was broken."""


class DoubleFreeError(OwnershipError):
    """An owned buffer was freed a second time."""


class ForeignFreeError(OwnershipError):
    """A buffer was freed by an allocator that did not make it."""


class CrossDeviceFreeError(ForeignFreeError):
    """A buffer was freed by an allocator of another device."""


class CrossEpFreeError(ForeignFreeError):
    """A buffer was freed by an allocator of another execution provider on the same device."""


class BorrowedFreeError(OwnershipError):
    """A borrowed view was freed; views own nothing, free the owning buffer instead."""


class UseAfterFreeError(OwnershipError):
    """A freed buffer (or a view of one) was used."""


class LeakError(OwnershipError):
    """An execution provider shut down while buffers of its allocator were still allocated."""


class AllocationError(AbiError, MemoryError):
    """An allocator could not satisfy a request."""


class TransferError(AbiError):
    """A host/device copy had mismatched sizes, devices or dead buffers."""


class CaptureError(AbiError):
    """A device graph capture cannot hold: work that a replay cannot repeat happened inside the captured
    region (a host copy, an allocation, a host object), or the provider cannot capture. `reason` says which."""

    def __init__(self, message: str, *, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason or message
