"""Loading the model for a session: external data against the model's folder (or the folder option), and
load failures typed as ONNX Runtime types them while keeping ort-graph's own error class."""

from __future__ import annotations

import os

import onnx

import ort_graph
from ort_graph import Model

from ._errors import InvalidGraphError, InvalidModelError, ModelFileNotFoundError

__all__ = ["load_model"]


def load_model(model: str | os.PathLike | bytes | onnx.ModelProto | Model, base_dir: str | None = None,
               map_inline_weights: bool = True) -> Model:
    """The model; external data resolves against the model file's folder, or `base_dir` (EXTERNAL_DATA_FOLDER) if
    set; from a path, large inline initializers are mapped from the file unless `map_inline_weights` is off
    (MAP_INLINE_WEIGHTS). A load failure is typed as ONNX Runtime types it (NoSuchFile, InvalidProtobuf,
    InvalidGraph)."""
    if isinstance(model, Model):
        ort_graph.settle_inputs(model)  # as a load does: before IR 4 no initializer is a feedable input
        return model
    if isinstance(model, str | os.PathLike) and not os.path.exists(model):
        raise ModelFileNotFoundError(f"model file {os.fspath(model)!r} does not exist; check the path")
    try:
        if isinstance(model, onnx.ModelProto):
            return ort_graph.from_proto(model, base_dir=base_dir)
        if isinstance(model, str | os.PathLike):
            return ort_graph.load(model, base_dir=base_dir, map_inline_weights=map_inline_weights)
        return ort_graph.load(model, base_dir=base_dir)
    except ort_graph.ModelLoadError as e:
        raise _also(InvalidModelError, e) from e
    except ort_graph.GraphError as e:
        raise _also(InvalidGraphError, e) from e


_ALSO: dict[tuple[type, type], type] = {}


def _also(kind: type[Exception], error: Exception) -> Exception:
    """`error` re-typed to be also `kind` (ONNX Runtime's exception type), keeping its own class (e.g.
    ort_graph.ExternalDataError) so that callers catching either kind of type catch it."""
    key = (kind, type(error))
    cls = _ALSO.get(key)
    if cls is None:
        try:
            cls = type(type(error).__name__, (type(error), kind), {"__module__": type(error).__module__,
                                                                     "__doc__": type(error).__doc__})
        except TypeError:  # incompatible layouts: ONNX Runtime's type with the message
            return kind(str(error))
        _ALSO[key] = cls
    out = Exception.__new__(cls)
    out.args = error.args
    out.__dict__.update(getattr(error, "__dict__", {}))
    return out
