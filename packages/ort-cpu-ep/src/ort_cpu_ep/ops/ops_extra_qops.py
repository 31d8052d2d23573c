"""com.microsoft QOperator kernels that ONNX Runtime's static quantizer writes (QuantFormat.QOperator):
QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearSoftmax, QLinearGlobalAveragePool,
QLinearAveragePool, QLinearConcat, QGemm. QLinearAveragePool pools with AveragePool's kernel (its window sums
allocate, as AveragePool's do).

Quantized tensors are (q, scale, zero_point) with real = (q - zero_point) * scale; results are requantized as
saturate(round_half_even(real / scale) + zero_point). Each kernel computes into its output block and keeps
its float temporaries in declared slots: the binary ops their two dequantized operands (output-shaped,
float32); the unary ops (a 256-entry table, as ORT) the table indices; the pool and the concat the
dequantized input / output; QGemm the shared band-wise integer matmul (`_int_matmul`) and a float32 band.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import TensorProto

from ort_graph import Node

from ._int_matmul import STAGE_SLOT, band_cols, column_param, int_matmul_into, int_matmul_slots
from ._registry import Decline, InputInfo, OpImpl, attrs_of, register, workspace_nbytes
from ._util import broadcast_shape
from .ops_extra_qlinear import _F, _Q8, MS, _check, _limits, _per_axis, _scalars, dequant

_f = np.float32


def _scalar(p: np.ndarray | None) -> np.float32:
    return _f(0) if p is None else _f(np.asarray(p).reshape(()).astype(np.float32))


def _requant_into(out: np.ndarray, v: np.ndarray, sy, zy) -> np.ndarray:
    """out = saturate(rint(v / sy) + zy) for float32 `v` (overwritten)."""
    lo, hi = _limits(out.dtype)
    v /= _scalar(sy)
    np.rint(v, out=v)
    v += _scalar(zy)
    np.clip(v, lo, hi, out=v)
    np.copyto(out, v, casting="unsafe")
    return out


class _QBinary(OpImpl):
    writes_output = True

    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        return _check(inputs, {0: _Q8, 3: _Q8, 1: _F, 4: _F, 6: _F}) or _scalars(inputs, (1, 2, 4, 5, 6, 7))

    def workspace_bytes(self, node: Node, input_shapes: Sequence[tuple[int, ...] | None]) -> list[tuple[int, int]]:
        a = input_shapes[0] if input_shapes else None
        b = input_shapes[3] if len(input_shapes) > 3 else None
        if a is None or b is None:
            return []
        nbytes = workspace_nbytes(broadcast_shape(a, b), np.float32)
        return [(0, nbytes), (1, nbytes)]

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        a, sa, za, b, sb, zb, sc = inputs[:7]
        zc = inputs[7] if len(inputs) > 7 else None
        shape = broadcast_shape(a.shape, b.shape)
        va, vb = self.workspace(0, shape, np.float32), self.workspace(1, shape, np.float32)
        np.subtract(a, _scalar(za), out=va, dtype=np.float32, casting="unsafe")
        np.subtract(b, _scalar(zb), out=vb, dtype=np.float32, casting="unsafe")
        self.fn(va, vb, _scalar(sa), _scalar(sb), _scalar(sc))
        lo, hi = _limits(a.dtype)
        np.rint(va, out=va)
        va += _scalar(zc)
        np.clip(va, lo, hi, out=va)
        out = self.output(0, shape, a.dtype)
        np.copyto(out, va, casting="unsafe")
        return [out]

    def fn(self, va: np.ndarray, vb: np.ndarray, sa: np.float32, sb: np.float32, sc: np.float32) -> None:
        """The result in output-scale units (before the output zero point) into `va`, as MLAS orders it."""
        raise NotImplementedError


@register("QLinearAdd", domain=MS)
class QLinearAdd(_QBinary):
    def fn(self, va, vb, sa, sb, sc):
        va *= sa / sc
        vb *= sb / sc
        va += vb


@register("QLinearMul", domain=MS)
class QLinearMul(_QBinary):
    def fn(self, va, vb, sa, sb, sc):
        va *= vb
        va *= sa * sb / sc


class _QUnary(OpImpl):
    writes_output = True

    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        return _check(inputs, {0: _Q8, 1: _F, 3: _F}) or _scalars(inputs, (1, 2, 3, 4))

    def workspace_bytes(self, node: Node, input_shapes: Sequence[tuple[int, ...] | None]) -> list[tuple[int, int]]:
        x = input_shapes[0] if input_shapes else None
        return [] if x is None else [(0, workspace_nbytes(x, np.intp))]

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        x, sx = inputs[0], inputs[1]
        zx = inputs[2] if len(inputs) > 2 else None
        sy = inputs[3]
        zy = inputs[4] if len(inputs) > 4 else None
        # through a 256-entry table, as ORT: every input code maps to one output code; indexed by the byte
        codes = np.arange(256, dtype=np.uint8).view(x.dtype)
        table = quant_table(self.fn(node, dequant(codes, sx, zx)), sy, zy, x.dtype)
        idx = self.workspace(0, x.shape, np.intp)
        np.copyto(idx, x.view(np.uint8), casting="unsafe")
        out = self.output(0, x.shape, x.dtype)
        np.take(table, idx, out=out, mode="clip")
        return [out]

    def fn(self, node: Node, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError


def quant_table(v: np.ndarray, sy, zy, dtype) -> np.ndarray:
    return _requant_into(np.empty(v.shape, dtype), v.astype(np.float32), sy, zy)


@register("QLinearSigmoid", domain=MS)
class QLinearSigmoid(_QUnary):
    def fn(self, node, x):
        return 1 / (1 + np.exp(-x))


@register("QLinearLeakyRelu", domain=MS)
class QLinearLeakyRelu(_QUnary):
    def fn(self, node, x):
        return np.where(x >= 0, x, np.float32(node.attr("alpha", 0.01)) * x)


def _softmax_rows(node: Node, shape: Sequence[int]) -> tuple[int, int]:
    """(rows, row length) of QLinearSoftmax: before opset 13 (its `opset` attribute) the axes from `axis` on
    form one row, from 13 on `axis` alone (moved last)."""
    r = len(shape)
    axis = int(node.attr("axis", -1 if int(node.attr("opset", 13)) >= 13 else 1)) % max(r, 1)
    total = int(np.prod(shape, dtype=np.int64))
    length = int(np.prod(shape[axis:], dtype=np.int64)) if int(node.attr("opset", 13)) < 13 else int(shape[axis])
    return (total // length if length else 0), length


@register("QLinearSoftmax", domain=MS)
class QLinearSoftmax(OpImpl):
    """softmax((x - x_zp) * x_scale) requantized; exp of the row's differences from its maximum (as ORT's table
    exp((q - max) * x_scale) does), in declared float32 slots (the values, the row sums)."""

    writes_output = True

    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        if inputs[0].shape is not None and len(inputs[0].shape) == 0:
            return Decline(rejected="a scalar X", accepts="X of rank >= 1", remedy="reshape X to 1-D")
        return _check(inputs, {0: _Q8, 1: _F, 3: _F}) or _scalars(inputs, (1, 2, 3, 4))

    def workspace_bytes(self, node: Node, input_shapes: Sequence[tuple[int, ...] | None]) -> list[tuple[int, int]]:
        x = input_shapes[0] if input_shapes else None
        if x is None or not len(x):
            return []
        rows, _n = _softmax_rows(node, x)
        return [(0, workspace_nbytes(x, np.float32)), (1, workspace_nbytes((rows, 1), np.float32))]

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        x, sx, _zx, sy = inputs[0], inputs[1], inputs[2] if len(inputs) > 2 else None, inputs[3]
        zy = inputs[4] if len(inputs) > 4 else None
        out = self.output(0, x.shape, x.dtype)
        if x.size == 0:
            return [out]
        moved = int(node.attr("opset", 13)) >= 13
        axis = int(node.attr("axis", -1 if moved else 1)) % x.ndim
        xs = np.moveaxis(x, axis, -1) if moved else x
        rows, n = _softmax_rows(node, x.shape)
        v = self.workspace(0, (rows, n), np.float32)
        np.copyto(v.reshape(xs.shape), xs, casting="unsafe")
        stat = self.workspace(1, (rows, 1), np.float32)
        np.max(v, axis=1, keepdims=True, out=stat)
        v -= stat
        v *= _scalar(sx)
        np.exp(v, out=v)
        np.sum(v, axis=1, keepdims=True, out=stat)
        v /= stat
        target = np.moveaxis(out, axis, -1) if moved else out
        if target.flags.c_contiguous:
            _requant_into(target.reshape(rows, n), v, sy, zy)
        else:
            lo, hi = _limits(out.dtype)
            v /= _scalar(sy)
            np.rint(v, out=v)
            v += _scalar(zy)
            np.clip(v, lo, hi, out=v)
            np.copyto(target, v.reshape(target.shape), casting="unsafe")
        return [out]


def _pool_axes(node: Node, ndim: int) -> tuple[int, ...]:
    return tuple(range(1, ndim - 1)) if int(node.attr("channels_last", 0)) else tuple(range(2, ndim))


@register("QLinearGlobalAveragePool", domain=MS)
class QLinearGlobalAveragePool(OpImpl):
    writes_output = True

    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        d = _check(inputs, {0: _Q8, 2: _Q8, 4: _Q8}) or _scalars(inputs, (1, 2, 3, 4))
        if d is None and inputs[0].shape is not None and len(inputs[0].shape) < 3:
            return Decline(rejected=f"X rank {len(inputs[0].shape)}", accepts="rank >= 3", remedy="reshape X")
        return d

    def workspace_bytes(self, node: Node, input_shapes: Sequence[tuple[int, ...] | None]) -> list[tuple[int, int]]:
        x = input_shapes[0] if input_shapes else None
        if x is None or len(x) < 3:
            return []
        pooled = tuple(1 if i in _pool_axes(node, len(x)) else d for i, d in enumerate(x))
        return [(0, workspace_nbytes(x, np.float32)), (1, workspace_nbytes(pooled, np.float32))]

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        x, sx, zx, sy, zy = inputs[:5]
        axes = _pool_axes(node, x.ndim)
        v = self.workspace(0, x.shape, np.float32)
        np.subtract(x, _scalar(zx), out=v, dtype=np.float32, casting="unsafe")
        v *= _scalar(sx)
        pooled = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
        mean = self.workspace(1, pooled, np.float32)
        np.mean(v, axis=axes, keepdims=True, out=mean)
        return [_requant_into(self.output(0, pooled, x.dtype), mean, sy, zy)]


@register("QLinearAveragePool", domain=MS)
class QLinearAveragePool(OpImpl):
    """AveragePool (kernel_shape, strides, pads, auto_pad, ceil_mode, count_include_pad) over the dequantized
    input, NCHW or channels_last, requantized into the block; the dequantized input in a declared slot."""

    writes_output = True

    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        from .ops_pool import AveragePool

        d = _check(inputs, {0: _Q8, 1: _F, 3: _F}) or _scalars(inputs, (1, 2, 3, 4))
        x = inputs[0]
        if d is None and x.shape is not None and int(node.attr("channels_last", 0)) and len(x.shape) >= 3:
            x = InputInfo(TensorProto.FLOAT, (x.shape[0], x.shape[-1]) + tuple(x.shape[1:-1]))
        return d or AveragePool().supports(node, [InputInfo(TensorProto.FLOAT, x.shape)], 19)

    def workspace_bytes(self, node: Node, input_shapes: Sequence[tuple[int, ...] | None]) -> list[tuple[int, int]]:
        x = input_shapes[0] if input_shapes else None
        return [] if x is None else [(0, workspace_nbytes(x, np.float32))]

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        from .ops_pool import AveragePool

        x, sx, zx, sy, zy = (inputs + [None] * 5)[:5]
        last = int(node.attr("channels_last", 0))
        v = self.workspace(0, x.shape, np.float32)
        np.subtract(x, _scalar(zx), out=v, dtype=np.float32, casting="unsafe")
        v *= _scalar(sx)
        nchw = np.moveaxis(v, -1, 1) if last else v
        pooled = AveragePool().compute(node, [np.ascontiguousarray(nchw)])[0]
        pooled = np.ascontiguousarray(np.moveaxis(pooled, 1, -1)) if last else pooled
        return [_requant_into(self.output(0, pooled.shape, x.dtype), pooled, sy, zy)]


@register("QLinearConcat", domain=MS)
class QLinearConcat(OpImpl):
    writes_output = True

    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        if (len(inputs) - 2) % 3:
            return Decline(rejected=f"{len(inputs)} inputs", accepts="Y_scale, Y_zero_point, then (X, scale, zp) triples",
                           remedy="fix the node inputs")
        return _check(inputs, {1: _Q8} | {i: _Q8 for i in range(2, len(inputs), 3)}) or _scalars(
            inputs, [0, 1] + [i for k in range(2, len(inputs), 3) for i in (k + 1, k + 2)])

    def workspace_bytes(self, node: Node, input_shapes: Sequence[tuple[int, ...] | None]) -> list[tuple[int, int]]:
        shapes = [input_shapes[i] for i in range(2, len(input_shapes), 3)]
        if not shapes or any(s is None for s in shapes):
            return []
        return [(0, sum(workspace_nbytes(s, np.float32) for s in shapes))]

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        sy, zy = inputs[0], inputs[1]
        parts = [inputs[i] for i in range(2, len(inputs), 3)]
        axis = int(node.attr("axis", 0)) % parts[0].ndim
        shape = list(parts[0].shape)
        shape[axis] = sum(p.shape[axis] for p in parts)
        v = self.workspace(0, shape, np.float32)
        at = 0
        for k, p in zip(range(2, len(inputs), 3), parts):
            dst = v[(slice(None),) * axis + (slice(at, at + p.shape[axis]),)]
            np.subtract(p, _scalar(inputs[k + 2]), out=dst, dtype=np.float32, casting="unsafe")
            dst *= _scalar(inputs[k + 1])
            at += p.shape[axis]
        return [_requant_into(self.output(0, shape, zy.dtype), v, sy, zy)]


@register("QGemm", domain=MS)
class QGemm(OpImpl):
    """alpha * a_scale * b_scale * ((A - a_zp) @ (B - b_zp) + C), requantized when y_scale is given."""

    writes_output = True

    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        return _check(inputs, {0: _Q8, 3: _Q8, 1: _F, 4: _F, 6: frozenset({TensorProto.INT32}), 7: _F}) or _scalars(
            inputs, (1, 2, 7, 8))

    def workspace_bytes(self, node: Node, input_shapes: Sequence[tuple[int, ...] | None]) -> list[tuple[int, int]]:
        a = input_shapes[0] if input_shapes else None
        b = input_shapes[3] if len(input_shapes) > 3 else None
        if a is None or b is None or len(a) != 2 or len(b) != 2:
            return []
        m, k = (a[1], a[0]) if node.attr("transA", 0) else a
        n = b[0] if node.attr("transB", 0) else b[1]
        return int_matmul_slots(int(m), int(k), int(n), stage=True)

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        at = attrs_of(node)
        qa, sa, za, qb, sb, zb = inputs[:6]
        c, sy, zy = (inputs[i] if len(inputs) > i else None for i in (6, 7, 8))
        a2 = qa.T if int(at.get("transA", 0)) else qa
        b2 = qb.T if int(at.get("transB", 0)) else qb
        m, k = a2.shape
        n = b2.shape[1]
        bzp = None if zb is None else _per_axis(zb, 2, 1).reshape(-1)
        mult = _f(at.get("alpha", 1.0)) * _scalar(sa) * np.asarray(sb, np.float32).reshape(-1)
        quantized = sy is not None
        out = self.output(0, (m, n), (zy.dtype if zy is not None else np.dtype(np.uint8)) if quantized else np.float32)
        cc = None if c is None else np.asarray(c).reshape((1,) * (2 - np.ndim(c)) + np.shape(c))

        def finish(acc: np.ndarray, j0: int, j1: int) -> None:
            if cc is not None:
                acc += cc[:, j0:j1] if cc.shape[1] == n else cc
            band = self.workspace(STAGE_SLOT, (m, band_cols(k, n)), np.float32)[:, : j1 - j0] if quantized \
                else out[:, j0:j1]
            np.copyto(band, acc, casting="unsafe")
            band *= column_param(mult, j0, j1)
            if quantized:
                _requant_into(out[:, j0:j1], band, sy, zy)

        int_matmul_into(self, a2, np.asarray(za).reshape(()), b2, bzp, finish)
        return [out]


__all__ = ["QGemm", "QLinearAdd", "QLinearAveragePool", "QLinearConcat", "QLinearGlobalAveragePool", "QLinearLeakyRelu", "QLinearMul",
           "QLinearSigmoid", "QLinearSoftmax", "quant_table"]
