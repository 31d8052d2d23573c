"""com.microsoft QOperator kernels that ONNX Runtime's static quantizer writes (QuantFormat.QOperator):
QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearConcat, QGemm (QLinearSoftmax and the pools:
ops_extra_qreduce).

Quantized tensors are (q, scale, zero_point) with real = (q - zero_point) * scale; results are requantized as
saturate(round_half_even(real / scale) + zero_point). Each kernel computes into its output block and keeps
its float temporaries in declared slots: the binary ops their two dequantized operands (output-shaped,
float32); the unary ops (a 256-entry table, as ORT) the table indices; the concat the dequantized output; QGemm the shared band-wise integer matmul (`_int_matmul`) and a float32 band.
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


def scalar(p: np.ndarray | None) -> np.float32:
    return _f(0) if p is None else _f(np.asarray(p).reshape(()).astype(np.float32))


def requant_into(out: np.ndarray, v: np.ndarray, sy, zy) -> np.ndarray:
    """out = saturate(rint(v / sy) + zy) for float32 `v` (overwritten)."""
    lo, hi = _limits(out.dtype)
    v /= scalar(sy)
    np.rint(v, out=v)
    v += scalar(zy)
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
        np.subtract(a, scalar(za), out=va, dtype=np.float32, casting="unsafe")
        np.subtract(b, scalar(zb), out=vb, dtype=np.float32, casting="unsafe")
        self.fn(va, vb, scalar(sa), scalar(sb), scalar(sc))
        lo, hi = _limits(a.dtype)
        np.rint(va, out=va)
        va += scalar(zc)
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
    return requant_into(np.empty(v.shape, dtype), v.astype(np.float32), sy, zy)


@register("QLinearSigmoid", domain=MS)
class QLinearSigmoid(_QUnary):
    def fn(self, node, x):
        return 1 / (1 + np.exp(-x))


@register("QLinearLeakyRelu", domain=MS)
class QLinearLeakyRelu(_QUnary):
    def fn(self, node, x):
        return np.where(x >= 0, x, np.float32(node.attr("alpha", 0.01)) * x)


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
            np.subtract(p, scalar(inputs[k + 2]), out=dst, dtype=np.float32, casting="unsafe")
            dst *= scalar(inputs[k + 1])
            at += p.shape[axis]
        return [requant_into(self.output(0, shape, zy.dtype), v, sy, zy)]


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
        mult = _f(at.get("alpha", 1.0)) * scalar(sa) * np.asarray(sb, np.float32).reshape(-1)
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
                requant_into(out[:, j0:j1], band, sy, zy)

        int_matmul_into(self, a2, np.asarray(za).reshape(()), b2, bzp, finish)
        return [out]


__all__ = ["QGemm", "QLinearAdd", "QLinearConcat", "QLinearLeakyRelu", "QLinearMul", "QLinearSigmoid", "quant_table",
           "requant_into", "scalar"]
