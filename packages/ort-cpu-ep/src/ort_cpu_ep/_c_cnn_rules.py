"""Which convolution, pooling and Resize nodes ort-cpu-ep's C kernels compute (`_c_rules.c_kernel_applies` asks
here): 2-D float32 convolutions (Conv, ConvTranspose, FusedConv with an activation of `C_CONV_ACTIVATIONS`),
the four poolings and nearest / linear Resize, each with the attributes its kernel in `csrc/` handles."""

from __future__ import annotations

import numpy as np

from ort_graph import Node, constant_initializer

_FLOAT = 1  # TensorProto.FLOAT
# FusedConv activations the C Conv applies in its epilogue -> the count of activation_params each takes
C_CONV_ACTIVATIONS = {"Relu": 0, "Sigmoid": 0, "HardSwish": 0, "LeakyRelu": 1, "HardSigmoid": 2, "Clip": 2}


C_POOLS = ("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool")


def c_pool_applies(node: Node) -> bool:
    """X known float32: of rank 3..16 for the global pools, of rank 4 for MaxPool (output Y only: Indices stay with
    numpy) and AveragePool, whose kernel_shape / strides / dilations / pads must have a 2-D pooling's lengths;
    AveragePool's count_include_pad with a SAME auto_pad (where the numpy kernel counts no end pad) stays with numpy."""
    graph = node.graph
    value = graph.values.get(node.inputs[0]) if graph is not None and node.inputs and node.inputs[0] else None
    if value is None or value.dtype != _FLOAT or value.shape is None:
        return False
    if node.op_type.startswith("Global"):
        return 3 <= len(value.shape) <= 16
    if len(value.shape) != 4 or len(node.inputs) != 1 or any(node.outputs[1:]):
        return False
    for name, accepted in _CONV_ATTR_LENGTHS.items():
        v = node.attr(name, None)
        if v is not None and len(v) not in accepted:
            return False
    auto = node.attr("auto_pad", "NOTSET")
    if auto not in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID") or node.attr("kernel_shape", None) is None:
        return False
    return not (node.op_type == "AveragePool" and auto.startswith("SAME") and int(node.attr("count_include_pad", 0)))


_C_RESIZE_ATTRS = {"mode": ("nearest", "linear"), "keep_aspect_ratio_policy": ("stretch",), "antialias": (0,),
                   "coordinate_transformation_mode": ("asymmetric", "half_pixel", "pytorch_half_pixel", "align_corners"),
                   "nearest_mode": ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")}
_C_RESIZE_DEFAULTS = {"mode": "nearest", "keep_aspect_ratio_policy": "stretch", "antialias": 0,
                      "coordinate_transformation_mode": "half_pixel", "nearest_mode": "round_prefer_floor"}


def c_resize_applies(node: Node) -> bool:
    """Nearest or linear Resize of a known float32 rank-4 X on its H and W only: constant scales (float32) or sizes
    (int64) of 4 values leaving N and C as they are, no axes attribute, the attribute values of `_C_RESIZE_ATTRS`.
    Cubic mode, antialias, tf_crop_and_resize, scales computed at run time and other ranks stay with numpy."""
    graph = node.graph
    value = graph.values.get(node.inputs[0]) if graph is not None and node.inputs and node.inputs[0] else None
    if value is None or value.dtype != _FLOAT or value.shape is None or len(value.shape) != 4:
        return False
    if node.attr("axes", None) is not None:
        return False
    for name, accepted in _C_RESIZE_ATTRS.items():
        if node.attr(name, _C_RESIZE_DEFAULTS[name]) not in accepted:
            return False
    consts = [constant_initializer(graph, n) for n in (list(node.inputs) + ["", "", ""])[2:4]]  # fed: numpy
    arrays = [np.asarray(t.numpy()).reshape(-1) if t is not None else None for t in consts]
    scales, sizes = (a if a is not None and a.size else None for a in arrays)
    if sizes is not None:
        n, c = value.shape[:2]
        return sizes.dtype == np.int64 and sizes.size == 4 and isinstance(n, int) and isinstance(c, int) \
            and list(sizes[:2]) == [n, c]
    named_sizes = len(node.inputs) > 3 and bool(node.inputs[3]) and consts[1] is None
    return (not named_sizes and scales is not None and scales.dtype == np.float32 and scales.size == 4
            and list(scales[:2]) == [1.0, 1.0])


_CONV_ATTR_LENGTHS = {"kernel_shape": (2,), "strides": (2,), "dilations": (2,), "pads": (4,)}
CONVT_ATTR_LENGTHS = {**_CONV_ATTR_LENGTHS, "output_padding": (2,), "output_shape": (2, 4)}


def c_conv_applies(node: Node, lengths: dict[str, tuple[int, ...]] = _CONV_ATTR_LENGTHS) -> bool:
    """A 2-D (transposed) convolution: X and W known float32 of rank 4, a bias (if any) float32, FusedConv's Z (if
    any) float32 (its shape is checked at run time); the attributes of `lengths` absent or of a 2-D convolution's
    lengths, auto_pad one of ONNX's four. 1-D and 3-D convolutions, float16 and unknown ranks stay with numpy."""
    graph = node.graph
    most = 4 if node.op_type == "FusedConv" else 3
    if graph is None or not 2 <= len(node.inputs) <= most or not node.inputs[0] or not node.inputs[1]:
        return False
    values = [graph.values.get(name) for name in node.inputs if name]
    if any(v is None or v.dtype != _FLOAT for v in values):
        return False
    if any(v.shape is None or len(v.shape) != 4 for v in values[:2]):
        return False
    for name, accepted in lengths.items():
        value = node.attr(name, None)
        if value is not None and len(value) not in accepted:
            return False
    return node.attr("auto_pad", "NOTSET") in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


__all__ = ["CONVT_ATTR_LENGTHS", "C_CONV_ACTIVATIONS", "C_POOLS", "c_conv_applies", "c_pool_applies", "c_resize_applies"]
