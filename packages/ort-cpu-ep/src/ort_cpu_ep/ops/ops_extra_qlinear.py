"""com.microsoft quantized-operator kernels (QOperator / QDQ-contrib exports) and small math contribs.

Quantized tensors are (q, scale, zero_point) with real = (q - zero_point) * scale; results are requantized
as saturate(round_half_even(real / scale) + zero_point), the rounding ONNX Runtime uses. QuantizeLinear /
DequantizeLinear (com.microsoft) take per-tensor or per-axis (`axis`, default 1) parameters and 8/16-bit and
4-bit types. The QOperator ops (QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu,
QLinearGlobalAveragePool, QLinearConcat, QGemm) are in ops_extra_qops. GemmFastGelu is FastGelu(X W + b);
Inverse and Trilu as their names say.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import TensorProto

from ort_graph import Node, dtype_name

from ._qdq_into import dequantize_fast, dequantize_into, quantize_into, quantize_slots
from ._registry import Decline, InputInfo, OpImpl, register

MS = "com.microsoft"
_Q8 = frozenset({TensorProto.INT8, TensorProto.UINT8})
_QTYPES = _Q8 | {TensorProto.INT16, TensorProto.UINT16, TensorProto.INT32, TensorProto.INT4, TensorProto.UINT4}


def _limits(dtype: np.dtype) -> tuple[int, int]:
    name = np.dtype(dtype).name
    if name == "int4":
        return -8, 7
    if name == "uint4":
        return 0, 15
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def dequant(q: np.ndarray, scale: np.ndarray, zp: np.ndarray | None) -> np.ndarray:
    z = np.float32(0) if zp is None else np.asarray(zp).astype(np.float32)
    return (q.astype(np.float32) - z) * np.asarray(scale, np.float32)


def quant(x: np.ndarray, scale: np.ndarray, zp: np.ndarray | None, dtype: np.dtype) -> np.ndarray:
    lo, hi = _limits(dtype)
    z = np.float32(0) if zp is None else np.asarray(zp).astype(np.float32)
    return np.clip(np.rint(x.astype(np.float32) / np.asarray(scale, np.float32)) + z, lo, hi).astype(dtype)


def _per_axis(p: np.ndarray | None, ndim: int, axis: int) -> np.ndarray | None:
    """A 1-D per-axis parameter reshaped to broadcast along `axis`; scalars stay scalars."""
    if p is None or np.ndim(p) == 0 or np.size(p) == 1:
        return None if p is None else np.asarray(p).reshape(())
    shape = [1] * ndim
    shape[axis % ndim] = np.size(p)
    return np.asarray(p).reshape(shape)


def _check(inputs: Sequence[InputInfo], allowed: dict[int, frozenset[int]]) -> Decline | None:
    for i, ok in allowed.items():
        if i < len(inputs) and inputs[i].present and inputs[i].dtype and inputs[i].dtype not in ok:
            return Decline(rejected=f"input {i} dtype {dtype_name(inputs[i].dtype)}",
                           accepts=", ".join(sorted(dtype_name(d) for d in ok)))
    return None


def _scalars(inputs: Sequence[InputInfo], idxs: Sequence[int]) -> Decline | None:
    """Decline per-channel parameters where the kernel takes per-tensor ones."""
    for i in idxs:
        if i < len(inputs) and inputs[i].present and inputs[i].shape is not None:
            dims = inputs[i].shape
            if any(not isinstance(d, int) for d in dims) or int(np.prod(dims)) != 1:
                return Decline(rejected=f"input {i} shape {dims!r} (per-channel quantization parameter)",
                               accepts="per-tensor (one-element) scale and zero point",
                               remedy="requantize per tensor or use QDQ with DequantizeLinear")
    return None


_F = frozenset({TensorProto.FLOAT})
_FH = frozenset({TensorProto.FLOAT, TensorProto.FLOAT16})


@register("DequantizeLinear", domain=MS)
class DequantizeLinearContrib(OpImpl):
    writes_output = True  # 8/16-bit to float32
    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        return _check(inputs, {0: _QTYPES, 1: _FH, 2: _QTYPES})

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        x, scale = inputs[0], inputs[1]
        zp = inputs[2] if len(inputs) > 2 else None
        axis = int(node.attr("axis", 1))
        s, z = _per_axis(scale, x.ndim, axis), _per_axis(zp, x.ndim, axis)
        into = dequantize_into(self, x, s, z)
        return [into if into is not None else dequant(x, s, z).astype(scale.dtype)]

    def workspace_bytes(self, node: Node, input_shapes: Sequence[tuple[int, ...] | None]) -> list[tuple[int, int]]:
        """None in the common case (into the block); else the float32 temporaries of x's size."""
        x = input_shapes[0] if input_shapes else None
        return [] if x is None or dequantize_fast(node) else [(0, 8 * int(np.prod(x, dtype=np.int64)))]


@register("QuantizeLinear", domain=MS)
class QuantizeLinearContrib(OpImpl):
    writes_output = True  # float32 to 8/16-bit
    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        return _check(inputs, {0: _FH, 1: _FH, 2: _QTYPES - {TensorProto.INT32}})

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        x, scale = inputs[0], inputs[1]
        zp = inputs[2] if len(inputs) > 2 else None
        axis = int(node.attr("axis", 1))
        dtype = zp.dtype if zp is not None else np.dtype(np.uint8)
        s, z = _per_axis(scale, x.ndim, axis), _per_axis(zp, x.ndim, axis)
        into = quantize_into(self, x, np.asarray(s), z, dtype)
        return [into if into is not None else quant(x, s, z, dtype)]

    def workspace_bytes(self, node: Node, input_shapes: Sequence[tuple[int, ...] | None]) -> list[tuple[int, int]]:
        return quantize_slots(input_shapes[0] if input_shapes else None)


@register("GemmFastGelu", domain=MS)
class GemmFastGelu(OpImpl):
    dtypes = frozenset({TensorProto.FLOAT, TensorProto.FLOAT16})

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        x, w = inputs[0], inputs[1]
        bias = inputs[2] if len(inputs) > 2 else None
        y = x.astype(np.float32) @ w.astype(np.float32)
        if bias is not None:
            y = y + bias.astype(np.float32)
        f = np.float32
        y = f(0.5) * y * (f(1) + np.tanh(f(0.7978845608028654) * (y + f(0.044715) * y * y * y)))
        return [y.astype(x.dtype)]


@register("Inverse", domain=MS)
class Inverse(OpImpl):
    dtypes = frozenset({TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE})

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        x = inputs[0]
        return [np.linalg.inv(x.astype(np.float64 if x.dtype == np.float64 else np.float32)).astype(x.dtype)]


@register("Trilu", domain=MS)
class TriluContrib(OpImpl):
    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        x = inputs[0]
        k = int(np.asarray(inputs[1]).reshape(())) if len(inputs) > 1 and inputs[1] is not None else 0
        keep = np.triu(np.ones(x.shape[-2:], bool), k) if int(node.attr("upper", 1)) else \
            np.tril(np.ones(x.shape[-2:], bool), k)
        return [np.where(keep, x, np.zeros((), x.dtype))]


__all__ = ["DequantizeLinearContrib", "GemmFastGelu", "Inverse", "QuantizeLinearContrib", "TriluContrib", "dequant",
           "quant"]
