"""BatchNormalization folded into the Conv or ConvTranspose before it (ONNX Runtime's ConvBNFusion), as an execution
provider's pass on the nodes it claimed: Conv(X, W[, b]) whose only consumer is an inference-mode BatchNormalization with
constant scale, B, mean and var becomes Conv(X, W', b'), W' = W * s per output channel, b' = (b - mean) * s + B,
s = scale / sqrt(var + epsilon) (ConvTranspose: W [C, M / group, ...] scaled along its output channels, axis 1 within
each group), computed in float64 and rounded once to the weights' type. The folded weights are
new initializers (`<conv name>/ConvBNFusion/W`, `/B`); the old ones go once nothing reads them. An overridable
initializer (one a run may feed: `_overridable`) among them leaves the pair as it is, as in onnxruntime."""

from __future__ import annotations

from collections.abc import Collection

import numpy as np

from ._fusions import FusionRecord, _only_consumer, _replace
from ._ir import Graph, Node
from ._overridable import constant_initializer
from ._rewrite import Rewriter
from ._tensor import Tensor

__all__ = ["fuse_conv_batchnorm"]

_FOLD_DTYPES = frozenset({1, 11})  # float32, float64


def output_channels(conv: Node, w: Tensor) -> int | None:
    """The output channels of a Conv (W [M, C / group, ...]) or ConvTranspose (W [C, M / group, ...]) of weights `w`;
    None when `w` is not a convolution's weights (rank below 3: the node's kernel refuses it, no fold touches it)."""
    if len(w.dims) < 3:
        return None
    if conv.op_type == "ConvTranspose":
        return int(w.dims[1]) * int(conv.attr("group", 1))
    return int(w.dims[0])


def _channel_constants(graph: Graph, bn: Node, channels: int) -> list[np.ndarray] | None:
    """BatchNormalization's scale, B, mean, var as float64 vectors of `channels` values, or None when any is not
    a constant of that shape."""
    if len(bn.inputs) != 5:
        return None
    out = []
    for name in bn.inputs[1:]:
        t = constant_initializer(graph, name)
        if t is None or tuple(t.dims) != (channels,):
            return None
        out.append(np.asarray(t.numpy(), np.float64))
    return out


def _weight_scale(conv: Node, s: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The per-output-channel factors `s` shaped to multiply the weights of `conv` (Conv: axis 0; ConvTranspose: W
    [C, M / group, ...], channel g * M / group + j at rows of group g, column j)."""
    if conv.op_type != "ConvTranspose":
        return s.reshape(-1, *[1] * (len(shape) - 1))
    group = int(conv.attr("group", 1))
    per_group = s.reshape(group, 1, shape[1], *[1] * (len(shape) - 2))
    spatial = [1] * (len(shape) - 2)
    return np.broadcast_to(per_group, (group, shape[0] // group, shape[1], *spatial)).reshape(shape[0], shape[1], *spatial)


def _initializer(graph: Graph, base: str, array: np.ndarray) -> str:
    name = graph.generate_node_name(base)
    graph.initializers[name] = Tensor.from_numpy(name, np.ascontiguousarray(array))
    graph.value(name).dtype, graph.value(name).shape = graph.initializers[name].dtype, tuple(array.shape)
    return name


def fuse_conv_batchnorm(graph: Graph, nodes: Collection[Node] | None = None) -> list[FusionRecord]:
    """Conv + BatchNormalization -> Conv with folded weights and bias, named `<conv name>/ConvBNFusion`, where the
    Conv's weights (and bias, if any) are initializers, the BatchNormalization is in inference mode with one named
    output and constant per-channel inputs, and the element type is float32 or float64. Only pairs whose both nodes
    are in `nodes` (all when None) are fused."""
    allowed = None if nodes is None else {id(n) for n in nodes}
    records: list[FusionRecord] = []
    rw = Rewriter(graph)
    for conv in [n for n in graph.nodes if n.op_type in ("Conv", "ConvTranspose") and n.domain in ("", "ai.onnx")]:
        if not 2 <= len(conv.inputs) <= 3 or not all(conv.inputs) or any(constant_initializer(graph, i) is None for i in conv.inputs[1:]):
            continue
        bn = _only_consumer(graph, conv.outputs[0])
        if bn is None or bn.op_type != "BatchNormalization" or bn.domain not in ("", "ai.onnx") or bn.inputs[0] != conv.outputs[0]:
            continue
        if allowed is not None and (id(conv) not in allowed or id(bn) not in allowed):
            continue
        if int(bn.attr("training_mode", 0)) or any(bn.outputs[1:]):
            continue
        w_t = graph.initializers[conv.inputs[1]]
        y = graph.values.get(bn.outputs[0])
        if w_t.dtype not in _FOLD_DTYPES or y is None or y.dtype != w_t.dtype:
            continue
        channels = output_channels(conv, w_t)
        consts = None if channels is None else _channel_constants(graph, bn, channels)
        if consts is None:
            continue
        scale, shift, mean, var = consts
        s = scale / np.sqrt(var + float(bn.attr("epsilon", 1e-5)))
        w = np.asarray(w_t.numpy())
        b = np.asarray(graph.initializers[conv.inputs[2]].numpy(), np.float64) if len(conv.inputs) == 3 else 0.0
        if np.shape(b) not in ((), (channels,)):
            continue
        folded_w = (w.astype(np.float64) * _weight_scale(conv, s, w.shape)).astype(w.dtype)
        folded_b = ((b - mean) * s + shift).astype(w.dtype)
        w_name = _initializer(graph, conv.name + "/ConvBNFusion/W", folded_w)
        b_name = _initializer(graph, conv.name + "/ConvBNFusion/B", folded_b)
        fused = _replace(rw, [conv, bn], conv.op_type, [conv.inputs[0], w_name, b_name], [bn.outputs[0]], "/ConvBNFusion",
                         attributes=dict(conv.attributes))
        records.append(FusionRecord("ConvBNFusion", (conv.name, bn.name), (fused.name,)))
    rw.finish()
    return records
