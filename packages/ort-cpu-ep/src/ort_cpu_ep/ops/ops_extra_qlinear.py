"""com.microsoft quantized-operator kernels (QOperator / QDQ-contrib exports) and small math contribs.

Quantized tensors are (q, scale, zero_point) with real = (q - zero_point) * scale; results are requantized
as saturate(round_half_even(real / scale) + zero_point), the rounding ONNX Runtime uses. QuantizeLinear /
DequantizeLinear (com.microsoft) take per-tensor or per-axis (`axis`, default 1) parameters and 8/16-bit and
4-bit types. Element-wise ops (QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu) compute in float32
on the dequantized values; QLinearGlobalAveragePool averages the spatial axes (NCHW or channels_last);
QLinearConcat requantizes each input to the output parameters; QGemm accumulates integers (plus int32 C)
and scales by alpha * a_scale * b_scale, requantizing when y_scale is given. GemmFastGelu is FastGelu(X W + b);
Inverse and Trilu as their names say.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import TensorProto

from ort_graph import Node, dtype_name

from ._registry import Decline, InputInfo, OpImpl, attrs_of, register

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
    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        return _check(inputs, {0: _QTYPES, 1: _FH, 2: _QTYPES})

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        x, scale = inputs[0], inputs[1]
        zp = inputs[2] if len(inputs) > 2 else None
        axis = int(node.attr("axis", 1))
        y = dequant(x, _per_axis(scale, x.ndim, axis), _per_axis(zp, x.ndim, axis))
        return [y.astype(scale.dtype)]


@register("QuantizeLinear", domain=MS)
class QuantizeLinearContrib(OpImpl):
    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        return _check(inputs, {0: _FH, 1: _FH, 2: _QTYPES - {TensorProto.INT32}})

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        x, scale = inputs[0], inputs[1]
        zp = inputs[2] if len(inputs) > 2 else None
        axis = int(node.attr("axis", 1))
        dtype = zp.dtype if zp is not None else np.dtype(np.uint8)
        return [quant(x, _per_axis(scale, x.ndim, axis), _per_axis(zp, x.ndim, axis), dtype)]


class _QBinary(OpImpl):
    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        return _check(inputs, {0: _Q8, 3: _Q8, 1: _F, 4: _F, 6: _F}) or _scalars(inputs, (1, 2, 4, 5, 6, 7))

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        a, sa, za, b, sb, zb, sc = inputs[:7]
        zc = inputs[7] if len(inputs) > 7 else None
        f = np.float32
        va = a.astype(f) - (f(0) if za is None else np.asarray(za).astype(f))
        vb = b.astype(f) - (f(0) if zb is None else np.asarray(zb).astype(f))
        r = self.fn(va, vb, f(np.asarray(sa).reshape(())), f(np.asarray(sb).reshape(())), f(np.asarray(sc).reshape(())))
        lo, hi = _limits(a.dtype)
        z = f(0) if zc is None else np.asarray(zc).astype(f)
        return [np.clip(np.rint(r) + z, lo, hi).astype(a.dtype)]

    def fn(self, va: np.ndarray, vb: np.ndarray, sa: np.float32, sb: np.float32, sc: np.float32) -> np.ndarray:
        """The result in output-scale units (before the output zero point), as MLAS orders the arithmetic."""
        raise NotImplementedError


@register("QLinearAdd", domain=MS)
class QLinearAdd(_QBinary):
    def fn(self, va, vb, sa, sb, sc):
        return va * (sa / sc) + vb * (sb / sc)


@register("QLinearMul", domain=MS)
class QLinearMul(_QBinary):
    def fn(self, va, vb, sa, sb, sc):
        return va * vb * (sa * sb / sc)


class _QUnary(OpImpl):
    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        return _check(inputs, {0: _Q8, 1: _F, 3: _F}) or _scalars(inputs, (1, 2, 3, 4))

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        x, sx = inputs[0], inputs[1]
        zx = inputs[2] if len(inputs) > 2 else None
        sy = inputs[3]
        zy = inputs[4] if len(inputs) > 4 else None
        # through a 256-entry table, as ORT: every input code maps to one output code
        info = np.iinfo(x.dtype)
        codes = np.arange(info.min, info.max + 1).astype(x.dtype)
        table = quant(self.fn(node, dequant(codes, sx, zx)), sy, zy, x.dtype)
        return [table[x.astype(np.int64) - info.min]]

    def fn(self, node: Node, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError


@register("QLinearSigmoid", domain=MS)
class QLinearSigmoid(_QUnary):
    def fn(self, node, x):
        return 1 / (1 + np.exp(-x))


@register("QLinearLeakyRelu", domain=MS)
class QLinearLeakyRelu(_QUnary):
    def fn(self, node, x):
        return np.where(x >= 0, x, np.float32(node.attr("alpha", 0.01)) * x)


@register("QLinearGlobalAveragePool", domain=MS)
class QLinearGlobalAveragePool(OpImpl):
    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        d = _check(inputs, {0: _Q8, 2: _Q8, 4: _Q8}) or _scalars(inputs, (1, 2, 3, 4))
        if d is None and inputs[0].shape is not None and len(inputs[0].shape) < 3:
            return Decline(rejected=f"X rank {len(inputs[0].shape)}", accepts="rank >= 3", remedy="reshape X")
        return d

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        x, sx, zx, sy, zy = inputs[:5]
        last = int(node.attr("channels_last", 0))
        axes = tuple(range(1, x.ndim - 1)) if last else tuple(range(2, x.ndim))
        mean = dequant(x, sx, zx).mean(axis=axes, keepdims=True)
        return [quant(mean, sy, zy, x.dtype)]


@register("QLinearConcat", domain=MS)
class QLinearConcat(OpImpl):
    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        if (len(inputs) - 2) % 3:
            return Decline(rejected=f"{len(inputs)} inputs", accepts="Y_scale, Y_zero_point, then (X, scale, zp) triples",
                           remedy="fix the node inputs")
        return _check(inputs, {1: _Q8} | {i: _Q8 for i in range(2, len(inputs), 3)}) or _scalars(
            inputs, [0, 1] + [i for k in range(2, len(inputs), 3) for i in (k + 1, k + 2)])

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        sy, zy = inputs[0], inputs[1]
        parts = [dequant(inputs[i], inputs[i + 1], inputs[i + 2]) for i in range(2, len(inputs), 3)]
        return [quant(np.concatenate(parts, axis=int(node.attr("axis", 0))), sy, zy, zy.dtype)]


@register("QGemm", domain=MS)
class QGemm(OpImpl):
    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        return _check(inputs, {0: _Q8, 3: _Q8, 1: _F, 4: _F, 6: frozenset({TensorProto.INT32}), 7: _F}) or _scalars(
            inputs, (1, 2, 7, 8))

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        a = attrs_of(node)
        qa, sa, za, qb, sb, zb = inputs[:6]
        c = inputs[6] if len(inputs) > 6 else None
        sy = inputs[7] if len(inputs) > 7 else None
        zy = inputs[8] if len(inputs) > 8 else None
        A = qa.astype(np.float64) - np.float64(np.asarray(za).reshape(()))
        B = qb.astype(np.float64) - _per_axis(zb, 2, 0 if int(a.get("transB", 0)) else 1).astype(np.float64)
        A = A.T if int(a.get("transA", 0)) else A
        B = B.T if int(a.get("transB", 0)) else B
        acc = A @ B
        if c is not None:
            acc = acc + c.astype(np.float64)
        sbv = np.asarray(sb, np.float32).reshape(-1)
        mult = np.float32(a.get("alpha", 1.0)) * np.float32(np.asarray(sa).reshape(())) * sbv
        y = acc.astype(np.float32) * mult
        if sy is None:
            return [y]
        return [quant(y, sy, zy, zy.dtype if zy is not None else np.dtype(np.uint8))]


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


__all__ = ["DequantizeLinearContrib", "GemmFastGelu", "Inverse", "QGemm", "QLinearAdd", "QLinearConcat",
           "QLinearGlobalAveragePool", "QLinearLeakyRelu", "QLinearMul", "QLinearSigmoid", "QuantizeLinearContrib",
           "TriluContrib", "dequant", "quant"]
