"""ort-session: InferenceSession, the CPU execution provider, the ONNX backend and `ortrun`.

    from ort_session import InferenceSession
    sess = InferenceSession("model.onnx", {"budgets": "cuda:6GiB"}, providers=["CUDAExecutionProvider"])
    print(sess.plan.to_table())
    outputs = sess.run(None, {"input_ids": ids})
"""

from ._cpu_ep import CpuExecutionProvider, SimulatedGpuExecutionProvider
from ._errors import (
    CaptureRefusedError,
    DeviceMemoryError,
    FeedExceedsPlanError,
    InvalidInputError,
    InvalidOptionError,
    KernelRunError,
    MemoryProfileWriteWarning,
    PlacementError,
    SessionBusyError,
    SessionError,
    UnplannedAllocationError,
    UnplannedShapesWarning,
    WorkspaceVerificationError,
)
from ._executor import RunStats
from ._feeds import generate_inputs, validate_feeds
from ._options import (
    CUDA_PARTITIONING,
    LAYER_ASSIGNMENT,
    MAX_SHAPE_OVERRIDE,
    NAME_BASED_ASSIGNMENT,
    PRE_ALLOCATE,
    SessionOptions,
    UnknownConfigKeyWarning,
)
from ._session import InferenceSession

__version__ = "0.2.0"

__all__ = [
    "CaptureRefusedError",
    "CUDA_PARTITIONING", "LAYER_ASSIGNMENT", "MAX_SHAPE_OVERRIDE", "NAME_BASED_ASSIGNMENT", "PRE_ALLOCATE",
    "CpuExecutionProvider", "DeviceMemoryError", "FeedExceedsPlanError", "InferenceSession", "InvalidInputError",
    "InvalidOptionError", "KernelRunError", "MemoryProfileWriteWarning", "PlacementError", "RunStats", "SessionBusyError",
    "SessionError", "SessionOptions", "UnknownConfigKeyWarning", "SimulatedGpuExecutionProvider",
    "UnplannedAllocationError", "UnplannedShapesWarning", "WorkspaceVerificationError", "__version__", "generate_inputs", "validate_feeds",
]
