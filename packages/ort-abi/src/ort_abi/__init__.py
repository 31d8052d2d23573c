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
from typing import TYPE_CHECKING

from ort_graph._lazy import lazy_exports

__version__ = "0.2.0"

ABI_VERSION = 5  # == ORT_KERNEL_ABI_VERSION in the header (a test checks they agree)
ABI_MIN_VERSION = 1
ABI_VERSION_WORKSPACE = 2
ABI_VERSION_OUTPUT_SHAPES = 3
ABI_VERSION_FLOAT_LISTS = 4
ABI_VERSION_PREPACK = 5
ABI_PREPACK_ALIGNMENT = 64  # == ORT_PREPACK_ALIGNMENT
ABI_FLAG_RELEASES_PACKED_INPUTS = 1  # == ORT_KERNEL_FLAG_RELEASES_PACKED_INPUTS (OrtKernelImpl::flags)
HEADER_NAME = "ort_kernel_abi.h"


def get_include() -> str:
    """The directory holding ort_kernel_abi.h, for `cc -I$(python -c 'import ort_abi; print(ort_abi.get_include())')`."""
    return str(pathlib.Path(__file__).resolve().parent / "include")


# public names, each imported from its module on first use (`ort_graph._lazy`)
_WHERE = {
    "Allocator": "._buffers",
    "Device": "._buffers",
    "DeviceBuffer": "._buffers",
    "HostAllocator": "._buffers",
    "NullDeviceAllocator": "._buffers",
    "copy_device_to_device": "._buffers",
    "copy_device_to_host": "._buffers",
    "copy_host_to_device": "._buffers",
    "CaptureCapable": "._capture",
    "CapturedGraph": "._capture",
    "RecordedCalls": "._capture",
    "capture_refusal": "._capture",
    "check_compute": "._ckernel",
    "ContextCounters": "._context",
    "KernelContext": "._context",
    "KernelInfo": "._context",
    "OutputAllocator": "._context",
    "numpy_output_allocator": "._context",
    "CopyKernel": "._copy_kernel",
    "Capability": "._ep",
    "ClosableProvider": "._ep",
    "Declined": "._ep",
    "EpGraphPass": "._ep",
    "EpIdentity": "._ep",
    "EpInfo": "._ep",
    "GraphPassProvider": "._ep",
    "RunScopedProvider": "._ep",
    "Supported": "._ep",
    "close_provider": "._ep",
    "provider_run_scope": "._ep",
    "AbiError": "._errors",
    "AbiVersionMismatchError": "._errors",
    "AllocationError": "._errors",
    "BorrowedFreeError": "._errors",
    "CaptureError": "._errors",
    "CFeaturesUnavailableError": "._errors",
    "CrossDeviceFreeError": "._errors",
    "CrossEpFreeError": "._errors",
    "DoubleFreeError": "._errors",
    "DuplicateKernelError": "._errors",
    "ForeignFreeError": "._errors",
    "HandleError": "._errors",
    "KernelDefError": "._errors",
    "KernelError": "._errors",
    "KernelLibraryError": "._errors",
    "LeakError": "._errors",
    "LibraryNotFoundError": "._errors",
    "MissingSymbolError": "._errors",
    "OwnershipError": "._errors",
    "RegistrationError": "._errors",
    "RegistrationFailedError": "._errors",
    "TransferError": "._errors",
    "UseAfterFreeError": "._errors",
    "WorkspaceDeclarationError": "._errors",
    "CONTROL_IF": "._fast_control",
    "CONTROL_KERNEL": "._fast_control",
    "CONTROL_LOOP": "._fast_control",
    "CONTROL_SCAN": "._fast_control",
    "ControlSpec": "._fast_control",
    "LOOP_STATE_BYTES": "._fast_control",
    "STEP_DONE": "._fast_steps",
    "STEP_FAILED": "._fast_steps",
    "STEP_INCOMPLETE": "._fast_steps",
    "STEP_NOT_STARTED": "._fast_steps",
    "PlannedOutput": "._fast_steps",
    "StepRun": "._fast_steps",
    "StepSpec": "._fast_steps",
    "StepTable": "._fast_steps",
    "c_step_kernel": "._fast_steps",
    "step_limits": "._fast_steps",
    "c_available": "._ffi",
    "live_handles": "._handles",
    "HazardTracker": "._hazards",
    "Mark": "._hazards",
    "buffer_range": "._hazards",
    "HOST_API": "._hostapi",
    "HostApi": "._hostapi",
    "KernelDef": "._kerneldef",
    "KernelDefBuilder": "._kerneldef",
    "KernelLibrary": "._library",
    "load_kernel_library": "._library",
    "PrePackError": "._prepack",
    "declare_prepacked": "._prepack",
    "prepack_weight": "._prepack",
    "KernelEntry": "._registry",
    "KernelRegistry": "._registry",
    "declare_workspace": "._registry",
    "estimate_workspace": "._registry",
    "release_kernel": "._registry",
    "RunChecks": "._run_checks",
    "check_growth": "._run_checks",
    "checks_every_iteration": "._run_checks",
    "check_run": "._run_checks",
    "raised_by_run_checks": "._run_checks",
    "run_checks_scope": "._run_checks",
    "MAX_OUTPUT_RANK": "._shapefunc",
    "InputTypeError": "._shapefunc",
    "OutputMismatchError": "._shapefunc",
    "OutputShape": "._shapefunc",
    "check_input_types": "._shapefunc",
    "has_onnx_schema": "._shapefunc",
    "infer_output_shapes": "._shapefunc",
    "output_shapes_hook": "._shapefunc",
    "planned_outputs": "._shapefunc",
    "ErrorCode": "._status",
    "check": "._status",
    "live_status_count": "._status",
    "status_misuse": "._status",
    "Event": "._streams",
    "OrderGuard": "._streams",
    "Stream": "._streams",
    "StreamOrderError": "._streams",
    "copy_host_to_device_async": "._streams",
    "DeviceTensor": "._tensor",
    "empty_tensor": "._tensor",
    "tensor_from_host": "._tensor",
    "tensor_to_host": "._tensor",
    "DeviceTransfers": "._transfers",
    "ImmediateTransfers": "._transfers",
    "SimulatedTransfers": "._transfers",
    "Timeline": "._transfers",
    "TransferStreamProvider": "._transfers",
    "transfers_for": "._transfers",
    "MAX_SLOTS": "._workspace",
    "InputState": "._workspace",
    "WorkspaceInputShape": "._workspace",
    "WorkspaceSlot": "._workspace",
    "workspace_input_shapes": "._workspace",
    "node_query_key": "._workspace",
}
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)

