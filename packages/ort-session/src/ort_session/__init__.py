"""ort-session: InferenceSession, the session glue, the ONNX backend, onnxruntime's Python API and `ortrun`.

    from ort_session import InferenceSession
    sess = InferenceSession("model.onnx", {"budgets": "cuda:6GiB"}, providers=["CUDAExecutionProvider"])
    print(sess.plan.to_table())
    outputs = sess.run(None, {"input_ids": ids})

Names are imported on first use (PEP 562), so `ortrun --help` and `import ort_session.cli` load no model
machinery (onnx, numpy, the kernels).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"

_WHERE = {
    "CpuExecutionProvider": "ort_cpu_ep",
    "SimulatedGpuExecutionProvider": "ort_cpu_ep",
    "CaptureRefusedError": "._errors",
    "DeviceMemoryError": "._errors",
    "FallbackDisabledError": "._errors",
    "FeedExceedsPlanError": "._errors",
    "InvalidGraphError": "._errors",
    "InvalidInputError": "._errors",
    "InvalidModelError": "._errors",
    "InvalidOptionError": "._errors",
    "KernelRunError": "._errors", "RedZoneError": "._errors", "ConstInputWrittenError": "._errors",
    "MemoryProfileWriteWarning": "._errors",
    "ModelFileNotFoundError": "._errors",
    "ModelLoadFailedError": "._errors",
    "PlacementError": "._errors",
    "RunTerminatedError": "._errors",
    "SessionBusyError": "._errors",
    "SessionError": "._errors",
    "UnplannedAllocationError": "._errors",
    "UnplannedShapesWarning": "._errors", "PlanOverBudgetError": "._errors",
    "WorkspaceVerificationError": "._errors",
    "RunStats": "._run_types",
    "generate_inputs": "._feeds",
    "validate_feeds": "._feeds",
    "IOBinding": "._iobinding",
    "CUDA_PARTITIONING": "._options",
    "LAYER_ASSIGNMENT": "._options",
    "MAX_SHAPE_OVERRIDE": "._options",
    "MAP_INLINE_WEIGHTS": "._options",
    "NAME_BASED_ASSIGNMENT": "._options",
    "PRE_ALLOCATE": "._options",
    "SessionOptions": "._options",
    "UnknownConfigKeyWarning": "._options",
    "ModelMetadata": "._ort_api",
    "NodeArg": "._ort_api",
    "get_all_providers": "._ort_api",
    "get_available_providers": "._ort_api",
    "EngineError": "._ort_errors",
    "EPFail": "._ort_errors",
    "Fail": "._ort_errors",
    "InvalidArgument": "._ort_errors",
    "InvalidGraph": "._ort_errors",
    "InvalidProtobuf": "._ort_errors",
    "ModelLoaded": "._ort_errors",
    "NoModel": "._ort_errors",
    "NoSuchFile": "._ort_errors",
    "NotImplemented": "._ort_errors",
    "RuntimeException": "._ort_errors",
    "DeviceReset": "._ort_errors",
    "ModelLoadCanceled": "._ort_errors",
    "ModelRequiresCompilation": "._ort_errors",
    "NotFound": "._ort_errors",
    "UnknownProviderWarning": "._ort_module",
    "get_device": "._ort_module",
    "set_default_logger_severity": "._ort_module",
    "set_default_logger_verbosity": "._ort_module",
    "ExecutionMode": "._ort_options",
    "GraphOptimizationLevel": "._ort_options",
    "OrtOptionNoteWarning": "._ort_options",
    "RunOptions": "._ort_options",
    "OrtValue": "._ortvalue",
    "InferenceSession": "._session",
}

__all__ = sorted([*_WHERE, "__version__"])


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'ort_session' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})


if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly
    from ort_cpu_ep import CpuExecutionProvider, SimulatedGpuExecutionProvider  # noqa: F401

    from ._errors import (  # noqa: F401
        CaptureRefusedError,
        ConstInputWrittenError,
        DeviceMemoryError,
        FallbackDisabledError,
        FeedExceedsPlanError,
        InvalidGraphError,
        InvalidInputError,
        InvalidModelError,
        InvalidOptionError,
        KernelRunError,
        MemoryProfileWriteWarning,
        ModelFileNotFoundError,
        ModelLoadFailedError,
        PlacementError,
        RedZoneError,
        RunTerminatedError,
        SessionBusyError,
        SessionError,
        UnplannedAllocationError,
        UnplannedShapesWarning,
        WorkspaceVerificationError,
    )
    from ._feeds import generate_inputs, validate_feeds  # noqa: F401
    from ._iobinding import IOBinding  # noqa: F401
    from ._options import (  # noqa: F401
        CUDA_PARTITIONING,
        LAYER_ASSIGNMENT,
        MAP_INLINE_WEIGHTS,
        MAX_SHAPE_OVERRIDE,
        NAME_BASED_ASSIGNMENT,
        PRE_ALLOCATE,
        SessionOptions,
        UnknownConfigKeyWarning,
    )
    from ._ort_api import ModelMetadata, NodeArg, get_all_providers, get_available_providers  # noqa: F401
    from ._ort_errors import (  # noqa: F401
        DeviceReset,
        EngineError,
        EPFail,
        Fail,
        InvalidArgument,
        InvalidGraph,
        InvalidProtobuf,
        ModelLoadCanceled,
        ModelLoaded,
        ModelRequiresCompilation,
        NoModel,
        NoSuchFile,
        NotFound,
        NotImplemented,
        RuntimeException,
    )
    from ._ort_module import (  # noqa: F401
        UnknownProviderWarning,
        get_device,
        set_default_logger_severity,
        set_default_logger_verbosity,
    )
    from ._ort_options import ExecutionMode, GraphOptimizationLevel, OrtOptionNoteWarning, RunOptions  # noqa: F401
    from ._ortvalue import OrtValue  # noqa: F401
    from ._run_types import RunStats  # noqa: F401
    from ._session import InferenceSession  # noqa: F401
