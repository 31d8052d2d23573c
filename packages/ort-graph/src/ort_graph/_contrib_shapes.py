"""Output types of ops that ONNX's own inference does not know (com.microsoft ops exported LLMs use).

Each handler maps (node, input types, constant inputs) to output types. An input type is
(dtype, shape | None); a handler returns one per output ((0, None) where it cannot tell).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from onnx import TensorProto

from ._ir import Dim, Node, Shape

Type = tuple[int, Shape | None]
Handler = Callable[[Node, list[Type], dict[int, np.ndarray]], list[Type]]
_HANDLERS: dict[tuple[str, str], Handler] = {}
UNKNOWN: Type = (0, None)


def _handles(*keys: tuple[str, str]):
    def deco(fn: Handler) -> Handler:
        for k in keys:
            _HANDLERS[k] = fn
        return fn

    return deco


def handler_for(domain: str, op_type: str) -> Handler | None:
    return _HANDLERS.get(("" if domain == "ai.onnx" else domain, op_type))


def _stat_shape(shape: Shape | None, axis: int) -> Shape | None:
    if shape is None:
        return None
    axis = axis % len(shape) if shape else 0
    return tuple(shape[:axis]) + (1,) * (len(shape) - axis)


@_handles(("", "SimplifiedLayerNormalization"), ("com.microsoft", "SimplifiedLayerNormalization"),
          ("com.microsoft", "LayerNormalization"))
def _layer_norm(node: Node, ins: list[Type], _c: dict) -> list[Type]:
    dtype, shape = ins[0]
    stash = node.attr("stash_type", 1)
    stat = (stash, _stat_shape(shape, node.attr("axis", -1)))
    return [(dtype, shape), stat, stat][: len(node.outputs)]


@_handles(("com.microsoft", "SkipSimplifiedLayerNormalization"), ("com.microsoft", "SkipLayerNormalization"))
def _skip_layer_norm(node: Node, ins: list[Type], _c: dict) -> list[Type]:
    dtype, shape = ins[0]
    stat = (TensorProto.FLOAT, _stat_shape(shape, -1))
    return [(dtype, shape), stat, stat, (dtype, shape)][: len(node.outputs)]


@_handles(("com.microsoft", "MatMulNBits"))
def _matmul_nbits(node: Node, ins: list[Type], _c: dict) -> list[Type]:
    dtype, shape = ins[0]
    n = node.attr("N")
    if shape is None or n is None:
        return [(dtype, None)]
    return [(dtype, tuple(shape[:-1]) + (int(n),))]


@_handles(("com.microsoft", "RotaryEmbedding"), ("", "RotaryEmbedding"), ("com.microsoft", "Gelu"),
          ("com.microsoft", "FastGelu"), ("com.microsoft", "QuickGelu"), ("com.microsoft", "BiasGelu"),
          ("com.microsoft", "BiasAdd"))
def _same_as_input(node: Node, ins: list[Type], _c: dict) -> list[Type]:
    return [ins[0]] + [UNKNOWN] * (len(node.outputs) - 1)


def broadcast(a: Shape, b: Shape) -> Shape:
    """Numpy broadcasting over possibly symbolic dims (None where it cannot tell)."""
    out: list[Dim] = []
    for i in range(max(len(a), len(b))):
        x = a[len(a) - 1 - i] if i < len(a) else 1
        y = b[len(b) - 1 - i] if i < len(b) else 1
        if x == 1:
            out.append(y)
        elif y == 1 or x == y:
            out.append(x)
        elif isinstance(x, int) and isinstance(y, int):
            raise ValueError(f"shapes {a} and {b} do not broadcast")
        else:
            out.append(x if isinstance(x, int) else y if isinstance(y, int) else None)
    return tuple(reversed(out))


def matmul_shape(a: Shape | None, b: Shape | None) -> Shape | None:
    """numpy.matmul's output shape for operands of rank >= 2 (None where it cannot tell)."""
    if a is None or b is None or len(a) < 2 or len(b) < 2:
        return None
    return broadcast(tuple(a[:-2]), tuple(b[:-2])) + (a[-2], b[-1])


