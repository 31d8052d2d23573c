"""Errors raised by the CPU op library."""

from .._errors import CpuEpError


class CpuOpError(CpuEpError):
    """A CPU kernel or the interpreter could not run a node (a bug when the node was claimed)."""


class IndexOutOfRangeError(CpuOpError, IndexError):
    """An index-taking kernel (Gather, GatherElements, GatherND, Scatter*) got an index outside
    `[-n, n-1]` for its axis; numpy would wrap it or read another row, so the run is refused instead."""
