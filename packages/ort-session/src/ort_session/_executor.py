"""The run loop: nodes in planned order; outputs placed by a Layout (planned offsets, a traced
pattern, or fresh arrays), workspace served from the plan or counted scratch."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import attrs
import numpy as np

from ort_graph import Graph, Node

from ._errors import KernelRunError, SessionError


@attrs.define
class RunStats:
    """What one run did with memory. `allocations` counts the runtime's own allocation calls: device
    buffers allocated for the run, outputs not placed in a planned block, scratch fallbacks. Numpy
    temporaries inside a CPU kernel are the kernel's business and not counted."""

    allocations: int = 0
    workspace_from_plan: int = 0
    scratch_fallbacks: int = 0
    scratch_bytes: int = 0
    nodes_run: int = 0
    planned_values: int = 0
    layout: str = ""


class Kernel(Protocol):
    def run(self, inputs: list[Any], workspace: Callable[[int, int], np.ndarray | None]) -> list[Any]: ...


class Layout(Protocol):
    """Where a run's values and workspace live."""

    name: str

    def hold(self, stats: RunStats) -> contextlib.AbstractContextManager[Any]: ...

    def place(self, step: int, name: str, arr: Any) -> Any | None:
        """The array at its planned place (copied there), or None when this value is not planned."""

    def release(self, step: int, name: str) -> None: ...

    def workspace(self, node: Node, slot_id: int, nbytes: int) -> np.ndarray | None: ...

    def before_step(self, step: int) -> None: ...

    def after_step(self, step: int, node: Node) -> None: ...


class FreshArrays:
    """No plan: every output is its own allocation (and counted as one)."""

    name = "unplanned"

    @contextlib.contextmanager
    def hold(self, stats: RunStats) -> Iterator[None]:
        yield

    def place(self, step: int, name: str, arr: Any) -> Any | None:
        return None

    def release(self, step: int, name: str) -> None:
        return None

    def workspace(self, node: Node, slot_id: int, nbytes: int) -> np.ndarray | None:
        return None

    def before_step(self, step: int) -> None:
        return None

    def after_step(self, step: int, node: Node) -> None:
        return None


def copy_into(block: np.ndarray, arr: np.ndarray) -> np.ndarray:
    """View `block` (uint8) as `arr`'s dtype and shape, and copy `arr` there unless it already is."""
    view = block[: arr.nbytes].view(arr.dtype).reshape(arr.shape)
    if arr.nbytes and view.__array_interface__["data"][0] != arr.__array_interface__["data"][0]:
        np.copyto(view, arr)
    return view


@attrs.define(eq=False)
class Executor:
    graph: Graph
    order: Sequence[Node]
    kernels: Mapping[int, Kernel]  # node index -> kernel
    last_stats: RunStats = attrs.field(factory=RunStats)
    _release: dict[int, list[str]] = attrs.field(factory=dict, alias="release")

    def __attrs_post_init__(self) -> None:
        last_use: dict[str, int] = {}
        for step, node in enumerate(self.order):
            for name in list(node.inputs) + node.implicit_inputs():
                if name:
                    last_use[name] = step
        keep = set(self.graph.outputs) | set(self.graph.initializers)
        for name, step in last_use.items():
            if name not in keep:
                self._release.setdefault(step, []).append(name)

    def run(self, feeds: Mapping[str, Any], outputs: Sequence[str], layout: Layout | None = None) -> list[Any]:
        layout = layout or FreshArrays()
        stats = RunStats(layout=layout.name)
        with layout.hold(stats):
            values: dict[str, Any] = {name: t.numpy() for name, t in self.graph.initializers.items()}
            for name, arr in feeds.items():
                placed = layout.place(-1, name, arr)
                values[name] = arr if placed is None else placed
            for step, node in enumerate(self.order):
                self._step(step, node, values, layout, stats)
            missing = [o for o in outputs if o not in values]
            if missing:
                raise SessionError(f"outputs {missing!r} were not produced; the model's outputs are {self.graph.outputs!r}")
            # planned blocks are reused by the next run: hand the caller its own copies
            result = [np.array(values[o]) if isinstance(values[o], np.ndarray) else values[o] for o in outputs]
        self.last_stats = stats
        return result

    def _step(self, step: int, node: Node, values: dict[str, Any], layout: Layout, stats: RunStats) -> None:
        kernel = self.kernels[node.index]
        args = [values[n] if n else None for n in node.inputs] + [values[n] for n in node.implicit_inputs()]

        def workspace(slot_id: int, nbytes: int) -> np.ndarray:
            block = layout.workspace(node, slot_id, nbytes)
            if block is not None:
                stats.workspace_from_plan += 1
                return block
            stats.scratch_fallbacks += 1
            stats.allocations += 1
            stats.scratch_bytes += nbytes
            return np.empty(nbytes, np.uint8)

        layout.before_step(step)
        try:
            results = kernel.run(args, workspace)
        except SessionError:
            raise
        except Exception as e:  # a kernel bug or a C status: never lose the node's identity
            raise KernelRunError(f"node {node.name!r} ({node.qualified_op}) on {node.ep or 'CPUExecutionProvider'} "
                                 f"failed: {type(e).__name__}: {e}") from e
        for name, arr in zip(node.outputs, results):
            if not name:
                continue
            placed = layout.place(step, name, arr)
            if placed is None:
                stats.allocations += 1
                values[name] = arr
            else:
                stats.planned_values += 1
                values[name] = placed
        layout.after_step(step, node)
        for name in self._release.get(step, ()):
            if values.pop(name, None) is not None:
                layout.release(step, name)
        stats.nodes_run += 1
