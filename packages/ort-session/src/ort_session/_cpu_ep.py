"""The CPU execution provider (numpy kernels) and a simulated accelerator that runs the same kernels
in its own budgeted host buffer, so CPU-only machines exercise every device path (tinygrad's null
device idea). Both claim honestly: a node is taken only if its kernel handles its op, opset, dtypes
and attributes; otherwise the decline says what was rejected, what is accepted and a remedy."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ort_graph import Graph, Node
from ort_partition import Declined, Supported

from .cpu import InputInfo, OpImpl, find
from .cpu._interp import opset_scope
from .cpu._registry import workspace_scope


class CpuKernel:
    """An OpImpl bound to one node; `run` gives it the session's workspace provider."""

    def __init__(self, impl: OpImpl, node: Node, opsets: Mapping[str, int]) -> None:
        self.impl, self.node, self.opsets = impl, node, opsets

    def run(self, inputs: list[Any], workspace: Callable[[int, int], np.ndarray | None]) -> list[Any]:
        with workspace_scope(workspace), opset_scope(self.opsets):
            return self.impl.compute(self.node, inputs)

    def declare_workspace(self, input_shapes: Sequence[tuple[int, ...] | None]) -> list[tuple[int, int]]:
        return self.impl.workspace_bytes(self.node, input_shapes)


MEMCPY_OPS = ("MemcpyFromHost", "MemcpyToHost", "MemcpyDeviceToDevice")


class CopyKernel:
    """A boundary copy between devices (both in host memory for the CPU and simulated providers)."""

    def run(self, inputs: list[Any], workspace: Callable[[int, int], np.ndarray | None]) -> list[Any]:
        return [np.array(inputs[0], copy=True)]


class CpuExecutionProvider:
    name = "CPUExecutionProvider"
    device_type = "cpu"
    device_id = 0
    device = "cpu"

    def __init__(self, graph: Graph, opsets: Mapping[str, int]) -> None:
        self.graph = graph
        self.opsets = {("" if d == "ai.onnx" else d): v for d, v in opsets.items()}

    def opset(self, node: Node) -> int:
        return self.opsets.get("" if node.domain == "ai.onnx" else node.domain, 1)

    def _inputs(self, node: Node) -> list[InputInfo]:
        infos = []
        for name in node.inputs:
            v = self.graph.values.get(name) if name else None
            infos.append(InputInfo(dtype=v.dtype if v else 0, shape=v.shape if v else None, present=bool(name)))
        return infos

    def _impl(self, node: Node) -> OpImpl | None:
        return find(node.op_type, node.domain, self.opset(node))

    def claim(self, node: Node) -> Supported | Declined:
        impl = self._impl(node)
        if impl is None:
            return Declined(ep=self.name, node=node.name, op=node.op_type, domain=node.domain, opset=self.opset(node),
                            rejected=f"op {node.qualified_op!r} at opset {self.opset(node)}",
                            accepts="the ops listed by `ortrun kernels`",
                            remedy="export the model with ops this provider implements, or load a kernel library for it")
        decline = impl.supports(node, self._inputs(node), self.opset(node))
        if decline is not None:
            return Declined(ep=self.name, node=node.name, op=node.op_type, domain=node.domain, opset=self.opset(node),
                            rejected=decline.rejected, accepts=decline.accepts, remedy=decline.remedy)
        return Supported(self.estimate(node))

    def input_shapes(self, node: Node) -> list[tuple[int, ...] | None]:
        shapes = []
        for name in node.inputs:
            v = self.graph.values.get(name) if name else None
            shapes.append(tuple(v.shape) if v is not None and v.shape is not None and all(isinstance(d, int) for d in v.shape) else None)
        return shapes

    def estimate(self, node: Node) -> int | None:
        """Level-1 workspace estimate from the node's (max-)resolved shapes; None if unknown."""
        impl = self._impl(node)
        if impl is None or type(impl).workspace_bytes is OpImpl.workspace_bytes:
            return 0 if impl is not None else None
        shapes = self.input_shapes(node)
        if any(s is None for s, name in zip(shapes, node.inputs) if name):
            return None
        return sum(b for _slot, b in impl.workspace_bytes(node, shapes))

    def create_kernel(self, node: Node) -> CpuKernel | CopyKernel:
        if node.op_type in MEMCPY_OPS:
            return CopyKernel()
        impl = self._impl(node)
        if impl is None:
            raise RuntimeError(f"{self.name} has no kernel for {node.qualified_op}; the node should have been declined")
        return CpuKernel(impl, node, self.opsets)


class SimulatedGpuExecutionProvider(CpuExecutionProvider):
    """Host memory standing in for a GPU: same kernels, its own device name, buffer and budget.
    Used to demonstrate and test device splits on machines without one; never faster than the CPU EP."""

    name = "SimulatedGPUExecutionProvider"
    device_type = "gpu"
    device = "simgpu"
