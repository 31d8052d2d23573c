"""ort-abi: the C kernel ABI, its cffi bridge, the kernel registry, and the EP contract types.

Kernels of every language (in-tree Python, shared-source CUDA, third-party C libraries) are
registered through `KernelRegistry.add_kernel_v2` and reached through one host path:
`estimate_workspace` (Level 1), `declare_workspace` (Level 2), `infer_output_shapes` (the optional
output-shape callback, ABI v3) and `kernel.compute(KernelContext)`.
The pure-Python parts import without the compiled bridge; C features then raise
`CFeaturesUnavailableError`.
"""

from __future__ import annotations

import pathlib

from ._buffers import (
    Allocator,
    Device,
    DeviceBuffer,
    HostAllocator,
    NullDeviceAllocator,
    copy_device_to_device,
    copy_device_to_host,
    copy_host_to_device,
)
from ._capture import CaptureCapable, CapturedGraph, RecordedCalls, capture_refusal
from ._ckernel import check_compute
from ._context import ContextCounters, KernelContext, KernelInfo, OutputAllocator, numpy_output_allocator
from ._copy_kernel import CopyKernel
from ._ep import (
    Capability,
    ClosableProvider,
    Declined,
    EpGraphPass,
    EpIdentity,
    EpInfo,
    GraphPassProvider,
    RunScopedProvider,
    Supported,
    close_provider,
    provider_run_scope,
)
from ._errors import (
    AbiError,
    AbiVersionMismatchError,
    AllocationError,
    BorrowedFreeError,
    CaptureError,
    CFeaturesUnavailableError,
    CrossDeviceFreeError,
    CrossEpFreeError,
    DoubleFreeError,
    DuplicateKernelError,
    ForeignFreeError,
    HandleError,
    KernelDefError,
    KernelError,
    KernelLibraryError,
    LeakError,
    LibraryNotFoundError,
    MissingSymbolError,
    OwnershipError,
    RegistrationError,
    RegistrationFailedError,
    TransferError,
    UseAfterFreeError,
    WorkspaceDeclarationError,
)
from ._fast_steps import (
    STEP_DONE,
    STEP_FAILED,
    STEP_INCOMPLETE,
    STEP_NOT_STARTED,
    PlannedOutput,
    StepRun,
    StepSpec,
    StepTable,
    c_step_kernel,
    step_limits,
)
from ._ffi import c_available
from ._handles import live_handles
from ._hazards import HazardTracker, Mark, buffer_range
from ._hostapi import HOST_API, HostApi
from ._kerneldef import KernelDef, KernelDefBuilder
from ._library import KernelLibrary, load_kernel_library
from ._registry import KernelEntry, KernelRegistry, declare_workspace, estimate_workspace, release_kernel
from ._run_checks import RunChecks, check_growth, check_run, raised_by_run_checks, run_checks_scope
from ._shapefunc import (
    MAX_OUTPUT_RANK,
    InputTypeError,
    OutputMismatchError,
    OutputShape,
    check_input_types,
    has_onnx_schema,
    infer_output_shapes,
    output_shapes_hook,
    planned_outputs,
)
from ._status import ErrorCode, check, live_status_count, status_misuse
from ._streams import Event, OrderGuard, Stream, StreamOrderError, copy_host_to_device_async
from ._tensor import DeviceTensor, empty_tensor, tensor_from_host, tensor_to_host
from ._transfers import (
    DeviceTransfers,
    ImmediateTransfers,
    SimulatedTransfers,
    Timeline,
    TransferStreamProvider,
    transfers_for,
)
from ._workspace import MAX_SLOTS, InputState, WorkspaceInputShape, WorkspaceSlot, workspace_input_shapes

__version__ = "0.2.0"

ABI_VERSION = 4  # == ORT_KERNEL_ABI_VERSION in the header (a test checks they agree)
ABI_MIN_VERSION = 1
ABI_VERSION_WORKSPACE = 2
ABI_VERSION_OUTPUT_SHAPES = 3
ABI_VERSION_FLOAT_LISTS = 4
HEADER_NAME = "ort_kernel_abi.h"


def get_include() -> str:
    """The directory holding ort_kernel_abi.h, for `cc -I$(python -c 'import ort_abi; print(ort_abi.get_include())')`."""
    return str(pathlib.Path(__file__).resolve().parent / "include")


__all__ = [
    "Event", "OrderGuard", "Stream", "StreamOrderError", "copy_host_to_device_async",
    "DeviceTransfers", "HazardTracker", "ImmediateTransfers", "Mark", "SimulatedTransfers", "Timeline",
    "TransferStreamProvider", "buffer_range", "transfers_for",
    "ABI_MIN_VERSION", "ABI_VERSION", "ABI_VERSION_FLOAT_LISTS", "ABI_VERSION_OUTPUT_SHAPES", "ABI_VERSION_WORKSPACE", "HEADER_NAME", "HOST_API",
    "MAX_OUTPUT_RANK", "MAX_SLOTS", "InputTypeError", "OutputMismatchError", "OutputShape", "check_input_types",
    "has_onnx_schema", "infer_output_shapes", "output_shapes_hook", "planned_outputs",
    "AbiError", "AbiVersionMismatchError", "AllocationError", "Allocator", "BorrowedFreeError",
    "CFeaturesUnavailableError", "Capability", "CaptureCapable", "CaptureError", "CapturedGraph", "RecordedCalls",
    "capture_refusal", "ClosableProvider", "ContextCounters", "CopyKernel", "CrossDeviceFreeError", "CrossEpFreeError",
    "Declined", "Device", "EpGraphPass", "GraphPassProvider", "DeviceBuffer", "DeviceTensor", "DoubleFreeError", "DuplicateKernelError", "EpIdentity", "EpInfo",
    "ErrorCode", "ForeignFreeError", "HandleError", "HostAllocator", "HostApi", "InputState", "KernelContext",
    "KernelDef", "KernelDefBuilder", "KernelDefError", "KernelEntry", "KernelError", "KernelInfo",
    "KernelLibrary", "KernelLibraryError", "KernelRegistry", "LeakError", "LibraryNotFoundError", "MissingSymbolError",
    "NullDeviceAllocator", "OutputAllocator", "OwnershipError", "RegistrationError", "RegistrationFailedError",
    "RunChecks", "RunScopedProvider", "STEP_DONE", "STEP_FAILED", "STEP_INCOMPLETE", "STEP_NOT_STARTED", "PlannedOutput", "StepRun", "StepSpec",
    "StepTable", "c_step_kernel", "check_compute", "step_limits",
    "Supported", "TransferError", "UseAfterFreeError", "WorkspaceDeclarationError", "WorkspaceInputShape",
    "WorkspaceSlot", "__version__", "c_available", "check", "close_provider", "copy_device_to_device", "copy_device_to_host",
    "copy_host_to_device", "declare_workspace", "empty_tensor", "estimate_workspace", "get_include", "live_handles",
    "live_status_count", "load_kernel_library", "numpy_output_allocator", "provider_run_scope", "release_kernel", "status_misuse",
    "check_growth", "check_run", "raised_by_run_checks", "run_checks_scope",
    "tensor_from_host", "tensor_to_host", "workspace_input_shapes",
]
