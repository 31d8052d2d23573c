"""The one exception hierarchy of ort-cuda-ep."""

from __future__ import annotations

from ort_partition import UnknownProfileError  # profiles live in ort-partition: the same class, re-exported

__all__ = ["CudaEpError", "DeviceUnavailableError", "KernelCompileError", "UnknownProfileError", "KernelLaunchError"]


class CudaEpError(Exception):
    """Base class of every error raised by ort-cuda-ep."""


class DeviceUnavailableError(CudaEpError):
    """No usable CUDA driver or device (the EP then declines every node at initialization)."""


class KernelCompileError(CudaEpError):
    """NVRTC rejected a kernel source, or NVRTC itself could not be loaded."""

    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(message)
        self.log = log


class KernelLaunchError(CudaEpError):
    """A kernel could not run: bad inputs at run time, or a CUDA error."""
