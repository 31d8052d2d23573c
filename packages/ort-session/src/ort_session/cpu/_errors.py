"""Errors raised by the CPU op library."""


class CpuOpError(Exception):
    """A CPU kernel or the interpreter could not run a node (a bug when the node was claimed)."""
