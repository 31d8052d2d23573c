"""The CUDA execution provider as the session sees it (ort-cuda-ep is optional).

When ort-cuda-ep is not installed, or no CUDA driver/device is present, the provider declines every
node at initialization with the reason and a remedy — never later."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import ort_abi
from ort_graph import Graph, Node
from ort_partition import Declined, Supported, UnknownProfileError, get_profile

from ._errors import InvalidOptionError
from ._options import SessionOptions

NAME = "CUDAExecutionProvider"


class UnavailableCudaProvider:
    name = NAME
    device_type = "gpu"
    device_id = 0
    device = "cuda:0"

    def __init__(self, reason: str, remedy: str, memory_bytes: int | None = None) -> None:
        self.reason, self.remedy = reason, remedy
        self.memory_bytes = memory_bytes  # a device profile's memory: what `cuda:90%` shares even here

    def claim(self, node: Node) -> Declined:
        return Declined(ep=NAME, node=node.name, op=node.op_type, domain=node.domain,
                        rejected=self.reason, accepts="nodes on a machine with a CUDA device", remedy=self.remedy)

    def estimate(self, node: Node) -> int | None:
        return None

    can_run = False
    allocator = None

    def create_kernel(self, node: Node) -> Any:
        raise RuntimeError(f"{NAME} is unavailable ({self.reason}); node {node.name!r} should have been declined")


class CudaProvider:
    """Adapter from ort_cuda_ep's provider (claim(node, opset)) to the session's protocol."""

    name = NAME
    device_type = "gpu"

    def __init__(self, inner: Any, graph: Graph, opsets: Mapping[str, int]) -> None:
        self.inner, self.graph, self.opsets = inner, graph, dict(opsets)
        self.device_id = getattr(inner, "device_id", 0)
        self.device = f"cuda:{self.device_id}"

    def _opset(self, node: Node) -> int:
        return self.opsets.get("" if node.domain == "ai.onnx" else node.domain, 1)

    def claim(self, node: Node) -> Any:
        claim = self.inner.claim(node, self._opset(node))
        if getattr(claim, "supported", False):
            return Supported(self.estimate(node))
        return claim

    def estimate(self, node: Node) -> int | None:
        return self.inner.estimate(node, self._opset(node))

    def memory_types(self, node: Node) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(host inputs, host outputs) of the node's kernel (see _device_memory)."""
        types = getattr(self.inner, "memory_types", None)
        return ((), ()) if types is None else types(node, self._opset(node))

    @property
    def can_run(self) -> bool:
        return bool(getattr(self.inner, "can_run", True))

    @property
    def memory_bytes(self) -> int | None:
        """Free device memory (or the device profile's total when planning): what `cuda:90%` shares."""
        return getattr(self.inner, "memory_bytes", None)

    @property
    def allocator(self) -> Any:
        """The device's ort_abi Allocator: values, weights and workspace of CUDA nodes live there.
        None for a plan-only provider (a device profile without the device)."""
        return self.inner.allocator if self.can_run else None

    # the Capture surface (CUDA graphs), forwarded
    def capture_unavailable(self) -> str | None:
        why = getattr(self.inner, "capture_unavailable", None)
        if why is None:
            return f"this ort-cuda-ep build has no Capture surface ({type(self.inner).__name__})"
        return why()

    def begin_capture(self) -> None:
        self.inner.begin_capture()

    def end_capture(self) -> Any:
        return self.inner.end_capture()

    def abort_capture(self) -> None:
        self.inner.abort_capture()

    def close(self) -> None:
        """Release the device state the provider holds (loaded modules, its context's allocations)."""
        close = getattr(self.inner, "close", None)
        if close is not None:
            close()

    def create_kernel(self, node: Node) -> Any:
        if node.op_type in ("MemcpyFromHost", "MemcpyToHost", "MemcpyDeviceToDevice"):
            return ort_abi.CopyKernel()  # explicit host <-> device transfers into the planned blocks
        if not self.can_run:
            return PlanOnlyKernel(self.inner, node, self._opset(node))
        return self.inner.create_kernel(node, self._opset(node))


class PlanOnlyKernel:
    """A CUDA node planned for a device profile on a machine without the device: it declares its
    workspace (the same recipe as the real kernel) but cannot compute."""

    def __init__(self, ep: Any, node: Node, opset: int) -> None:
        import ort_cuda_ep

        domain = "" if node.domain == "ai.onnx" else node.domain
        self.ep, self.node = ep, node
        self.spec = next(s for s in ort_cuda_ep.OP_SPECS if s.op_type == node.op_type and s.domain == domain
                         and s.since <= opset and (s.until is None or opset <= s.until))

    def declare_workspace(self, shapes: list[Any]) -> Any:
        import ort_cuda_ep

        attrs_ = {name: a.value for name, a in self.node.attributes.items()}
        return ort_cuda_ep.declared_slots(self.spec, shapes, attrs_, self.ep.require_profile())

    def compute(self, ctx: Any) -> None:
        raise RuntimeError(f"node {self.node.name!r} was planned for a CUDA device profile; there is no device to run it")


def _profile_memory(options: SessionOptions) -> int | None:
    """The device profile's memory (profiles live in ort-partition: no CUDA wheel needed); an unknown
    profile name is an error here, never a silent CPU plan."""
    if options.device_profile is None:
        return None
    try:
        return get_profile(options.device_profile).memory_bytes
    except UnknownProfileError as e:
        raise InvalidOptionError(f"option device_profile: {e}") from e


def cuda_provider(graph: Graph, opsets: Mapping[str, int], options: SessionOptions) -> Any:
    profile_memory = _profile_memory(options)
    try:
        import ort_cuda_ep
    except ImportError as e:
        planning = (f"; planning for device profile {options.device_profile!r} needs its kernel recipes"
                    if options.device_profile else "")
        return UnavailableCudaProvider(f"ort-cuda-ep is not installed ({e}){planning}", "pip install ort-session[cuda]",
                                       profile_memory)
    factory = getattr(ort_cuda_ep, "CudaExecutionProvider", None)
    if factory is None:
        return UnavailableCudaProvider("this ort-cuda-ep build has no CudaExecutionProvider",
                                       "upgrade ort-cuda-ep")
    try:
        device_id = int(options.provider_options.get(NAME, {}).get("device_id", "0"))  # checked in _ort_api
        inner = factory(device_id=device_id, profile=options.device_profile,
                        shapes_are_maxima=bool(options.max_shapes or options.get("session.max_shape_override")))
    except Exception as e:  # a bad profile name or a broken driver: a clear decline, never a crash later
        return UnavailableCudaProvider(f"CUDA provider could not start: {e}",
                                       "check --device-profile, or run on a machine with an NVIDIA GPU and driver")
    return CudaProvider(inner, graph, opsets)
