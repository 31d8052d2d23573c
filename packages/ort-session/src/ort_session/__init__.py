"""ort-session: InferenceSession, the ONNX backend and `ortrun` (the CPU provider is ort-cpu-ep's, re-exported).

    from ort_session import InferenceSession
    sess = InferenceSession("model.onnx", {"budgets": "cuda:6GiB"}, providers=["CUDAExecutionProvider"])
    print(sess.plan.to_table())
    outputs = sess.run(None, {"input_ids": ids})
"""

from ort_cpu_ep import CpuExecutionProvider, SimulatedGpuExecutionProvider

from ._errors import (
    CaptureRefusedError,
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
    RunTerminatedError,
    SessionBusyError,
    SessionError,
    UnplannedAllocationError,
    UnplannedShapesWarning,
    WorkspaceVerificationError,
)
from ._executor import RunStats
from ._feeds import generate_inputs, validate_feeds
from ._iobinding import IOBinding
from ._options import (
    CUDA_PARTITIONING,
    LAYER_ASSIGNMENT,
    MAX_SHAPE_OVERRIDE,
    NAME_BASED_ASSIGNMENT,
    PRE_ALLOCATE,
    SessionOptions,
    UnknownConfigKeyWarning,
)
from ._ort_api import ModelMetadata, NodeArg, get_all_providers, get_available_providers
from ._ort_errors import (
    EngineError,
    EPFail,
    Fail,
    InvalidArgument,
    InvalidGraph,
    InvalidProtobuf,
    ModelLoaded,
    NoModel,
    NoSuchFile,
    NotImplemented,
    RuntimeException,
)
from ._ort_options import ExecutionMode, GraphOptimizationLevel, OrtOptionNoteWarning, RunOptions
from ._ortvalue import OrtValue
from ._session import InferenceSession

__version__ = "0.2.0"

__all__ = [
    "CaptureRefusedError",
    "CUDA_PARTITIONING", "LAYER_ASSIGNMENT", "MAX_SHAPE_OVERRIDE", "NAME_BASED_ASSIGNMENT", "PRE_ALLOCATE",
    "CpuExecutionProvider", "DeviceMemoryError", "FeedExceedsPlanError", "InferenceSession", "InvalidInputError",
    "InvalidOptionError", "KernelRunError", "MemoryProfileWriteWarning", "PlacementError", "RunStats", "SessionBusyError",
    "SessionError", "SessionOptions", "UnknownConfigKeyWarning", "SimulatedGpuExecutionProvider",
    "UnplannedAllocationError", "UnplannedShapesWarning", "WorkspaceVerificationError", "__version__", "generate_inputs", "validate_feeds",
    # ONNX Runtime's Python API (`import ort_session as ort`)
    "EPFail", "EngineError", "ExecutionMode", "Fail", "FallbackDisabledError", "GraphOptimizationLevel", "IOBinding",
    "InvalidArgument", "InvalidGraph", "InvalidGraphError", "InvalidModelError", "InvalidProtobuf", "ModelFileNotFoundError",
    "ModelLoadFailedError", "ModelLoaded", "ModelMetadata", "NoModel", "NoSuchFile", "NodeArg", "NotImplemented",
    "OrtOptionNoteWarning", "OrtValue", "RunOptions", "RunTerminatedError", "RuntimeException", "get_all_providers",
    "get_available_providers",
]
