"""ONNX Runtime's exception types (`onnxruntime.capi.onnxruntime_pybind11_state`), as bases of ours.

Code written for onnxruntime catches `InvalidArgument`, `Fail`, `NoSuchFile`... Every ort-session
error derives from the one of these that ONNX Runtime would raise in the same situation, so such an
`except` clause catches ours unchanged, while `except ort_session.InvalidInputError` keeps working:

| ONNX Runtime        | ort-session                                                        |
|---------------------|--------------------------------------------------------------------|
| InvalidArgument     | InvalidInputError (feeds), InvalidOptionError (options)            |
| NoSuchFile          | ModelFileNotFoundError (a model path that does not exist)          |
| InvalidProtobuf     | InvalidModelError (bytes or a file that is no ONNX model)          |
| InvalidGraph        | InvalidGraphError (a model that parses but is malformed)           |
| NotImplemented      | PlacementError (no provider takes a node)                          |
| EPFail              | FallbackDisabledError (fallback disabled and a node left its EP)    |
| Fail                | KernelRunError, RunTerminatedError, SessionBusyError, SessionError |
| RuntimeException    | DeviceMemoryError, UnplannedAllocationError                        |
| NoModel, ModelLoaded, EngineError, ModelLoadCanceled, ModelRequiresCompilation, NotFound, DeviceReset | raised by nothing here; present so that `except` clauses import |

`SessionError`, our base, derives from `Fail` (ONNX Runtime's generic failure), so `except ort.Fail`
also catches every error of ours; ONNX Runtime's own classes share no base but `Exception`.
"""

from __future__ import annotations


class OrtError(Exception):
    """Base of the ONNX Runtime-named classes below (ONNX Runtime's own share only `Exception`)."""


class Fail(OrtError):
    """ONNX Runtime status FAIL: a generic failure (a kernel failed, a run was terminated)."""


class InvalidArgument(OrtError):
    """ONNX Runtime status INVALID_ARGUMENT: bad feeds, bad options."""


class NoSuchFile(OrtError):
    """ONNX Runtime status NO_SUCHFILE: the model path does not exist."""


class NoModel(OrtError):
    """ONNX Runtime status NO_MODEL (never raised by ort-session: a session always holds its model)."""


class EngineError(OrtError):
    """ONNX Runtime status ENGINE_ERROR (never raised by ort-session)."""


class RuntimeException(OrtError):
    """ONNX Runtime status RUNTIME_EXCEPTION: memory could not be allocated as planned."""


class InvalidProtobuf(OrtError):
    """ONNX Runtime status INVALID_PROTOBUF: the bytes or file are not an ONNX model."""


class ModelLoaded(OrtError):
    """ONNX Runtime status MODEL_LOADED (never raised by ort-session: a model is loaded once, at construction)."""


class NotImplemented(OrtError):  # noqa: A001 - ONNX Runtime's name, which users import
    """ONNX Runtime status NOT_IMPLEMENTED: no kernel for a node."""


class InvalidGraph(OrtError):
    """ONNX Runtime status INVALID_GRAPH: the model parses but its graph is malformed."""


class EPFail(OrtError):
    """ONNX Runtime status EP_FAIL: an execution provider could not take what it was asked to."""


class ModelLoadCanceled(OrtError):
    """ONNX Runtime status MODEL_LOAD_CANCELED (never raised by ort-session: loading is not cancellable)."""


class ModelRequiresCompilation(OrtError):
    """ONNX Runtime status MODEL_REQUIRES_COMPILATION (never raised by ort-session: nothing is precompiled)."""


class NotFound(OrtError):
    """ONNX Runtime status NOT_FOUND (never raised by ort-session)."""


class DeviceReset(OrtError):
    """ONNX Runtime's error for a device that was reset under a session (never raised by ort-session)."""


ORT_EXCEPTIONS = (Fail, InvalidArgument, NoSuchFile, NoModel, EngineError, RuntimeException, InvalidProtobuf,
                  ModelLoaded, NotImplemented, InvalidGraph, EPFail, ModelLoadCanceled, ModelRequiresCompilation,
                  NotFound, DeviceReset)

__all__ = ["DeviceReset", "EPFail", "EngineError", "Fail", "InvalidArgument", "InvalidGraph", "InvalidProtobuf",
           "ModelLoadCanceled", "ModelLoaded", "ModelRequiresCompilation", "NoModel", "NoSuchFile", "NotFound",
           "NotImplemented", "OrtError", "RuntimeException"]
