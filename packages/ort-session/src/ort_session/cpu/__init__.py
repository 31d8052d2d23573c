"""The CPU execution provider's op library (numpy kernels)."""

from ._registry import Decline, InputInfo, OpImpl, all_ops, find, register

__all__ = ["Decline", "InputInfo", "OpImpl", "all_ops", "find", "register"]
