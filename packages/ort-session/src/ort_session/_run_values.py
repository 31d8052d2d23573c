"""What a run's loop keeps per node and per value: the facts `_step` needs of each node (made once), the run's
values (weights read on first use, values made by the C step runner read from it), and what a failed or finished
step turns into (the exception to raise, the caller's copies of outputs)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

import ort_abi
from ort_graph import Node

from ._errors import KernelRunError, SessionError
from ._fast_steps import FastRun
from ._run_types import RunStats
from ._strict import Refusals

COPY_OPS = ("MemcpyFromHost", "MemcpyToHost", "MemcpyDeviceToDevice")


_POSITIONS: dict[tuple[int, ...], tuple[int, ...]] = {}  # output positions: few distinct ones in any model


class NodeFacts:
    """What `_step` needs of a node that no run changes: the names it reads (inputs + implicit), its
    outputs and their element types, whether it is a boundary copy (and one to the host), and `needed`:
    the positions of its tensor outputs (a known element type) that a later node or the graph's outputs
    read (`read`), which its kernel must produce."""

    __slots__ = ("copy", "needed", "out_types", "outputs", "reads", "to_host")

    def __init__(self, node: Node, reads: Sequence[str], out_types: Sequence[int],
                 read: set[str] | frozenset[str] = frozenset()) -> None:
        self.reads, self.out_types, self.outputs = reads, out_types, tuple(node.outputs)
        self.copy = node.op_type in COPY_OPS
        self.to_host = node.op_type == "MemcpyToHost"
        needed = tuple(j for j, (n, t) in enumerate(zip(self.outputs, out_types)) if n and t and n in read)
        self.needed = _POSITIONS.setdefault(needed, needed)  # positions: one tuple for every node with them


def check_produced(node: Node, facts: NodeFacts, produced: Callable[[int, str], bool]) -> None:
    """A kernel that returned success without one of its needed outputs: a KernelRunError naming the node and
    the output (not the KeyError of the next node that reads it)."""
    for j in facts.needed:
        name = facts.outputs[j]
        if not produced(j, name):
            raise KernelRunError(
                f"node {node.name!r} ({node.qualified_op}) on {node.ep or 'CPUExecutionProvider'} returned success "
                f"without producing its output {j} {name!r}, which later nodes or the graph's outputs read; the "
                "kernel must request every output (KernelContext_GetOutput / ctx.output) and fill it, or return an "
                "error status")


def raise_failure(node: Node, e: Exception, refusals: Refusals | None) -> None:
    """Raise what a node's failed compute means: its strict refusal when there was one (a refusal that
    crossed the C ABI as a status, or that a kernel swallowed), a SessionError as it is, else the kernel's
    error as a KernelRunError naming the node."""
    if refusals is not None and refusals.first is not None and e is not refusals.first:
        raise refusals.first from e
    if isinstance(e, SessionError):
        raise e
    raise KernelRunError(f"node {node.name!r} ({node.qualified_op}) on {node.ep or 'CPUExecutionProvider'} "
                         f"failed: {type(e).__name__}: {e}") from e


def host_readable(value: Any, node: Node, stats: RunStats) -> Any:
    """What a host node reads of a device-bound value: its shape only for Shape (no bytes move), else a
    counted device-to-host copy."""
    if not isinstance(value, ort_abi.DeviceTensor):
        return value
    if node.op_type == "Shape":
        return np.broadcast_to(np.zeros((), value.dtype), value.shape)
    host = ort_abi.tensor_to_host(value)
    stats.count_copy(value, host)
    return host


def host_copy(value: Any, stats: RunStats) -> Any:
    """The caller's own copy of an output: planned blocks and device tensors are reused by later runs."""
    if isinstance(value, ort_abi.DeviceTensor):
        host = ort_abi.tensor_to_host(value)
        stats.count_copy(value, host)
        return host
    return np.array(value) if isinstance(value, np.ndarray) else value


class RunValues(dict):
    """A run's values, starting with the weights, each read (`Tensor.numpy()`) the first time a kernel on the
    host asks for it: a streamed weight is only ever copied to its slot from the file mapping, so reading
    every weight up front would put misaligned mapped ones into host memory for nothing. A streamed weight
    reads as None here: every read of one is replaced by its slot's device tensor (`WeightStreamer.before_node`)."""

    def __init__(self, initializers: Mapping[str, Any], streamed: Mapping[str, Any], *, private: bool = False) -> None:
        super().__init__()
        self._initializers = initializers
        self._streamed = streamed
        self._private = private  # red zones: kernels read this run's copy of a weight, never the session's
        self.fast: FastRun | None = None  # the run's C step runner: values made in C are read from it

    def __contains__(self, name: object) -> bool:
        return dict.__contains__(self, name) or (self.fast is not None and self.fast.has(name))

    def __missing__(self, name: str) -> Any:
        fast = self.fast
        if fast is not None:
            made = fast.materialize(name)
            if made is not None:
                self[name] = made
                return made
        if name in self._streamed:
            return None
        tensor = self._initializers.get(name)
        if tensor is None:
            raise KeyError(name)
        array = tensor.numpy()
        self[name] = array = np.array(array) if self._private else array
        return array
