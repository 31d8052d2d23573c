"""1-D convolutions as 2-D ones with H = 1, as an execution provider's pass on the nodes it claimed (the CPU
provider's C Conv kernel takes rank 4 only; the CUDA recipe runs 1-D convolutions the same way): Conv(X[N, C, W],
W[M, C/g, K][, b]) with a constant W becomes Reshape(X, [0, 0, 1, -1]) -> Conv(., W[M, C/g, 1, K][, b]) with the
attributes lifted to two axes (kernel_shape [1, k], strides [1, s], dilations [1, d], pads [0, p0, 0, p1], auto_pad
and group as given) -> Reshape(., [0, 0, -1]). The outputs are the same numbers (the H axis has one pixel, no pad).
The 4-D weights are a new initializer (`<conv name>/Conv1dAs2d/W`); the old one goes once nothing reads it.

A strided depthwise convolution (one input channel per group, several groups) stays 1-D: the C kernel's direct
depthwise loop is not measured against numpy's at long strides. One input channel in one group (an STFT's filter
bank: 258 filters of 256 taps at stride 128) is one im2col GEMM in C (measured: 45 us, against about 0.1 ms as
numpy's 1-D and 13 us in onnxruntime)."""

from __future__ import annotations

from collections.abc import Collection

import numpy as np
from onnx import AttributeProto

from ._fusions import FusionRecord
from ._ir import Attr, Graph, Node
from ._overridable import constant_initializer
from ._tensor import Tensor

__all__ = ["conv1d_as_conv2d"]

_FLOAT = 1
_SUFFIX = "/Conv1dAs2d"


def _fresh(graph: Graph, base: str) -> str:
    """A name no node, value or initializer of `graph` has."""
    name = graph.generate_node_name(base)
    while name in graph.values or name in graph.initializers:
        name = graph.generate_node_name(base)
    return name


def _constant(graph: Graph, base: str, array: np.ndarray) -> str:
    name = _fresh(graph, base)
    graph.initializers[name] = Tensor.from_numpy(name, np.ascontiguousarray(array))
    graph.value(name).dtype, graph.value(name).shape = graph.initializers[name].dtype, tuple(array.shape)
    return name


def _lifted(conv: Node) -> dict[str, Attr] | None:
    """The attributes for two axes, or None when one has another length than a 1-D convolution's."""
    out = dict(conv.attributes)
    for name, head in (("kernel_shape", [1]), ("strides", [1]), ("dilations", [1])):
        v = conv.attr(name, None)
        if v is not None:
            if len(v) != 1:
                return None
            out[name] = Attr(name, AttributeProto.INTS, head + [int(v[0])])
    pads = conv.attr("pads", None)
    if pads is not None:
        if len(pads) != 2:
            return None
        out["pads"] = Attr("pads", AttributeProto.INTS, [0, int(pads[0]), 0, int(pads[1])])
    return out


def _value(graph: Graph, name: str, dtype: int, shape: tuple | None) -> str:
    v = graph.value(name)
    v.dtype, v.shape = dtype, shape
    return name


def conv1d_as_conv2d(graph: Graph, nodes: Collection[Node] | None = None) -> list[FusionRecord]:
    """Each float32 Conv of a rank-3 X whose weights are a rank-3 initializer (and bias, if any, an initializer or
    any value) -> Reshape / Conv 2-D / Reshape, named `<conv name>/Conv1dAs2d[...]`. Only nodes in `nodes` (all when
    None) are rewritten."""
    allowed = None if nodes is None else {id(n) for n in nodes}
    records: list[FusionRecord] = []
    placed: dict[int, list[Node]] = {}
    for conv in [n for n in graph.nodes if n.op_type == "Conv" and n.domain in ("", "ai.onnx")]:
        if allowed is not None and id(conv) not in allowed:
            continue
        if not 2 <= len(conv.inputs) <= 3 or not conv.inputs[0] or len(conv.outputs) != 1:
            continue
        x, y = graph.values.get(conv.inputs[0]), graph.values.get(conv.outputs[0])
        w = constant_initializer(graph, conv.inputs[1])  # an overridable W is fed as it is: not reshaped here
        if x is None or y is None or w is None or x.dtype != _FLOAT or w.dtype != _FLOAT or len(w.dims) != 3:
            continue
        if x.shape is None or len(x.shape) != 3 or (y.shape is not None and len(y.shape) != 3):
            continue
        attributes = _lifted(conv)
        if attributes is None or (w.dims[1] == 1 and int(conv.attr("group", 1)) > 1
                                  and any(int(v) > 1 for v in conv.attr("strides", None) or [1])):
            continue
        base = conv.name + _SUFFIX
        w4 = _constant(graph, base + "/W", np.asarray(w.numpy()).reshape(w.dims[0], w.dims[1], 1, w.dims[2]))
        to4 = _constant(graph, base + "/shape4", np.array([0, 0, 1, -1], np.int64))
        to3 = _constant(graph, base + "/shape3", np.array([0, 0, -1], np.int64))
        n, c, width = x.shape
        x4 = _value(graph, _fresh(graph, base + "/X4"), _FLOAT, (n, c, 1, width))
        y4 = _value(graph, _fresh(graph, base + "/Y4"), _FLOAT,
                    None if y.shape is None else (y.shape[0], y.shape[1], 1, y.shape[2]))
        graph.detach_node(conv)
        meta = dict(conv.metadata)
        new = [graph.add_node("Reshape", [conv.inputs[0], to4], [x4], name=_fresh(graph, base + "/Reshape4"), metadata=meta),
               graph.add_node("Conv", [x4, w4, *conv.inputs[2:]], [y4], name=_fresh(graph, base), attributes=attributes,
                              metadata=meta),
               graph.add_node("Reshape", [y4, to3], list(conv.outputs), name=_fresh(graph, base + "/Reshape3"), metadata=meta)]
        placed[id(conv)] = new
        records.append(FusionRecord("Conv1dAs2d", (conv.name,), tuple(m.name for m in new)))
    if records:
        graph.compact(placed)
    return records
