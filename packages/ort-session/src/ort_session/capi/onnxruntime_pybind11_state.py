"""`from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument` -> the same names here."""

from .._ort_errors import (
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

__all__ = ["DeviceReset", "EPFail", "EngineError", "Fail", "InvalidArgument", "InvalidGraph", "InvalidProtobuf",
           "ModelLoadCanceled", "ModelLoaded", "ModelRequiresCompilation", "NoModel", "NoSuchFile", "NotFound",
           "NotImplemented", "RuntimeException"]
