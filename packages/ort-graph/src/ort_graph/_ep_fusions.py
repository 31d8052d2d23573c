"""Fusions an execution provider runs on the nodes it claimed (003's Optimization surface), after
placement: not Level-1 passes (they rewrite only inside one provider's nodes). Named like the L1 fusions
(`<conv name>/ConvAddFusion`, `<mul name>/SiLUFusion`), so name-based rules keep matching.
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np
from onnx import AttributeProto

from ._fusions import FusionRecord, _only_consumer, _replace
from ._ir import Attr, Graph, Node
from ._tensor import Tensor

__all__ = ["fuse_conv_add", "fuse_silu"]

_SILU_DTYPES = frozenset({1, 10, 11})  # float32, float16, float64


def _channel_bias(graph: Graph, name: str, channels: int, rank: int) -> np.ndarray | None:
    """The initializer `name` as a per-output-channel bias [M] when it broadcasts as [1, M, 1, ...] (or
    [M, 1, ...]) against a rank-`rank` Conv output; None otherwise."""
    t = graph.initializers.get(name)
    if t is None:
        return None
    dims = tuple(t.dims)
    spatial = rank - 2
    if dims not in ((1, channels, *[1] * spatial), (channels, *[1] * spatial)):
        return None
    return np.asarray(t.numpy()).reshape(channels)


def fuse_conv_add(graph: Graph, nodes: Collection[Node] | None = None) -> list[FusionRecord]:
    """Conv(X, W) without a bias, whose only consumer is Add(., B) with B a per-channel constant ->
    Conv(X, W, B[M]). Only pairs whose both nodes are in `nodes` (all when None) are fused."""
    allowed = None if nodes is None else {id(n) for n in nodes}
    records: list[FusionRecord] = []
    for conv in [n for n in graph.nodes if n.op_type == "Conv" and n.domain in ("", "ai.onnx")]:
        if len(conv.inputs) != 2 or conv.inputs[1] not in graph.initializers:
            continue
        add = _only_consumer(graph, conv.outputs[0])
        if add is None or add.op_type != "Add" or add.domain not in ("", "ai.onnx"):
            continue
        if allowed is not None and (id(conv) not in allowed or id(add) not in allowed):
            continue
        other = add.inputs[1] if add.inputs[0] == conv.outputs[0] else add.inputs[0]
        w = graph.initializers[conv.inputs[1]]
        out = graph.values.get(conv.outputs[0])
        rank = len(out.shape) if out is not None and out.shape is not None else len(w.dims)
        bias = _channel_bias(graph, other, int(w.dims[0]), rank)
        y = graph.values.get(add.outputs[0])
        if bias is None or y is None or out is None or y.dtype != out.dtype or y.shape != out.shape:
            continue
        name = graph.generate_node_name(conv.name + "/ConvAddFusion/bias")
        graph.initializers[name] = Tensor.from_numpy(name, np.ascontiguousarray(bias.astype(bias.dtype)))
        graph.value(name).dtype, graph.value(name).shape = graph.initializers[name].dtype, (int(w.dims[0]),)
        fused = _replace(graph, [conv, add], "Conv", [conv.inputs[0], conv.inputs[1], name], [add.outputs[0]],
                         "/ConvAddFusion", attributes=dict(conv.attributes))
        records.append(FusionRecord("ConvAddFusion", (conv.name, add.name), (fused.name,)))
    return records


def fuse_silu(graph: Graph, nodes: Collection[Node] | None = None) -> list[FusionRecord]:
    """Mul(x, Sigmoid(x)) (either operand order), whose Sigmoid output only that Mul reads ->
    com.microsoft QuickGelu(x, alpha=1.0) named `<mul name>/SiLUFusion`. Only pairs whose both nodes are in
    `nodes` (all when None) are fused."""
    allowed = None if nodes is None else {id(n) for n in nodes}
    records: list[FusionRecord] = []
    for sig in [n for n in graph.nodes if n.op_type == "Sigmoid" and n.domain in ("", "ai.onnx")]:
        if len(sig.inputs) != 1 or len(sig.outputs) != 1:
            continue
        x, s = sig.inputs[0], sig.outputs[0]
        mul = _only_consumer(graph, s)
        if mul is None or mul.op_type != "Mul" or mul.domain not in ("", "ai.onnx") or sorted(mul.inputs) != sorted([x, s]):
            continue
        if x == s or (allowed is not None and (id(sig) not in allowed or id(mul) not in allowed)):
            continue
        xv, y = graph.values.get(x), graph.values.get(mul.outputs[0])
        if xv is None or y is None or xv.dtype not in _SILU_DTYPES or y.dtype != xv.dtype or y.shape != xv.shape:
            continue
        fused = _replace(graph, [mul, sig], "QuickGelu", [x], [mul.outputs[0]], "/SiLUFusion",
                         attributes={"alpha": Attr("alpha", AttributeProto.FLOAT, 1.0)}, domain="com.microsoft")
        records.append(FusionRecord("SiLUFusion", (sig.name, mul.name), (fused.name,)))
    return records
