"""Fusions an execution provider runs on the nodes it claimed (003's Optimization surface), after
placement: not Level-1 passes (they rewrite only inside one provider's nodes). Named like the L1 fusions
(`<conv name>/ConvAddFusion`, `<mul name>/SiLUFusion`), so name-based rules keep matching.
"""

from __future__ import annotations

import math
from collections.abc import Collection

import numpy as np
from onnx import AttributeProto

from ._conv_bn_fusion import _initializer, output_channels
from ._fusions import FusionRecord, _only_consumer, _replace
from ._ir import Attr, Graph, Node
from ._overridable import constant_initializer
from ._rewrite import Rewriter

__all__ = ["fuse_conv_add", "fuse_conv_mul", "fuse_convtranspose_add", "fuse_matmul_transpose", "fuse_silu"]

_SILU_DTYPES = frozenset({1, 10, 11})  # float32, float16, float64
_FUSED_MATMUL_DTYPES = _SILU_DTYPES


def _channel_bias(graph: Graph, name: str, channels: int, rank: int) -> np.ndarray | None:
    """The initializer `name` as a per-output-channel vector [M] when it broadcasts as [1, M, 1, ...] (or
    [M, 1, ...]) against a rank-`rank` Conv output, or is one value of rank at most `rank` (a scalar: repeated);
    None otherwise."""
    t = constant_initializer(graph, name)
    if t is None:
        return None
    dims = tuple(t.dims)
    spatial = rank - 2
    if len(dims) <= rank and all(d == 1 for d in dims):
        return np.full(channels, np.asarray(t.numpy()).reshape(-1)[0], dtype=t.numpy().dtype)
    if dims not in ((1, channels, *[1] * spatial), (channels, *[1] * spatial)):
        return None
    return np.asarray(t.numpy()).reshape(channels)


def fuse_conv_add(graph: Graph, nodes: Collection[Node] | None = None) -> list[FusionRecord]:
    """Conv(X, W[, b]) with constant weights (and bias), whose only consumer is Add(., B) with B a per-channel or
    scalar constant -> Conv(X, W, b + B[M]) (ONNX Runtime's ConvAddFusion). Only pairs whose both nodes are in
    `nodes` (all when None) are fused."""
    return _fuse_conv_constant(graph, nodes, "Add", "ConvAddFusion")


def fuse_convtranspose_add(graph: Graph, nodes: Collection[Node] | None = None) -> list[FusionRecord]:
    """`fuse_conv_add` for ConvTranspose: the per-channel Add after a transposed convolution (paddle2onnx's bias),
    named `<name>/ConvAddFusion`."""
    return _fuse_conv_constant(graph, nodes, "Add", "ConvAddFusion", "ConvTranspose")


def fuse_conv_mul(graph: Graph, nodes: Collection[Node] | None = None) -> list[FusionRecord]:
    """Conv(X, W[, b]) with constant weights (and bias), whose only consumer is Mul(., S) with S a per-channel or
    scalar constant -> Conv(X, W * S[m], b * S) per output channel m (ONNX Runtime's ConvMulFusion). Only pairs
    whose both nodes are in `nodes` (all when None) are fused."""
    return _fuse_conv_constant(graph, nodes, "Mul", "ConvMulFusion")


def _fuse_conv_constant(graph: Graph, nodes: Collection[Node] | None, op: str, fusion: str,
                        op_type: str = "Conv") -> list[FusionRecord]:
    """`op` (Add or Mul; Mul for Conv only: its W is [M, ...]) of a per-channel or scalar constant after an `op_type`
    node with constant weights folded into them."""
    allowed = None if nodes is None else {id(n) for n in nodes}
    records: list[FusionRecord] = []
    rw = Rewriter(graph)
    for conv in [n for n in graph.nodes if n.op_type == op_type and n.domain in ("", "ai.onnx")]:
        if not 2 <= len(conv.inputs) <= 3 or not all(conv.inputs) or any(constant_initializer(graph, i) is None for i in conv.inputs[1:]):
            continue
        other_node = _only_consumer(graph, conv.outputs[0])
        if other_node is None or other_node.op_type != op or other_node.domain not in ("", "ai.onnx"):
            continue
        if allowed is not None and (id(conv) not in allowed or id(other_node) not in allowed):
            continue
        other = other_node.inputs[1] if other_node.inputs[0] == conv.outputs[0] else other_node.inputs[0]
        w = graph.initializers[conv.inputs[1]]
        channels = output_channels(conv, w)
        if channels is None or (len(conv.inputs) == 3 and math.prod(graph.initializers[conv.inputs[2]].dims) != channels):
            continue  # not a convolution's weights, or a bias of another length: left to the kernel's own check
        out = graph.values.get(conv.outputs[0])
        rank = len(out.shape) if out is not None and out.shape is not None else len(w.dims)
        vec = _channel_bias(graph, other, channels, rank)
        y = graph.values.get(other_node.outputs[0])
        if (vec is None or y is None or out is None or y.dtype != out.dtype or y.shape != out.shape or other == conv.outputs[0]
                or graph.initializers[other].dtype != w.dtype):
            continue
        bias = np.asarray(graph.initializers[conv.inputs[2]].numpy()).reshape(channels) if len(conv.inputs) == 3 else None
        inputs = [conv.inputs[0], conv.inputs[1]]
        if op == "Mul":
            wa = np.asarray(w.numpy())
            inputs[1] = _initializer(graph, conv.name + f"/{fusion}/W", wa * vec.reshape(-1, *[1] * (wa.ndim - 1)))
            if bias is not None:
                inputs.append(_initializer(graph, conv.name + f"/{fusion}/bias", bias * vec))
        else:
            inputs.append(_initializer(graph, conv.name + f"/{fusion}/bias", vec if bias is None else bias + vec))
        fused = _replace(rw, [conv, other_node], op_type, inputs, [other_node.outputs[0]], f"/{fusion}",
                         attributes=dict(conv.attributes))
        records.append(FusionRecord(fusion, (conv.name, other_node.name), (fused.name,)))
    rw.finish()
    return records


