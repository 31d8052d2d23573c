"""`from onnxruntime.capi.onnxruntime_pybind11_state import InvalidArgument` -> the same names here."""

from .._ort_errors import (
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

__all__ = ["EPFail", "EngineError", "Fail", "InvalidArgument", "InvalidGraph", "InvalidProtobuf", "ModelLoaded",
           "NoModel", "NoSuchFile", "NotImplemented", "RuntimeException"]
