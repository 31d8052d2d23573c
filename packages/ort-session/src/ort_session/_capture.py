"""Device graph capture for a session (003's Capture surface): `session.enable_graph_capture=1`.

A captured graph replays fixed work at fixed addresses, so a session captures only what can hold:
- pre-allocated execution buffers (every value and workspace slot at a fixed address): else refused;
- the captured region is the span of device nodes between the boundary copies that bring the inputs in
  and take the outputs out (those run every time, outside the graph); every node inside it runs on one
  provider with a Capture surface (`ort_abi.CaptureCapable`). A host node, a copy to or from the host, or
  a second device inside the span is refused at initialization, naming the node;
- the first run captures (`begin_capture` .. `end_capture`; its work runs once), later runs replay. A run
  whose feeds have other shapes than the captured ones is refused (a graph cannot change shapes); work a
  replay cannot repeat inside the region (a kernel's host copy or allocation) fails the capture at the
  first run, naming the node, and the capture is aborted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

import ort_abi
from ort_graph import Node

from ._errors import CaptureRefusedError

__all__ = ["GraphCapture", "plan_capture"]

HOST_COPIES = ("MemcpyFromHost", "MemcpyToHost")
FIX = "disable session.enable_graph_capture, or"


def _refuse(reason: str, detail: str, fix: str, node: str = "") -> CaptureRefusedError:
    return CaptureRefusedError(f"session.enable_graph_capture: the device graph cannot be captured: {detail}; "
                               f"{FIX} {fix}", reason=reason, node=node)


def plan_capture(order: Sequence[Node], providers: Sequence[Any], pre_allocated: bool) -> GraphCapture:
    """The captured region and its provider, or CaptureRefusedError with the reason (at initialization)."""
    if not pre_allocated:
        raise _refuse("no pre-allocated buffers", "the session has no pre-allocated execution buffers, so values "
                      "and workspace have no fixed addresses for a graph to replay",
                      "set session.pre_allocate_execution_buffers=1 (static shapes)")
    by_name = {p.name: p for p in providers}
    host = {p.name for p in providers if getattr(p, "allocator", None) is None}
    device_steps = [k for k, n in enumerate(order) if n.ep not in host and n.op_type not in HOST_COPIES]
    if not device_steps:
        raise _refuse("no device nodes", "no node runs on a device with its own memory",
                      "place nodes on a device provider (CUDAExecutionProvider, SimulatedGPUExecutionProvider)")
    region = range(device_steps[0], device_steps[-1] + 1)
    ep = order[region.start].ep
    for step in region:
        node = order[step]
        if node.op_type in HOST_COPIES:
            raise _refuse("a host copy", f"node {node.name!r} ({node.op_type}) copies between the host and the "
                          f"device inside the captured region (steps {region.start}..{region.stop - 1})",
                          "place the nodes around it on the device too", node.name)
        if node.ep in host:
            raise _refuse("a host node", f"node {node.name!r} ({node.qualified_op}) runs on {node.ep} inside the "
                          "captured region", "place it on the device too (a kernel for it on that provider)",
                          node.name)
        if node.ep != ep:
            raise _refuse("two devices", f"node {node.name!r} runs on {node.ep}, others in the region on {ep}",
                          "place the region on one device", node.name)
    why = ort_abi.capture_refusal(by_name[ep])
    if why is not None:
        raise _refuse("provider cannot capture", why, "place the region on a provider that can capture")
    return GraphCapture(by_name[ep], region)


class GraphCapture:
    """One session's capture: the region, its provider, and once captured, the graph and the feed shapes."""

    def __init__(self, provider: Any, region: range) -> None:
        self.provider, self.region = provider, region
        self.graph: ort_abi.CapturedGraph | None = None
        self.shapes: dict[str, tuple[int, ...]] | None = None
        self.saved: dict[str, Any] = {}  # values the region made that later steps (or outputs) read
        self.capturing = False

    @property
    def replaying(self) -> bool:
        return self.graph is not None

    def check_feeds(self, feeds: Mapping[str, Any]) -> None:
        """Before a replay: the feeds must have the shapes the graph was captured with."""
        if self.shapes is None:
            return
        for name, shape in self.shapes.items():
            got = tuple(np.shape(feeds[name])) if name in feeds else None
            if got != shape:
                raise _refuse("a changed input shape", f"input {name!r} has shape {got!r}, but the graph was "
                              f"captured for {shape!r} (a captured graph replays fixed shapes)",
                              "feed the captured shapes (one session per shape)")

    def begin(self, feeds: Mapping[str, Any]) -> None:
        self.provider.begin_capture()
        self.capturing = True
        self.shapes = {n: tuple(np.shape(a)) for n, a in feeds.items()}

    def end(self, values: Mapping[str, Any], order: Sequence[Node]) -> None:
        self.graph = self.provider.end_capture()
        self.capturing = False
        made = {o for step in self.region for o in order[step].outputs if o}
        self.saved = {n: v for n, v in values.items() if n in made}

    def abort(self, error: BaseException, node: Node) -> CaptureRefusedError | None:
        """Drop a capture that failed at `node`; the refusal to raise when the failure was the capture's own
        (a CaptureError anywhere in the chain of causes), None for any other error (raised as it is)."""
        self.capturing = False
        self.shapes = None
        self.provider.abort_capture()
        cause: BaseException | None = error
        while cause is not None and not isinstance(cause, ort_abi.CaptureError):
            cause = cause.__cause__ or cause.__context__
        if cause is None:
            return None
        return _refuse(cause.reason, f"node {node.name!r} ({node.qualified_op}) on {node.ep}: {cause}",
                       "keep host work out of the region", node.name)

    def replay(self, values: dict[str, Any]) -> None:
        self.graph.replay()  # type: ignore[union-attr]
        values.update(self.saved)

    def release(self) -> None:
        if self.graph is not None:
            self.graph.release()
            self.graph = None
