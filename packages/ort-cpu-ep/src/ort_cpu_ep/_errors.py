"""The errors of ort-cpu-ep: the provider's (`CpuEpError`) and the op library's (`ops.CpuOpError`, a subclass)."""

from __future__ import annotations


class CpuEpError(Exception):
    """Base of every error ort-cpu-ep raises."""


class ThreadCountError(CpuEpError, ValueError):
    """An intra-op thread count that is not an int from 0 (the physical cores) to `MAX_THREADS`."""