__all__ = [
    "Event", "OrderGuard", "Stream", "StreamOrderError", "copy_host_to_device_async",
    "DeviceTransfers", "HazardTracker", "ImmediateTransfers", "Mark", "SimulatedTransfers", "Timeline",
    "TransferStreamProvider", "buffer_range", "transfers_for",
    "ABI_FLAG_RELEASES_PACKED_INPUTS", "ABI_MIN_VERSION", "ABI_PREPACK_ALIGNMENT", "ABI_VERSION", "ABI_VERSION_FLOAT_LISTS", "ABI_VERSION_OUTPUT_SHAPES", "ABI_VERSION_PREPACK", "ABI_VERSION_WORKSPACE", "HEADER_NAME", "HOST_API",
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
    "CONTROL_IF", "CONTROL_KERNEL", "CONTROL_LOOP", "CONTROL_SCAN", "ControlSpec", "LOOP_STATE_BYTES",
    "RunChecks", "RunScopedProvider", "STEP_DONE", "STEP_FAILED", "STEP_INCOMPLETE", "STEP_NOT_STARTED", "PlannedOutput", "StepRun", "StepSpec",
    "StepTable", "c_step_kernel", "check_compute", "step_limits",
    "Supported", "TransferError", "UseAfterFreeError", "WorkspaceDeclarationError", "WorkspaceInputShape",
    "WorkspaceSlot", "__version__", "c_available", "check", "close_provider", "copy_device_to_device", "copy_device_to_host",
    "copy_host_to_device", "declare_prepacked", "declare_workspace", "PrePackError", "prepack_weight", "empty_tensor", "estimate_workspace", "get_include", "live_handles",
    "live_status_count", "load_kernel_library", "numpy_output_allocator", "provider_run_scope", "release_kernel", "status_misuse",
    "check_growth", "check_run", "checks_every_iteration", "raised_by_run_checks", "run_checks_scope",
    "tensor_from_host", "tensor_to_host", "workspace_input_shapes", "node_query_key",
]


if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly
    from ._buffers import (  # noqa: F401
        Allocator,
        Device,
        DeviceBuffer,
        HostAllocator,
        NullDeviceAllocator,
        copy_device_to_device,
        copy_device_to_host,
        copy_host_to_device,
    )
    from ._capture import CaptureCapable, CapturedGraph, RecordedCalls, capture_refusal  # noqa: F401
    from ._ckernel import check_compute  # noqa: F401
    from ._context import ContextCounters, KernelContext, KernelInfo, OutputAllocator, numpy_output_allocator  # noqa: F401
    from ._copy_kernel import CopyKernel  # noqa: F401
    from ._ep import (  # noqa: F401
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
    from ._errors import (  # noqa: F401
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
    from ._fast_control import (  # noqa: F401
        CONTROL_IF,
        CONTROL_KERNEL,
        CONTROL_LOOP,
        CONTROL_SCAN,
        LOOP_STATE_BYTES,
        ControlSpec,
    )
    from ._fast_steps import (  # noqa: F401
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
    from ._ffi import c_available  # noqa: F401
    from ._handles import live_handles  # noqa: F401
    from ._hazards import HazardTracker, Mark, buffer_range  # noqa: F401
    from ._hostapi import HOST_API, HostApi  # noqa: F401
    from ._kerneldef import KernelDef, KernelDefBuilder  # noqa: F401
    from ._library import KernelLibrary, load_kernel_library  # noqa: F401
    from ._prepack import PrePackError, declare_prepacked, prepack_weight  # noqa: F401
    from ._registry import KernelEntry, KernelRegistry, declare_workspace, estimate_workspace, release_kernel  # noqa: F401
    from ._run_checks import (  # noqa: F401
        RunChecks,
        check_growth,
        check_run,
        checks_every_iteration,
        raised_by_run_checks,
        run_checks_scope,
    )
    from ._shapefunc import (  # noqa: F401
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
    from ._status import ErrorCode, check, live_status_count, status_misuse  # noqa: F401
    from ._streams import Event, OrderGuard, Stream, StreamOrderError, copy_host_to_device_async  # noqa: F401
    from ._tensor import DeviceTensor, empty_tensor, tensor_from_host, tensor_to_host  # noqa: F401
    from ._transfers import (  # noqa: F401
        DeviceTransfers,
        ImmediateTransfers,
        SimulatedTransfers,
        Timeline,
        TransferStreamProvider,
        transfers_for,
    )
    from ._workspace import (  # noqa: F401
        MAX_SLOTS,
        InputState,
        WorkspaceInputShape,
        WorkspaceSlot,
        node_query_key,
        workspace_input_shapes,
    )
