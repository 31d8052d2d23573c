"""CUDA execution provider with NVRTC-compiled kernels and exact workspace recipes.

Kernels are ``.cu`` sources in this package compiled with NVRTC (no GPU needed to compile);
workspace recipes are pure functions of shapes, attributes and device properties, shared by
the Level-1 estimate, the Level-2 declaration and the runtime request.
"""

from ort_partition import PROFILES, DeviceProfile, get_profile, profile_names

from ._attention_recipe import (
    MAX_SPLITS,
    AttentionRecipe,
    attention_recipe,
    attention_workspace_envelope,
    get_num_splits_and_buffer_sizes,
    num_splits_heuristic,
)
from ._compile import KERNEL_SOURCES, CompiledKernel, KernelCache, KernelSource, compile_kernel, default_cache
from ._device import NO_DEVICE_REMEDY, DeviceInfo, discover
from ._ep import EP_NAME, CudaExecutionProvider
from ._errors import (
    CudaEpError,
    DeviceUnavailableError,
    KernelCompileError,
    KernelLaunchError,
    UnknownProfileError,
)
from ._gqa_recipe import gqa_fast_decode, gqa_head_size, gqa_recipe, gqa_split_plan, gqa_workspace_envelope
from ._kernel import CudaKernel, declared_slots
from ._launch import ScratchOnly, WorkspaceSource
from ._nbits_recipe import GEMV_MAX_M, MatMulNBitsRecipe, matmul_nbits_recipe, matmul_nbits_workspace_envelope
from ._ops import OP_SPECS, NodeFacts, OpSpec, Rejection, check_node, supported_ops
from ._runtime import CudaAllocator, CudaRuntime, DeviceArray, WorkspaceCounters
from ._workspace import SLOT_ID, estimate_bytes, workspace_bytes

__version__ = "0.2.0"

__all__ = [
    "AttentionRecipe", "CompiledKernel", "CudaAllocator", "CudaEpError", "CudaExecutionProvider", "CudaKernel",
    "CudaRuntime", "DeviceArray", "EP_NAME", "ScratchOnly", "WorkspaceCounters", "WorkspaceSource", "declared_slots", "DeviceInfo", "DeviceProfile", "DeviceUnavailableError",
    "GEMV_MAX_M", "KERNEL_SOURCES", "KernelCache", "KernelCompileError", "KernelLaunchError", "KernelSource",
    "MAX_SPLITS", "MatMulNBitsRecipe", "NO_DEVICE_REMEDY", "NodeFacts", "OP_SPECS", "OpSpec", "PROFILES", "Rejection",
    "SLOT_ID", "UnknownProfileError", "__version__", "attention_recipe", "attention_workspace_envelope", "check_node",
    "compile_kernel", "default_cache", "discover", "estimate_bytes", "get_num_splits_and_buffer_sizes", "get_profile",
    "gqa_fast_decode", "gqa_head_size", "gqa_recipe", "gqa_split_plan", "gqa_workspace_envelope", "matmul_nbits_recipe",
    "matmul_nbits_workspace_envelope", "num_splits_heuristic", "profile_names", "supported_ops", "workspace_bytes",
]
