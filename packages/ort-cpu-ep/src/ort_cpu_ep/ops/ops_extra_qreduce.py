"""com.microsoft QOperator kernels that reduce over axes, as ONNX Runtime's static quantizer writes them:
QLinearSoftmax, QLinearGlobalAveragePool, QLinearAveragePool. Each dequantizes its input into a declared
float32 slot and requantizes into its output block (saturate(round_half_even(v / y_scale) + y_zero_point));
QLinearAveragePool pools with AveragePool's kernel (its window sums allocate, as AveragePool's do).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import TensorProto

from ort_graph import Node

from ._registry import Decline, InputInfo, OpImpl, register, workspace_nbytes
from .ops_extra_qlinear import _F, _Q8, MS, _check, _limits, _scalars
from .ops_extra_qops import requant_into as _requant_into
from .ops_extra_qops import scalar as _scalar


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


__all__ = ["QLinearAveragePool", "QLinearGlobalAveragePool", "QLinearSoftmax"]
