"""ort-session: InferenceSession, the CPU execution provider, the ONNX backend and `ortrun`.

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
    "CpuExecutionProvider": "._cpu_ep", "SimulatedGpuExecutionProvider": "._cpu_ep",
    "DeviceMemoryError": "._errors", "FeedExceedsPlanError": "._errors", "InvalidInputError": "._errors",
    "InvalidOptionError": "._errors", "KernelRunError": "._errors", "MemoryProfileWriteWarning": "._errors",
    "PlacementError": "._errors", "SessionBusyError": "._errors", "SessionError": "._errors",
    "UnplannedAllocationError": "._errors", "UnplannedShapesWarning": "._errors",
    "RunStats": "._executor",
    "generate_inputs": "._feeds", "validate_feeds": "._feeds",
    "CUDA_PARTITIONING": "._options", "LAYER_ASSIGNMENT": "._options", "MAX_SHAPE_OVERRIDE": "._options",
    "NAME_BASED_ASSIGNMENT": "._options", "PRE_ALLOCATE": "._options", "SessionOptions": "._options",
    "UnknownConfigKeyWarning": "._options",
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
    from ._cpu_ep import CpuExecutionProvider, SimulatedGpuExecutionProvider  # noqa: F401
    from ._errors import (  # noqa: F401
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
    )
    from ._executor import RunStats  # noqa: F401
    from ._feeds import generate_inputs, validate_feeds  # noqa: F401
    from ._options import (  # noqa: F401
        CUDA_PARTITIONING,
        LAYER_ASSIGNMENT,
        MAX_SHAPE_OVERRIDE,
        NAME_BASED_ASSIGNMENT,
        PRE_ALLOCATE,
        SessionOptions,
        UnknownConfigKeyWarning,
    )
    from ._session import InferenceSession  # noqa: F401
