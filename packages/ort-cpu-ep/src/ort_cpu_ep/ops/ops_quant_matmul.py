"""What ONNX Runtime's dynamic and static quantizers write around MatMul: DynamicQuantizeLinear, MatMulInteger
and QLinearMatMul, computed into their output blocks with declared workspace.

MatMulInteger and QLinearMatMul with a 2-D B (the quantized weight) and per-tensor A parameters run the
shared band-wise integer matmul (`_int_matmul`: A - a_zp, a band of B - b_zp and the band's accumulator in
float64 slots) and write each band's columns into the block; other forms (a batched B, per-row A zero points
of a batched A, float8 operands) take the general path, which returns a fresh array. DynamicQuantizeLinear
scales X into a float32 slot and rounds it into its uint8 block.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import TensorProto as T

from ort_graph import Node

from ._int_matmul import column_param, int_matmul_into, int_matmul_slots, rows
from ._registry import OpImpl, register, workspace_nbytes
from ._util import check_dtype
from .ops_quant import _F8, _INT_RANGES, _plain, _requant, _sub_zp

_Q8 = {T.INT8, T.UINT8}


@register("DynamicQuantizeLinear", since=11)
class DynamicQuantizeLinear(OpImpl):
    dtypes = frozenset({T.FLOAT})
    writes_output = True

    def workspace_bytes(self, node: Node, input_shapes: Sequence[tuple[int, ...] | None]) -> list[tuple[int, int]]:
        x = input_shapes[0] if input_shapes else None
        return [] if x is None else [(0, workspace_nbytes(x, np.float32))]

    def compute(self, node, inputs):
        x = inputs[0]
        lo, hi = min(0.0, float(x.min()) if x.size else 0.0), max(0.0, float(x.max()) if x.size else 0.0)
        scale = np.float32((hi - lo) / 255.0)
        y, s, z = self.output(0, x.shape, np.uint8), self.output(1, (), np.float32), self.output(2, (), np.uint8)
        s[...] = scale
        if scale == 0:
            y.fill(0)
            z[...] = 0
            return [y, s, z]
        zp = np.uint8(np.clip(np.rint(0 - np.float32(lo) / scale), 0, 255))
        v = self.workspace(0, x.shape, np.float32)
        np.divide(x, scale, out=v)
        np.rint(v, out=v)
        v += np.float32(zp)
        np.clip(v, 0, 255, out=v)
        np.copyto(y, v, casting="unsafe")
        z[...] = zp
        return [y, s, z]


def _fast(a: Sequence[int] | None, b: Sequence[int] | None, a_params: Sequence[Sequence[int] | None]) -> bool:
    """2-D B and A parameters that are per tensor (or per row of a 2-D A)."""
    if a is None or b is None or len(b) != 2 or len(a) < 2:
        return False
    return all(p is None or int(np.prod(p, dtype=np.int64)) == 1 or len(a) == 2 for p in a_params)


def _shape(x: np.ndarray | None) -> tuple[int, ...] | None:
    return None if x is None else tuple(np.shape(x))


def _a_param(p: np.ndarray | None) -> np.ndarray | np.generic:
    """A per-tensor parameter as a scalar, a per-row one as a column (M, 1)."""
    if p is None:
        return np.float64(0)
    p = _plain(np.asarray(p))
    return p.reshape(()) if p.size == 1 else p.reshape(-1, 1)


def _slots_for(input_shapes: Sequence[tuple[int, ...] | None], b_index: int, a_params: Sequence[int]) -> list[tuple[int, int]]:
    a = input_shapes[0] if input_shapes else None
    b = input_shapes[b_index] if len(input_shapes) > b_index else None
    params = [input_shapes[i] if len(input_shapes) > i else None for i in a_params]
    if not _fast(a, b, params):
        return []
    return int_matmul_slots(rows(a), int(b[0]), int(b[1]))


@register("MatMulInteger", since=10)
class MatMulInteger(OpImpl):
    writes_output = True

    def supports(self, node, inputs, opset):
        return check_dtype(inputs, 0, _Q8) or check_dtype(inputs, 1, _Q8)

    def workspace_bytes(self, node: Node, input_shapes: Sequence[tuple[int, ...] | None]) -> list[tuple[int, int]]:
        return _slots_for(input_shapes, 1, (2,))

    def compute(self, node, inputs):
        a, b = inputs[0], inputs[1]
        azp, bzp = (inputs[i] if len(inputs) > i else None for i in (2, 3))
        if not _fast(a.shape, b.shape, [_shape(azp)]):
            av = _sub_zp(a, azp, a.ndim - 2 if a.ndim >= 2 else 0)
            return [np.matmul(av, _sub_zp(b, bzp, b.ndim - 1)).astype(np.int32)]
        k, n = b.shape
        out = self.output(0, a.shape[:-1] + (n,), np.int32)
        y = out.reshape(-1, n)

        def finish(acc, j0, j1):
            np.copyto(y[:, j0:j1], acc, casting="unsafe")

        int_matmul_into(self, a.reshape(-1, k), _a_param(azp), b, None if bzp is None else _plain(np.asarray(bzp)), finish)
        return [out]


@register("QLinearMatMul", since=10)
class QLinearMatMul(OpImpl):
    writes_output = True

    def supports(self, node, inputs, opset):
        ok = {T.INT8, T.UINT8} | (_F8 if opset >= 21 else set())
        return check_dtype(inputs, 0, ok) or check_dtype(inputs, 3, ok)

    def workspace_bytes(self, node: Node, input_shapes: Sequence[tuple[int, ...] | None]) -> list[tuple[int, int]]:
        return _slots_for(input_shapes, 3, (1, 2))

    def compute(self, node, inputs):
        a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp = inputs
        ydt = y_zp.dtype if y_zp is not None else a.dtype
        ascale = _plain(a_s).astype(np.float64)
        bscale = _plain(b_s).astype(np.float64)
        if a.dtype.kind not in "iu" or b.dtype.kind not in "iu" or not _fast(a.shape, b.shape, [_shape(a_s), _shape(a_zp)]):
            av = _sub_zp(a, a_zp, a.ndim - 2 if a.ndim >= 2 else 0)
            acc = np.matmul(av, _sub_zp(b, b_zp, b.ndim - 1))
            if ascale.ndim == 1 and ascale.size > 1:
                ascale = ascale.reshape(-1, 1)
            return [_requant(acc, ascale * bscale / _plain(y_s).astype(np.float64), y_zp, ydt)]
        k, n = b.shape
        out = self.output(0, a.shape[:-1] + (n,), ydt)
        y = out.reshape(-1, n)
        ysc = _plain(y_s).astype(np.float64)
        a_mult = _a_param(ascale) / ysc
        lo, hi = _INT_RANGES[T.UINT8 if ydt == np.uint8 else T.INT8]
        yz = np.float64(0) if y_zp is None else _plain(np.asarray(y_zp)).astype(np.float64).reshape(())

        def finish(acc, j0, j1):
            acc *= a_mult * column_param(bscale, j0, j1)
            np.rint(acc, out=acc)
            acc += yz
            np.clip(acc, lo, hi, out=acc)
            np.copyto(y[:, j0:j1], acc, casting="unsafe")

        int_matmul_into(self, a.reshape(-1, k), _a_param(a_zp), b, None if b_zp is None else _plain(np.asarray(b_zp)),
                        finish)
        return [out]


__all__ = ["DynamicQuantizeLinear", "MatMulInteger", "QLinearMatMul"]
