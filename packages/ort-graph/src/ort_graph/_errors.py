"""The ort-graph exception hierarchy. Every error names the file, node or value and a fix."""

from __future__ import annotations


class GraphError(Exception):
    """Base class of every error raised by ort-graph."""


class ModelLoadError(GraphError):
    """The file or bytes are not a loadable ONNX model (truncated, not ONNX, unreadable)."""


class ExternalDataError(ModelLoadError):
    """An initializer's external data is missing, too short, inconsistent with its tensor, or outside the
    model's directory (absolute location, `..`, a symbolic link leading out, no directory for a model given
    as bytes)."""


class TensorDataError(ModelLoadError):
    """An embedded tensor's data does not match its data type and dims (or its dims/type are invalid)."""


class TensorReleasedError(GraphError):
    """A tensor whose values were released (`Tensor.release`: every consumer pre-packed it) and held nowhere else."""


class UnsupportedModelError(ModelLoadError):
    """The model uses an IR version or feature this package does not support."""


class GraphStructureError(GraphError):
    """The graph is malformed: a cycle, a dangling input, duplicate producers."""


class MalformedNodeError(GraphStructureError):
    """A node's attributes (or constant inputs) have the wrong type or an impossible value, so its output shapes
    cannot be computed: names the node, its op and what was wrong."""


class DuplicateNameError(ModelLoadError, GraphStructureError):
    """A value is defined twice (two initializers, an initializer and a node output, two producers)."""


class ShapeResolutionError(GraphError):
    """A dimension override or max-shape bound is malformed or contradicts the model."""


class ShapeAnnotationWarning(UserWarning):
    """The file's declared shape of a value contradicts what inference computes."""


class ShapeResolutionWarning(UserWarning):
    """Some values' shapes could not be resolved: their sizes are unknown until run time, so the
    session traces instead of planning (and refuses pre-allocation). Names the first such node."""
