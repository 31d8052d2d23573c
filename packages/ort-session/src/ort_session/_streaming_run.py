"""Weight streaming, run: each streamed layer's weights are copied from host memory (external data stays
memory-mapped: read from the file during the copy) into its slot (layer j uses slot j % 2) by the device's
asynchronous transfer surface (`ort_abi.DeviceTransfers`): on a copy stream of their own, while the
compute stream runs the layer before. The compute stream waits on a layer's copy event before its first
node, and the copy into a slot waits on the event recorded after the last node of the layer that used it
before. The next layer's copy is issued when the current streamed layer starts, so it is in flight while
the current layer computes. Where the device has pinned host memory (CUDA), the weights go through one
pinned staging buffer per slot (the host writes it only after the copy that last read it completed).

The slots are run-long blocks of the device's memory plan (`StreamingPlan.slot_keys`): each run resolves
their views from its layout (the pre-allocated buffers, or the run's own buffer), like workspace slots.

Every slot access goes through `ort_abi.OrderGuard`: a node reading a slot whose copy is not ordered
before it, or a copy overwriting a slot a node may still read, is a `StreamOrderError`. The simulated GPU
and the emulating CUDA driver check the same by address range, with copies that complete late."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

import ort_abi
import ort_partition
from ort_graph import Graph, Node, to_numpy_dtype

from ._errors import SessionBusyError, SessionError

__all__ = ["WeightStreamer"]


class WeightStreamer:
    """The executor's hook for streamed layers: `hold` (one run), `before_node`, `after_node`. The slots are
    shared by every run of the session, so one run streams at a time: a concurrent run is refused."""

    def __init__(self, graph: Graph, order: Sequence[Node], plan: Any, transfers: Any = None) -> None:
        self.graph, self.plan = graph, plan
        self.transfers = transfers if transfers is not None else ort_abi.ImmediateTransfers()
        self.copy: ort_abi.Stream | None = None  # made on the first run
        self.staging: list[np.ndarray] = []  # pinned, one per slot (devices with pinned host memory)
        # measurement only (gpu_check.py's baseline): the compute stream waits on each copy as soon as it is
        # issued, so no copy overlaps a layer's compute; same results, the ordering rules still hold
        self.serialize_copies = False
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
        self.work_at = self._modelled_work(order, first)
        self.copies = self.bytes = 0
        self._lock = threading.Lock()

    def _modelled_work(self, order: Sequence[Node], first: dict[int, int]) -> dict[int, tuple[float, str]]:
        """Per decoder layer, at its first step (a streamed layer: its first step reading a slot, after the wait
        on its copy): the seconds the cost model gives its compute (on the device, or on the CPU), for a
        device that keeps a simulated timeline (`DeviceTransfers.work`)."""
        streamed = {layer.layer: j for j, layer in enumerate(self.plan.layers)}
        out: dict[int, tuple[float, str]] = {}
        seen: set[Any] = set()
        for step, node in enumerate(order):
            lid = ort_partition.node_group(node)
            if lid in self.plan.choice and lid not in seen:
                seen.add(lid)
                where = self.plan.choice[lid]
                t = self.plan.per_layer[lid]["cpu" if where == ort_partition.CPU else "resident"]
                out[first.get(streamed.get(lid, -1), step)] = (t, f"layer {lid} ({where})")
        return out

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
        """The slots' views in this run's buffers, a fresh guard, the copy stream (made on the first run) ordered
        after everything the previous run left on the compute stream; the first streamed layer's copy is issued
        at once."""
        self.resolve(layout)
        t = self.transfers
        t.begin_run()
        self.prepare()
        t.wait(self.copy, t.record(self.compute))  # the previous run's nodes no longer read the slots
        self.guard = ort_abi.OrderGuard()
        self.copied: dict[int, ort_abi.Event] = {}
        self.done: dict[int, ort_abi.Event] = {}
        self.copies = self.bytes = 0
        if self.plan.layers and self.start_at:
            self._issue(0)

    def prepare(self) -> None:
        """The copy stream and, where the device has pinned memory, one pinned staging buffer per slot; made
        once (the session does it at initialization, so a refusal of pinned memory fails there, not in a run)."""
        if self.copy is not None:
            return
        t = self.transfers
        self.compute = t.compute
        self.copy = t.stream("copy")
        if t.pinned:
            self.staging = [t.staging(self.plan.slot_bytes) for _ in range(self.plan.slots)]

    def end_run(self) -> None:
        """Every copy of the run has completed (also after a failed run) and its events are released."""
        self.transfers.end_run()

    def _slot_free(self, j: int) -> None:
        """The copy into layer j's slot waits for the layer that used the slot before (j - slots)."""
        previous = self.done.get(j - self.plan.slots)
        if previous is not None:
            self.transfers.wait(self.copy, previous)

    def _copied(self, j: int) -> None:
        """Layer j's nodes wait for its copy."""
        self.transfers.wait(self.compute, self.copied[j])

    def _staging_free(self, j: int) -> None:
        """The host writes layer j's weights into its slot's pinned staging buffer only after the copy that
        last read that buffer (layer j - slots) completed."""
        previous = self.copied.get(j - self.plan.slots)
        if previous is not None:
            self.transfers.host_wait(previous)

    def _issue(self, j: int) -> None:
        layer = self.plan.layers[j]
        self._slot_free(j)
        k = j % self.plan.slots
        if self.staging:
            self._staging_free(j)
        for name, offset, nbytes in layer.weights:
            src = self.graph.initializers[name].raw_bytes()  # the file mapping itself: no aligned host copy
            if self.staging:
                staged = self.staging[k][offset:offset + nbytes]
                staged[...] = src  # from the file mapping into pinned memory; the copy engine reads it there
                src = staged
            ort_abi.copy_host_to_device_async(src, self.tensors[name].buffer, self.copy, self.guard, f"slot {k}",
                                              f"the copy of {name!r} (layer {layer.layer})", self.transfers)
            self.copies += 1
            self.bytes += nbytes
        self.copied[j] = self.transfers.record(self.copy)
        if self.serialize_copies:
            self._copied(j)

    def before_node(self, step: int, node: Node, args: list[Any]) -> None:
        j = self.start_at.get(step)
        if j is not None:
            self._copied(j)
            if j + 1 < len(self.plan.layers):
                self._issue(j + 1)  # in flight while layer j computes
        work = self.work_at.get(step)
        if work is not None:
            self.transfers.work(self.compute, *work)
        for position, k, name in self.reads.get(node.index, ()):
            self.guard.read(f"slot {k % self.plan.slots}", self.compute, f"node {node.name!r}")
            args[position] = self.tensors[name]

    def after_node(self, step: int) -> None:
        j = self.end_at.get(step)
        if j is not None:
            self.done[j] = self.transfers.record(self.compute)

    @property
    def pinned_bytes(self) -> int:
        return sum(b.nbytes for b in self.staging)

    def timeline(self) -> dict[str, Any] | None:
        """The last run's simulated device time (a device that keeps one: the simulated GPU), else None."""
        timeline = getattr(self.transfers, "timeline", None)
        return timeline.to_dict() if timeline is not None else None

    def close(self) -> None:
        """The copy stream, its events and the pinned staging buffers go back to the device."""
        self.staging = []
        self.copy = None
        self.transfers.close()

