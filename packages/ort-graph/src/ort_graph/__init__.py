"""ort-graph: the ONNX graph IR the other ort-* packages build on.

Load a model (`load`), resolve its shapes with dimension overrides (`resolve_shapes`), walk it in
topological order, apply L1 fusions that keep derivative node names, and save it back.
"""

from ._body_weights import BodyWeight, body_weight_bytes, body_weights
from ._constprop import constants_to_initializers, fold_constant_layouts, fold_constant_of_shape
from ._conv1d_as_2d import conv1d_as_conv2d
from ._conv_act_fusion import CONV_ACTIVATIONS, fuse_conv_activation, fuse_conv_add_activation
from ._conv_bn_fusion import fuse_conv_batchnorm
from ._copy import copy_model
from ._declared import has_shape_rule
from ._dimspec import DimSpecError, axis_name, format_shape, parse_dims, parse_shapes
from ._dropout_identity import inference_dropout_as_identity
from ._dtypes import dtype_name, from_numpy_dtype, itemsize, tensor_nbytes, to_numpy_dtype
from ._ep_fusions import (
    fuse_conv_add,
    fuse_conv_mul,
    fuse_convtranspose_add,
    fuse_matmul_transpose,
    fuse_silu,
)
from ._errors import (
    DuplicateNameError,
    ExternalDataError,
    GraphError,
    GraphStructureError,
    MalformedNodeError,
    ModelLoadError,
    ShapeAnnotationWarning,
    ShapeResolutionError,
    ShapeResolutionWarning,
    TensorDataError,
    TensorReleasedError,
    UnsupportedModelError,
)
from ._fusions import FUSIONS, FusionRecord, apply_l1_fusions, remove_unused_initializers
from ._input_dims import dynamic_axes, dynamic_dims_hint, named_inputs, sizes_by_symbol
from ._io import from_proto, load, save, to_proto
from ._ir import LAYER_ANN_KEY, Attr, Dim, Graph, Model, Node, Shape, Value, is_static, symbolic_inputs
from ._overridable import (
    constant_initializer,
    constant_names,
    is_overridable,
    overridable_initializers,
    settle_inputs,
)
from ._repeat_kv_fusion import fuse_repeat_kv
from ._rnn_defaults import drop_default_rnn_activations
from ._shapes import (
    ShapeReport,
    first_unresolved_node,
    parse_max_shape_override,
    resolve_shapes,
    unresolved_hint,
)
from ._sparse import sparse_to_numpy
from ._tensor import ExternalLocation, Tensor
from ._topo import topological_order, validate
from ._type_checks import InputTypeError, check_input_types

__version__ = "0.2.0"

__all__ = [
    "BodyWeight", "body_weight_bytes", "body_weights",
    "FUSIONS", "FusionRecord", "CONV_ACTIVATIONS", "conv1d_as_conv2d", "drop_default_rnn_activations", "inference_dropout_as_identity", "fuse_conv_activation", "fuse_conv_add", "fuse_conv_add_activation", "fuse_conv_batchnorm", "fuse_conv_mul", "fuse_convtranspose_add", "fuse_matmul_transpose", "fuse_repeat_kv", "fuse_silu", "LAYER_ANN_KEY", "ShapeReport", "apply_l1_fusions", "constants_to_initializers", "fold_constant_layouts", "fold_constant_of_shape",
    "constant_initializer", "constant_names", "is_overridable", "overridable_initializers", "settle_inputs",
    "copy_model", "parse_max_shape_override", "DimSpecError", "axis_name", "dynamic_axes", "format_shape",
    "dynamic_dims_hint", "named_inputs", "parse_dims", "parse_shapes", "sizes_by_symbol",
    "remove_unused_initializers", "resolve_shapes", "Attr", "Dim", "DuplicateNameError", "ExternalDataError", "MalformedNodeError", "ExternalLocation", "Graph", "GraphError",
    "GraphStructureError", "InputTypeError", "check_input_types", "Model", "ModelLoadError", "Node", "Shape", "ShapeAnnotationWarning", "ShapeResolutionWarning", "first_unresolved_node", "has_shape_rule", "unresolved_hint",
    "ShapeResolutionError", "Tensor", "TensorDataError", "TensorReleasedError", "UnsupportedModelError", "Value", "__version__", "dtype_name",
    "from_numpy_dtype", "from_proto", "is_static", "symbolic_inputs", "itemsize", "load", "save", "sparse_to_numpy", "tensor_nbytes",
    "to_numpy_dtype", "to_proto", "topological_order", "validate", "zoo",
]


def __getattr__(name: str) -> object:
    """`ort_graph.zoo` (the synthetic model builders) is imported on first use: sessions never need it."""
    if name == "zoo":
        import importlib

        return importlib.import_module(f"{__name__}.zoo")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
