"""Output types of the quantized com.microsoft ops real exporters write (onnxruntime-genai's builder, ORT's
static and dynamic quantizers, Olive): GatherBlockQuantized, DynamicQuantizeMatMul, MatMulIntegerToFloat,
QGemm, the QLinear* element-wise / pooling / concat ops (QLinearAveragePool too), com.microsoft Quantize/DequantizeLinear,
QAttention and DynamicQuantizeLSTM. Same handler contract as `_contrib_shapes`."""

from __future__ import annotations

from onnx import TensorProto

from ._contrib_shapes import UNKNOWN, Type, _handles, broadcast, matmul_shape
from ._ir import Dim, Node


def _at(ins: list[Type], i: int) -> Type:
    return ins[i] if i < len(ins) else UNKNOWN


@_handles(("com.microsoft", "GatherBlockQuantized"))
def _gather_block_quantized(node: Node, ins: list[Type], _c: dict) -> list[Type]:
    """data.shape[:g] + indices.shape + data.shape[g+1:]; packed uint8 data (bits < 8) holds 8 // bits values a
    byte along its last axis. The output takes the scales' dtype."""
    (ddt, data), (_, idx), (sdt, _s) = _at(ins, 0), _at(ins, 1), _at(ins, 2)
    if data is None or idx is None:
        return [(sdt, None)]
    r = len(data)
    g = int(node.attr("gather_axis", 0))
    if not -r <= g < r:
        raise ValueError(f"gather_axis={g} is out of range for data of rank {r}")
    g %= r
    dims = list(data)
    bits = int(node.attr("bits", 4))
    if ddt == TensorProto.UINT8 and bits < 8:
        last = dims[-1]
        dims[-1] = last * (8 // bits) if isinstance(last, int) else None
    return [(sdt, tuple(dims[:g]) + tuple(idx) + tuple(dims[g + 1:]))]


@_handles(("com.microsoft", "DynamicQuantizeMatMul"), ("com.microsoft", "MatMulIntegerToFloat"))
def _matmul_to_float(node: Node, ins: list[Type], _c: dict) -> list[Type]:
    """Float A (DynamicQuantizeMatMul) or the a_scale's dtype (MatMulIntegerToFloat), MatMul's shape."""
    (adt, a), (_, b) = _at(ins, 0), _at(ins, 1)
    dtype = adt if node.op_type == "DynamicQuantizeMatMul" else _at(ins, 2)[0]
    return [(dtype, matmul_shape(a, b))]


@_handles(("com.microsoft", "QGemm"))
def _qgemm(node: Node, ins: list[Type], _c: dict) -> list[Type]:
    """(M, N) after transA / transB; quantized to y_zero_point's dtype when y_scale is given, else float32."""
    (_, a), (_, b) = _at(ins, 0), _at(ins, 3)
    has_y, has_zp = (len(node.inputs) > i and bool(node.inputs[i]) for i in (7, 8))
    dtype = (_at(ins, 8)[0] if has_zp else TensorProto.UINT8) if has_y else TensorProto.FLOAT
    if a is None or b is None or len(a) != 2 or len(b) != 2:
        return [(dtype, None)]
    m = a[1] if node.attr("transA", 0) else a[0]
    n = b[0] if node.attr("transB", 0) else b[1]
    return [(dtype, (m, n))]


@_handles(("com.microsoft", "QLinearAdd"), ("com.microsoft", "QLinearMul"))
def _qlinear_binary(node: Node, ins: list[Type], _c: dict) -> list[Type]:
    (dt, a), (_, b) = _at(ins, 0), _at(ins, 3)
    return [(dt, None if a is None or b is None else broadcast(a, b))]


@_handles(("com.microsoft", "QLinearSigmoid"), ("com.microsoft", "QLinearLeakyRelu"),
          ("com.microsoft", "QLinearSoftmax"), ("com.microsoft", "Inverse"), ("com.microsoft", "Trilu"),
          ("com.microsoft", "MoE"), ("com.microsoft", "QMoE"))
def _same_type(node: Node, ins: list[Type], _c: dict) -> list[Type]:
    return [_at(ins, 0)] + [UNKNOWN] * (len(node.outputs) - 1)


@_handles(("com.microsoft", "QLinearGlobalAveragePool"))
def _qlinear_gap(node: Node, ins: list[Type], _c: dict) -> list[Type]:
    dt, x = _at(ins, 0)
    if x is None or len(x) < 3:
        return [(dt, None)]
    if node.attr("channels_last", 0):
        return [(dt, (x[0],) + (1,) * (len(x) - 2) + (x[-1],))]
    return [(dt, (x[0], x[1]) + (1,) * (len(x) - 2))]


def _pooled(size: Dim, k: int, s: int, pb: int, pe: int, ceil: bool, auto: str) -> Dim:
    if not isinstance(size, int):
        return None
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        return -(-size // s)
    if auto == "VALID":
        pb = pe = 0
    span = size + pb + pe - k
    if ceil:
        o = -(-span // s) + 1
        return max(o - 1 if (o - 1) * s >= size + pb else o, 0)
    return max(span // s + 1, 0)


@_handles(("com.microsoft", "QLinearAveragePool"))
def _qlinear_average_pool(node: Node, ins: list[Type], _c: dict) -> list[Type]:
    """AveragePool's output size over the spatial axes (NCHW, or NHWC with channels_last)."""
    dt, x = _at(ins, 0)
    kernel = node.attr("kernel_shape")
    if x is None or len(x) < 3 or not kernel:
        return [(dt, None)]
    n = len(x) - 2
    last = bool(node.attr("channels_last", 0))
    spatial = list(x[1:-1] if last else x[2:])
    strides = list(node.attr("strides") or [1] * n)
    pads = list(node.attr("pads") or [0] * (2 * n))
    auto = node.attr("auto_pad", "NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else str(auto)
    ceil = bool(node.attr("ceil_mode", 0))
    outs = tuple(_pooled(spatial[i], int(kernel[i]), int(strides[i]), int(pads[i]), int(pads[n + i]), ceil, auto)
                 for i in range(n))
    return [(dt, (x[0],) + outs + (x[-1],) if last else (x[0], x[1]) + outs)]


@_handles(("com.microsoft", "QLinearConcat"))
def _qlinear_concat(node: Node, ins: list[Type], _c: dict) -> list[Type]:
    """Inputs: Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per tensor; the output takes Y_zero_point's dtype."""
    dtype = _at(ins, 1)[0]
    shapes = [ins[i][1] for i in range(2, len(ins), 3)]
    if not shapes or any(s is None for s in shapes) or len({len(s) for s in shapes}) != 1:
        return [(dtype, None)]
    r = len(shapes[0])
    axis = int(node.attr("axis", 0))
    if not -r <= axis < r:
        raise ValueError(f"axis={axis} is out of range for inputs of rank {r}")
    axis %= r
    parts = [s[axis] for s in shapes]
    total: Dim = sum(parts) if all(isinstance(p, int) for p in parts) else None
    return [(dtype, tuple(shapes[0][:axis]) + (total,) + tuple(shapes[0][axis + 1:]))]


@_handles(("com.microsoft", "QuantizeLinear"), ("com.microsoft", "DequantizeLinear"))
def _q_dq(node: Node, ins: list[Type], _c: dict) -> list[Type]:
    """QuantizeLinear: zero point's dtype (uint8 without one); DequantizeLinear: the scale's dtype."""
    _, x = _at(ins, 0)
    if node.op_type == "DequantizeLinear":
        return [(_at(ins, 1)[0], x)]
    zp = len(node.inputs) > 2 and bool(node.inputs[2])
    return [((_at(ins, 2)[0] if zp else TensorProto.UINT8), x)]


@_handles(("com.microsoft", "QAttention"))
def _qattention(node: Node, ins: list[Type], _c: dict) -> list[Type]:
    """input (B, S, in_hidden), weight (in_hidden, 3 * hidden), past (2, B, N, P, H): output (B, S, hidden)
    in the input scale's dtype, present (2, B, N, P + S, H)."""
    (_, x), (_, w), (sdt, _s), (_, past) = _at(ins, 0), _at(ins, 1), _at(ins, 3), _at(ins, 8)
    heads = int(node.attr("num_heads", 0))
    hidden: Dim = w[1] // 3 if w is not None and len(w) == 2 and isinstance(w[1], int) else None
    if x is None or len(x) != 3:
        return [(sdt, None), (sdt, None)][: len(node.outputs)]
    out = (sdt, (x[0], x[1], hidden))
    head = hidden // heads if isinstance(hidden, int) and heads else None
    total: Dim = None
    if past is not None and len(past) == 5:
        total = past[3] + x[1] if isinstance(past[3], int) and isinstance(x[1], int) else None
    elif len(node.inputs) <= 8 or not node.inputs[8]:
        total = x[1]
    return [out, (sdt, (2, x[0], heads or None, total, head))][: len(node.outputs)]


@_handles(("com.microsoft", "DynamicQuantizeLSTM"))
def _dq_lstm(node: Node, ins: list[Type], _c: dict) -> list[Type]:
    """ONNX LSTM's outputs (layout 0): Y (S, D, B, H), Y_h and Y_c (D, B, H); float like X."""
    dt, x = _at(ins, 0)
    hidden = node.attr("hidden_size")
    d = 2 if node.attr("direction", "forward") in ("bidirectional", b"bidirectional") else 1
    h: Dim = int(hidden) if hidden is not None else None
    if x is None or len(x) != 3:
        return [(dt, None)] * len(node.outputs)
    state = (dt, (d, x[1], h))
    return [(dt, (x[0], d, x[1], h)), state, state][: len(node.outputs)]


__all__: list[str] = []