def fuse_silu(graph: Graph, nodes: Collection[Node] | None = None) -> list[FusionRecord]:
    """Mul(x, Sigmoid(x)) (either operand order), whose Sigmoid output only that Mul reads ->
    com.microsoft QuickGelu(x, alpha=1.0) named `<mul name>/SiLUFusion`. Only pairs whose both nodes are in
    `nodes` (all when None) are fused."""
    allowed = None if nodes is None else {id(n) for n in nodes}
    records: list[FusionRecord] = []
    rw = Rewriter(graph)
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
        fused = _replace(rw, [mul, sig], "QuickGelu", [x], [mul.outputs[0]], "/SiLUFusion",
                         attributes={"alpha": Attr("alpha", AttributeProto.FLOAT, 1.0)}, domain="com.microsoft")
        records.append(FusionRecord("SiLUFusion", (sig.name, mul.name), (fused.name,)))
    rw.finish()
    return records


def _swaps_last_two(graph: Graph, transpose: Node) -> bool:
    """Whether `transpose` swaps the last two axes of its input and keeps the others in place."""
    perm = transpose.attr("perm")
    shape = graph.values[transpose.inputs[0]].shape if transpose.inputs[0] in graph.values else None
    rank = len(shape) if shape is not None else None
    if perm is None or rank is None or len(perm) != rank or rank < 2:
        return False  # no perm means all axes reversed: the same only at rank 2, and then the rank must be known
    return list(perm) == [*range(rank - 2), rank - 1, rank - 2]


def fuse_matmul_transpose(graph: Graph, nodes: Collection[Node] | None = None, trans_a: bool = True) -> list[FusionRecord]:
    """MatMul(Transpose(A), B) / MatMul(A, Transpose(B)) where the Transpose swaps the last two axes and
    only that MatMul reads it -> com.microsoft FusedMatMul(A, B, transA/transB=1), named
    `<matmul name>/MatMulTransposeFusion` (ONNX Runtime's MatmulTransposeFusion does the same): the
    kernel multiplies the transposed view, the transposed copy and its block are gone. Only nodes in
    `nodes` (all when None) take part; `trans_a` False: only B's Transpose (for kernels that take transB only)."""
    allowed = None if nodes is None else {id(n) for n in nodes}
    records: list[FusionRecord] = []
    placed: dict[int, list[Node]] = {}  # the MatMul's id -> its FusedMatMul (one pass over the list at the end)
    for mm in [n for n in graph.nodes if n.op_type == "MatMul" and n.domain in ("", "ai.onnx")]:
        if len(mm.inputs) != 2 or (allowed is not None and id(mm) not in allowed):
            continue
        y = graph.values.get(mm.outputs[0])
        if y is None or y.dtype not in _FUSED_MATMUL_DTYPES:
            continue
        inputs, flags, gone = list(mm.inputs), {}, []
        for i, name in enumerate(mm.inputs):
            if i == 0 and not trans_a:
                continue
            v = graph.values.get(name)
            t = v.producer if v is not None else None
            if (t is None or t.op_type != "Transpose" or t.domain not in ("", "ai.onnx") or t in gone
                    or _only_consumer(graph, name) is not mm or (allowed is not None and id(t) not in allowed)
                    or not _swaps_last_two(graph, t)):
                continue
            inputs[i] = t.inputs[0]
            flags["transA" if i == 0 else "transB"] = Attr("transA" if i == 0 else "transB", AttributeProto.INT, 1)
            gone.append(t)
        if not gone:
            continue
        for old in (*gone, mm):
            graph.detach_node(old)
        fused = graph.add_node("FusedMatMul", inputs, list(mm.outputs), name=mm.name + "/MatMulTransposeFusion",
                               domain="com.microsoft", attributes={"alpha": Attr("alpha", AttributeProto.FLOAT, 1.0), **flags},
                               metadata=dict(mm.metadata))
        placed[id(mm)] = [fused]  # where the MatMul was: after both operands' producers
        records.append(FusionRecord("MatMulTransposeFusion", tuple(n.name for n in (*gone, mm)), (fused.name,)))
    if records:
        graph.compact(placed)
    return records
