"""Weight streaming, run: each streamed layer's weights are copied from host memory (external data stays
memory-mapped: read from the file during the copy) into its slot (layer j uses slot j % 2) on a copy
stream; the compute stream waits on a layer's copy event before its first node, and the copy into a slot
waits on the event recorded after the last node of the layer that used it before. The next layer's copy
is issued when the current streamed layer starts, so it is in flight while the current layer computes.

The slots are run-long blocks of the device's memory plan (`StreamingPlan.slot_keys`): each run resolves
their views from its layout (the pre-allocated buffers, or the run's own buffer), like workspace slots.

Every slot access goes through `ort_abi.OrderGuard`: a node reading a slot whose copy is not ordered
before it, or a copy overwriting a slot a node may still read, is a `StreamOrderError`."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

import ort_abi
from ort_graph import Graph, Node, to_numpy_dtype

from ._errors import SessionBusyError, SessionError

__all__ = ["WeightStreamer"]


class WeightStreamer:
    """The executor's hook for streamed layers: `hold` (one run), `before_node`, `after_node`. The slots are
    shared by every run of the session, so one run streams at a time: a concurrent run is refused."""

    def __init__(self, graph: Graph, order: Sequence[Node], plan: Any) -> None:
        self.graph, self.plan = graph, plan
        where = {name: (j, offset, nbytes) for j, layer in enumerate(plan.layers)
                 for name, offset, nbytes in layer.weights}
        self.where = where
        self.tensors: dict[str, ort_abi.DeviceTensor] = {}
        self.reads: dict[int, list[tuple[int, int, str]]] = {}
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        for step, node in enumerate(order):
            for position, name in enumerate(list(node.inputs) + node.implicit_inputs()):
                if name in where:
                    j = where[name][0]
                    self.reads.setdefault(node.index, []).append((position, j, name))
                    first.setdefault(j, step)
                    last[j] = step
        for j in range(1, len(plan.layers)):
            if j in first and j - 1 in last and first[j] <= last[j - 1]:
                raise SessionError(
                    f"streamed layers {plan.layers[j - 1].layer} and {plan.layers[j].layer} interleave in the execution "
                    f"order (steps {first[j]}..{last[j]} and {first[j - 1]}..{last[j - 1]}), so their slots cannot be "
                    "double-buffered; set session.weight_streaming to 'off' for this model")
        self.start_at = {step: j for j, step in first.items()}
        self.end_at = {step: j for j, step in last.items()}
        self.copies = self.bytes = 0
        self._lock = threading.Lock()

    def resolve(self, layout: Any) -> None:
        """Each streamed weight's tensor: a view of its slot's planned block in this run's buffer."""
        run_block = getattr(layout, "run_block", None)
        if run_block is None:
            raise SessionError(
                f"this run's layout {getattr(layout, 'name', layout)!r} has no planned weight-streaming slots (they "
                "are blocks of the static plan); run with the planned input shapes, or set "
                "session.weight_streaming='off'")
        slots = [run_block(key) for key in self.plan.slot_keys]
        for name, (j, offset, nbytes) in self.where.items():
            init = self.graph.initializers[name]
            dtype = np.dtype(to_numpy_dtype(init.dtype))
            view = slots[j % self.plan.slots].view(offset, nbytes)
            self.tensors[name] = ort_abi.DeviceTensor(view, tuple(init.dims), dtype)

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """The slots for one run, taken before the run's buffers are (`begin_run` then resolves their views);
        a concurrent second run is refused at once."""
        if not self._lock.acquire(blocking=False):
            raise SessionBusyError("a run is already streaming weights through this session's device slots; "
                                   "streamed layers allow one run at a time: wait for it to finish, or use one "
                                   "session per thread (or session.weight_streaming='off')")
        try:
            yield
        finally:
            self.tensors = {}
            self._lock.release()

    def begin_run(self, layout: Any) -> None:
        """The slots' views in this run's buffers, fresh streams and guard; the first streamed layer's copy is
        issued at once."""
        self.resolve(layout)
        self.compute, self.copy = ort_abi.Stream("compute"), ort_abi.Stream("copy")
        self.guard = ort_abi.OrderGuard()
        self.copied: dict[int, ort_abi.Event] = {}
        self.done: dict[int, ort_abi.Event] = {}
        self.copies = self.bytes = 0
        if self.plan.layers and self.start_at:
            self._issue(0)

    def _slot_free(self, j: int) -> None:
        """The copy into layer j's slot waits for the layer that used the slot before (j - slots)."""
        previous = self.done.get(j - self.plan.slots)
        if previous is not None:
            self.copy.wait(previous)

    def _copied(self, j: int) -> None:
        """Layer j's nodes wait for its copy."""
        self.compute.wait(self.copied[j])

    def _issue(self, j: int) -> None:
        layer = self.plan.layers[j]
        self._slot_free(j)
        region = f"slot {j % self.plan.slots}"
        for name, _offset, nbytes in layer.weights:
            src = np.ascontiguousarray(self.graph.initializers[name].numpy()).reshape(-1).view(np.uint8)
            ort_abi.copy_host_to_device_async(src, self.tensors[name].buffer, self.copy, self.guard, region,
                                              f"the copy of {name!r} (layer {layer.layer})")
            self.copies += 1
            self.bytes += nbytes
        self.copied[j] = self.copy.record()

    def before_node(self, step: int, node: Node, args: list[Any]) -> None:
        j = self.start_at.get(step)
        if j is not None:
            self._copied(j)
            if j + 1 < len(self.plan.layers):
                self._issue(j + 1)  # in flight while layer j computes
        for position, k, name in self.reads.get(node.index, ()):
            self.guard.read(f"slot {k % self.plan.slots}", self.compute, f"node {node.name!r}")
            args[position] = self.tensors[name]

    def after_node(self, step: int) -> None:
        j = self.end_at.get(step)
        if j is not None:
            self.done[j] = self.compute.record()