@_handles(("com.microsoft", "FusedMatMul"))
def _fused_matmul(node: Node, ins: list[Type], _c: dict) -> list[Type]:
    (dt, a), (_, b) = ins[0], ins[1]
    if a is not None and len(a) >= 2 and node.attr("transA", 0):
        a = tuple(a[:-2]) + (a[-1], a[-2])
    if b is not None and len(b) >= 2 and node.attr("transB", 0):
        b = tuple(b[:-2]) + (b[-1], b[-2])
    return [(dt, matmul_shape(a, b))]


@_handles(("com.microsoft", "FusedConv"))
def _fused_conv(node: Node, ins: list[Type], _c: dict) -> list[Type]:
    """Conv's output shape (N, M, spatial...): pads explicit, or from auto_pad (SAME_*: ceil(in / stride); VALID)."""
    (dt, x), (_, w) = ins[0], ins[1]
    if x is None or w is None or len(x) < 3 or len(w) != len(x):
        return [(dt, None)]
    n = len(x) - 2
    kernel = list(node.attr("kernel_shape") or w[2:])
    strides, dil = list(node.attr("strides") or [1] * n), list(node.attr("dilations") or [1] * n)
    pads, auto = list(node.attr("pads") or [0] * 2 * n), node.attr("auto_pad", "NOTSET")
    spatial: list[Dim] = []
    for i in range(n):
        size, k = x[2 + i], kernel[i]
        if not isinstance(size, int) or not isinstance(k, int):
            spatial.append(None)
        elif auto in ("SAME_UPPER", "SAME_LOWER"):
            spatial.append(-(-size // strides[i]))
        else:
            total = 0 if auto == "VALID" else pads[i] + pads[n + i]
            spatial.append((size + total - (k - 1) * dil[i] - 1) // strides[i] + 1)
    return [(dt, (x[0], w[0], *spatial))]


@_handles(("com.microsoft", "GemmFastGelu"))
def _gemm_fast_gelu(node: Node, ins: list[Type], _c: dict) -> list[Type]:
    (dt, x), (_, w) = ins[0], ins[1]
    return [(dt, matmul_shape(x, w))]


@_handles(("com.microsoft", "GroupQueryAttention"))
def _gqa(node: Node, ins: list[Type], consts: dict[int, np.ndarray]) -> list[Type]:
    def at(i: int) -> Type:
        return ins[i] if i < len(ins) else UNKNOWN

    dtype, q = at(0)
    heads, kv_heads = int(node.attr("num_heads", 0)), int(node.attr("kv_num_heads", 0))
    _, k = at(1)
    _, past = at(3)
    head: Dim = None
    if past is not None and len(past) == 4:
        head = past[3]
    if not isinstance(head, int) and q is not None and len(q) == 3 and isinstance(q[2], int) and heads:
        if k is not None:
            head = q[2] // heads
        elif heads + 2 * kv_heads:
            head = q[2] // (heads + 2 * kv_heads)
    if q is None or len(q) != 3:
        return [(dtype, None), (dtype, None), (dtype, None)][: len(node.outputs)]
    batch, seq = q[0], q[1]
    out = (dtype, (batch, seq, heads * head if isinstance(head, int) else None))
    total: Dim = None
    if 6 in consts and consts[6].size == 1:
        total = int(consts[6].reshape(-1)[0])
        if past is not None and len(past) == 4 and isinstance(past[2], int):
            total = max(total, past[2])
    present = (dtype, (batch, kv_heads, total, head))
    return [out, present, present][: len(node.outputs)]


@_handles(("", "Dropout"))
def _dropout(node: Node, ins: list[Type], _c: dict) -> list[Type]:
    """ONNX's inference leaves Dropout-7..11's optional mask untyped; it is a bool tensor of the input's shape."""
    dtype, shape = ins[0]
    return [(dtype, shape), (TensorProto.BOOL, shape)][: len(node.outputs)]


from . import _attention_shapes as _attention_shapes  # noqa: E402,F401  (registers Attention, MHA, ...)
from . import _quant_shapes as _quant_shapes  # noqa: E402,F401  (registers the quantized ops)
