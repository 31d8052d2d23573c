"""CudaExecutionProvider: identity, honest claims, device properties, registration, allocator."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from ort_abi import (
    Declined,
    EpIdentity,
    KernelContext,
    KernelDefBuilder,
    KernelEntry,
    KernelInfo,
    KernelRegistry,
    Supported,
)
from ort_partition import DeviceProfile, get_profile

from ._checked import MAX_DIM
from ._compile import KERNEL_SOURCES, CompiledKernel, KernelCache, default_cache
from ._device import NO_DEVICE_REMEDY, DeviceInfo, discover
from ._errors import DeviceUnavailableError
from ._kernel import CudaKernel, make_estimate_func
from ._ops import OP_SPECS, NodeFacts, OpSpec, Rejection, check_node, find_spec
from ._runtime import CudaRuntime, DeviceArray
from ._workspace import estimate_bytes, workspace_bytes

__all__ = ["CudaExecutionProvider", "EP_NAME"]

EP_NAME = "CUDAExecutionProvider"


class CudaExecutionProvider:
    """The CUDA EP. With a device, it claims and runs; with only a ``profile`` (a name such as
    ``'h100'`` or a DeviceProfile) it claims and estimates for that GPU but cannot run; with
    neither, it declines every node, with the reason found at construction.

    ``shapes_are_maxima``: graph shapes are upper bounds (from max-shape overrides), so Level-1
    estimates take the envelope over every smaller batch/sequence. ``dim_ranges``: inclusive
    ranges for symbolic dims (``{'past_sequence': (0, 4096)}``).
    """

    pinned_host_staging = True  # transfers() stages host-to-device copies in pinned host memory

    def __init__(self, device_id: int = 0, profile: str | DeviceProfile | None = None, *,
                 cache: KernelCache | None = None, shapes_are_maxima: bool = False,
                 dim_ranges: Mapping[str, tuple[int, int]] | None = None) -> None:
        self.identity = EpIdentity(EP_NAME, "cuda", device_id)
        self.device: DeviceInfo | None = None
        self.unavailable_reason: str | None = None
        try:
            self.device = discover(device_id)
        except DeviceUnavailableError as e:
            self.unavailable_reason = str(e)
        self.profile: DeviceProfile | None = get_profile(profile) if isinstance(profile, str) else profile
        if self.profile is None and self.device is not None:
            self.profile = self.device.profile
        self.cache = cache or default_cache()
        self.shapes_are_maxima = shapes_are_maxima
        self.dim_ranges = dict(dim_ranges or {})
        self._runtime: CudaRuntime | None = None

    # -- identity and properties ------------------------------------------------------------------
    @property
    def name(self) -> str:
        return EP_NAME

    @property
    def device_id(self) -> int:
        return self.identity.device_id

    @property
    def can_run(self) -> bool:
        return self.device is not None

    @property
    def device_properties(self) -> dict[str, int]:
        """What estimate functions read through the host API (empty without a device or profile)."""
        p = self.profile
        if p is None:
            return {}
        return {"multi_processor_count": p.sm_count, "total_memory": p.memory_bytes,
                "compute_capability_major": p.compute_capability[0], "compute_capability_minor": p.compute_capability[1],
                "memory_bandwidth": p.memory_bandwidth, "shared_memory_per_block_optin": p.shared_memory_per_block_optin}

    @property
    def memory_bytes(self) -> int | None:
        """What a share budget (`cuda:90%`) is a share of: the device's free memory (cuMemGetInfo) when
        one is present, the profile's total when planning for one; None with neither."""
        if self.device is not None:
            free, _total = self.runtime.memory_info()
            if free is not None:
                return free
        return self.profile.memory_bytes if self.profile is not None else None

    def require_profile(self) -> DeviceProfile:
        if self.profile is None:
            raise DeviceUnavailableError(f"no CUDA driver/device: {self.unavailable_reason}; {NO_DEVICE_REMEDY}")
        return self.profile

    def profile_for(self, api: Any, ep_handle: Any) -> DeviceProfile | None:
        """The profile an estimate uses: this EP's, with the SM count the handle reports."""
        base = self.profile
        try:
            sms = int(api.ep_device_property(ep_handle, "multi_processor_count"))
        except Exception:
            return base
        if base is None:
            return None
        return base if base.sm_count == sms else attrs.evolve(base, sm_count=sms)

    # -- claims -----------------------------------------------------------------------------------
    def claim(self, node: Any, opset: int | None = None) -> Supported | Declined:
        """Supported(cost) or a Declined that names node, op, opset, what was rejected and a remedy."""
        domain = "" if node.domain == "ai.onnx" else node.domain
        if opset is None:
            opset = 1 << 20
        if self.profile is None:
            return Declined(node.name, node.op_type, domain, opset, f"no CUDA driver/device: {self.unavailable_reason}",
                            EP_NAME, "a machine with an NVIDIA GPU and driver, or a device profile", NO_DEVICE_REMEDY)
        facts = NodeFacts.from_node(node)
        spec, rejection = check_node(facts, opset)
        if rejection is not None:
            return Declined(node.name, node.op_type, domain, opset, f"{rejection.aspect}: {rejection.detail}", EP_NAME,
                            rejection.accepts, rejection.remedy)
        unsized = self._unsized(spec, facts)  # type: ignore[arg-type]
        if unsized is not None:
            return Declined(node.name, node.op_type, domain, opset, f"{unsized.aspect}: {unsized.detail}", EP_NAME,
                            unsized.accepts, unsized.remedy)
        graph = node.graph
        base = (graph.output_nbytes(node) or 0) + graph.initializer_nbytes(node) if graph is not None else 0
        ws = self._estimate(spec, facts)  # type: ignore[arg-type]
        return Supported(base + ws if ws is not None else base + base // 2)

    def _unsized(self, spec: OpSpec, facts: NodeFacts) -> Rejection | None:
        """A Rejection when every present input is static but the workspace recipe cannot size (so the
        kernel could not launch) the node: e.g. batch*heads*query length or MatMulNBits' M past 2**31-1."""
        if spec.recipe == "none":
            return None
        present = [(i, s) for i, s in enumerate(facts.shapes) if facts.present(i)]
        if not all(s is not None and all(isinstance(d, int) for d in s) for _i, s in present):
            return None  # symbolic: sized per run (envelope / scratch); malformed extents are _ops' to reject
        if workspace_bytes(spec.recipe, list(facts.shapes), facts.dtypes, facts.attrs,  # type: ignore[arg-type]
                           self.require_profile()) is not None:
            return None
        shapes = {facts.inputs[i]: s for i, s in present}
        return Rejection("shape", f"static input shapes {shapes!r} are out of range for the {spec.recipe} kernel",
                         "shapes whose extents, element counts and products the kernel indexes (batch*heads*query "
                         f"length for attention, M = prod(A[:-1]) for MatMulNBits) stay within {MAX_DIM!r}, and "
                         "byte sizes within int64",
                         "split the batch or sequence across smaller nodes, or leave this node to the CPU EP")

    def estimate_ranges(self, facts: NodeFacts) -> Mapping[str, tuple[int, int]]:
        return self.dim_ranges

    def _estimate(self, spec: OpSpec, facts: NodeFacts) -> int | None:
        profile = self.require_profile()
        shapes: list[tuple[object, ...] | None] = list(facts.shapes)
        if self.shapes_are_maxima and spec.recipe != "none":
            # every dim but the last (the hidden / K size) may be anything from 1 up to the graph's value
            names: dict[str, tuple[int, int]] = dict(self.dim_ranges)
            for i, s in enumerate(shapes):
                if s is None:
                    continue
                row = []
                for j, d in enumerate(s):
                    if isinstance(d, int) and j < len(s) - 1 and d > 1:
                        key = f"__max_{i}_{j}"
                        names[key] = (1, d)
                        row.append(key)
                    else:
                        row.append(d)
                shapes[i] = tuple(row)
            return estimate_bytes(spec.recipe, shapes, facts.dtypes, facts.attrs, profile, names, facts.present_inputs())
        return estimate_bytes(spec.recipe, shapes, facts.dtypes, facts.attrs, profile, self.dim_ranges,
                              facts.present_inputs())

    def memory_types(self, node: Any, opset: int | None = None) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(host inputs, host outputs) of the node's kernel: positions kept in host memory (shapes, axes,
        slice bounds; Shape's output), as ONNX Runtime's OrtMemTypeCPUInput / CPUOutput."""
        spec = find_spec(node.op_type, node.domain, 1 << 20 if opset is None else opset)
        return ((), ()) if spec is None else (spec.host_inputs, spec.host_outputs)

    def estimate(self, node: Any, opset: int | None = None) -> int | None:
        """Level-1 workspace estimate in bytes (None: unavailable, or the node is not supported)."""
        spec = find_spec(node.op_type, node.domain, 1 << 20 if opset is None else opset)
        return None if spec is None or self.profile is None else self._estimate(spec, NodeFacts.from_node(node))

    # -- registration -----------------------------------------------------------------------------
    def register(self, registry: KernelRegistry) -> list[KernelEntry]:
        """Add every kernel through ``add_kernel_v2`` with its Level-1 estimate function."""
        entries = []
        for spec in OP_SPECS:
            kdef = (KernelDefBuilder().op_type(spec.op_type).domain(spec.domain)
                    .since_version(spec.since, spec.until).ep(EP_NAME).build())
            entries.append(registry.add_kernel_v2(kdef, _create_kernel, (self, spec), make_estimate_func(self, spec)))
        return entries

    def create_kernel(self, node: Any, opset: int | None = None) -> CudaKernel:
        spec = find_spec(node.op_type, node.domain, 1 << 20 if opset is None else opset)
        if spec is None:
            raise DeviceUnavailableError(f"no CUDA kernel for {node.op_type!r} in domain {node.domain!r}")
        return _create_kernel((self, spec), KernelInfo.from_node(node, self))

    # -- device memory and running ----------------------------------------------------------------
    @property
    def runtime(self) -> CudaRuntime:
        if self.device is None:
            raise DeviceUnavailableError(
                f"no CUDA driver/device: {self.unavailable_reason}; this EP can plan for "
                f"{self.profile.display_name if self.profile else 'no device'} but cannot run; {NO_DEVICE_REMEDY}")
        if self._runtime is None:
            self._runtime = CudaRuntime(self.device, self.cache, self.identity)
        return self._runtime

    @property
    def allocator(self):
        """The ort_abi Allocator of this device (cuMemAlloc/cuMemFree, explicit copies)."""
        return self.runtime.allocator

    @property
    def mapped_allocator(self):
        """The optional mapped backing (003's Allocation surface): pinned host memory the device reads and
        writes in place (cuMemHostAlloc with CU_MEMHOSTALLOC_DEVICEMAP)."""
        return self.runtime.mapped_allocator

    def transfers(self) -> Any:
        """The asynchronous part of 003's Transfer surface: a copy stream (cuStreamCreate), cuMemcpyHtoDAsync,
        cuEventRecord / cuStreamWaitEvent between it and the kernels' stream, pinned staging (cuMemHostAlloc)."""
        return self.runtime.transfers

    def to_device(self, host: np.ndarray) -> DeviceArray:
        return self.runtime.to_device(host)

    def to_host(self, arr: DeviceArray) -> np.ndarray:
        return self.runtime.to_host(arr)

    def run_op(self, op_type: str, inputs: Sequence[np.ndarray | None], attributes: Mapping[str, Any] | None = None,
               *, domain: str = "", opset: int = 21, output_count: int = 1, workspace: Mapping[int, Any] | None = None,
               node_name: str = "node") -> tuple[list[np.ndarray], KernelContext]:
        """Run one op on host arrays (copied in and out explicitly); for tests and benchmarks."""
        spec = find_spec(op_type, domain, opset)
        if spec is None:
            raise DeviceUnavailableError(f"no CUDA kernel for {op_type!r} in domain {domain!r} at opset {opset}")
        info = KernelInfo(node_name, op_type, domain, dict(attributes or {}), len(inputs), output_count)
        kernel = CudaKernel(self, spec, info)
        ctx = KernelContext(list(inputs), output_count=output_count,
                            output_types=[np.float32] * output_count, workspace=workspace, node_name=node_name)
        kernel.compute(ctx)
        return [o for o in ctx.outputs], ctx  # type: ignore[misc]

    def compile_all(self, archs: Sequence[str] | None = None) -> list[CompiledKernel]:
        archs = list(archs or [self.require_profile().arch])
        return [self.cache.get(name, arch) for name in KERNEL_SOURCES for arch in archs]

    # -- capture (003): CUDA graphs through cuda-python ----------------------------------------------------
    def capture_unavailable(self) -> str | None:
        """Why this EP cannot capture (None: it can): it needs a device."""
        return None if self.can_run else f"no CUDA driver/device to capture on: {self.unavailable_reason}"

    def begin_capture(self) -> None:
        self.runtime.capture.begin()

    def end_capture(self) -> Any:
        """The captured CUDA graph (`CudaGraph`), instantiated and launched once."""
        return self.runtime.capture.end()

    def abort_capture(self) -> None:
        if self._runtime is not None:
            self._runtime.capture.abort()

    def close(self) -> None:
        if self._runtime is not None:
            self._runtime.close()
            self._runtime = None


def _create_kernel(state: tuple[CudaExecutionProvider, OpSpec], info: KernelInfo) -> CudaKernel:
    ep, spec = state
    ep.require_profile()
    if not ep.can_run:
        raise DeviceUnavailableError(
            f"node {info.node_name!r} ({spec.op_type}) cannot get a CUDA kernel: no CUDA driver/device: "
            f"{ep.unavailable_reason}; {NO_DEVICE_REMEDY}")
    return CudaKernel(ep, spec, info)


