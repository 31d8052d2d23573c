"""Linear algebra and softmax family: MatMul, Gemm, Einsum, Det, Softmax, LogSoftmax, Hardmax."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto as T

from ._registry import OpImpl, register, workspace_nbytes
from ._util import FLOATS_BF, NUMERIC_BF, broadcast_shape, check_all, norm_axis, np_dtype, out_dtype, upcast

MATMUL_TYPES = FLOATS_BF | {T.INT32, T.INT64, T.UINT32, T.UINT64}


def _matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """np.matmul, with [..., K] @ [K, N] folded into one 2-D GEMM: numpy's stacked path does not use BLAS
    there and is ~50x slower on a decoder's projections."""
    if b.ndim == 2 and a.ndim > 2:
        rows = int(np.prod(a.shape[:-1]))
        return np.matmul(a.reshape(rows, a.shape[-1]), b).reshape(*a.shape[:-1], b.shape[-1])
    return np.matmul(a, b)


def matmul_into(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """`_matmul(a, b)` written into `out` (both inputs at least 2-D, `out` of the broadcast result shape)."""
    if b.ndim == 2 and a.ndim > 2:
        rows = int(np.prod(a.shape[:-1]))
        np.matmul(a.reshape(rows, a.shape[-1]), b, out=out.reshape(rows, b.shape[-1]))
    else:
        np.matmul(a, b, out=out)


@register("MatMul", since=1)
class MatMul(OpImpl):
    writes_output = True

    def supports(self, node, inputs, opset):
        return check_all(inputs, MATMUL_TYPES, range(2))

    def compute(self, node, inputs):
        a, b = inputs
        if a.dtype.name == "bfloat16":
            plan = _bf16_bands(node, a.shape, b.shape) if b.dtype == a.dtype else None
            if plan is not None:
                return [self._bf16_into(a, b, *plan)]
            return [_matmul(a.astype(np.float32), b.astype(np.float32)).astype(a.dtype)]
        if a.ndim < 2 or b.ndim < 2 or a.dtype != b.dtype:
            return [np.asarray(_matmul(a, b))]
        shape = (*broadcast_shape(a.shape[:-2], b.shape[:-2]), a.shape[-2], b.shape[-1])
        out = self.output(0, shape, a.dtype)
        matmul_into(a, b, out)
        return [out]

    def workspace_bytes(self, node, input_shapes):
        plan = _bf16_bands(node, *input_shapes[:2]) if len(input_shapes) > 1 else None
        if plan is None:
            return []
        m, k, _n, band = plan
        return [(0, workspace_nbytes((m * k + k * band + m * band,), np.float32))]

    def _bf16_into(self, a: np.ndarray, b: np.ndarray, m: int, k: int, n: int, band: int) -> np.ndarray:
        """bfloat16 [..., K] @ [K, N] in float32 in workspace slot 0 (A upcast once, B and Y a band of
        columns at a time), rounded into the output block."""
        ws = self.workspace(0, (m * k + k * band + m * band,), np.float32)
        a32 = ws[:m * k].reshape(m, k)
        np.copyto(a32, a.reshape(m, k))
        out = self.output(0, (*a.shape[:-1], n), a.dtype)
        y = out.reshape(m, n)
        for n0 in range(0, n, band):
            w = min(band, n - n0)
            b32 = ws[m * k: m * k + k * w].reshape(k, w)
            np.copyto(b32, b[:, n0:n0 + w])
            y32 = ws[m * k + k * band: m * k + k * band + m * w].reshape(m, w)
            np.matmul(a32, b32, out=y32)
            np.copyto(y[:, n0:n0 + w], y32, casting="same_kind")
        return out


BF16_MATMUL_BAND = 1 << 20  # float32 elements of B a bfloat16 MatMul upcasts per band (4 MiB)


def _bf16_bands(node, a_shape, b_shape) -> tuple[int, int, int, int] | None:
    """(M, K, N, columns per band) of a bfloat16 MatMul computed by bands (`MatMul._bf16_into`): the graph's
    output bfloat16, A of rank >= 2 and B a matrix, shapes static; None otherwise."""
    from ._util import out_dtype

    if out_dtype(node) != T.BFLOAT16 or a_shape is None or b_shape is None or len(a_shape) < 2 or len(b_shape) != 2:
        return None
    if not all(isinstance(d, int) for d in (*a_shape, *b_shape)):
        return None
    m, k, n = int(np.prod(a_shape[:-1], dtype=np.int64)), int(a_shape[-1]), int(b_shape[1])
    return m, k, n, max(1, min(n, BF16_MATMUL_BAND // max(k, 1)))


@register("Gemm", since=1)
class Gemm(OpImpl):
    writes_output = True  # float32 / float64: into the output block
    def supports(self, node, inputs, opset):
        return check_all(inputs, MATMUL_TYPES)

    def compute(self, node, inputs):
        a, b = inputs[0], inputs[1]
        c = inputs[2] if len(inputs) > 2 else None
        dt = a.dtype
        a, b = upcast(a), upcast(b)
        if node.attr("transA", 0):
            a = a.T
        if node.attr("transB", 0):
            b = b.T
        alpha, beta = node.attr("alpha", 1.0), node.attr("beta", 1.0)
        if dt in (np.float32, np.float64) and b.dtype == dt and (c is None or c.dtype == dt):
            y = self.output(0, (a.shape[0], b.shape[1]), dt)
            np.matmul(a, b, out=y)
            if alpha != 1.0:
                y *= dt.type(alpha)
            if c is not None:
                y += c if beta == 1.0 else c * dt.type(beta)  # a C-sized temporary only when beta scales it
            return [y]
        y = a @ b
        if alpha != 1.0:
            y = y * np.asarray(alpha, dtype=y.dtype) if y.dtype.kind == "f" else (y * alpha).astype(y.dtype)
        if c is not None:
            cc = upcast(c)
            y = y + (cc * np.asarray(beta, dtype=cc.dtype) if beta != 1.0 else cc)
        return [np.asarray(y).astype(dt)]


@register("Einsum", since=12)
class Einsum(OpImpl):
    def supports(self, node, inputs, opset):
        return check_all(inputs, NUMERIC_BF)

    def compute(self, node, inputs):
        eq = node.attr("equation").replace(" ", "")
        dt = inputs[0].dtype
        return [np.asarray(np.einsum(eq, *[upcast(x) for x in inputs], optimize=len(inputs) > 1)).astype(dt)]


@register("Det", since=11)
class Det(OpImpl):
    dtypes = FLOATS_BF

    def compute(self, node, inputs):
        x = inputs[0]
        return [np.asarray(np.linalg.det(upcast(x))).astype(x.dtype)]


def _softmax_axes(node, x: np.ndarray, opset: int) -> tuple[np.ndarray, int, tuple[int, ...]]:
    """(view, axis to normalize over, original shape); before opset 13 the input is coerced to 2-D."""
    if opset < 13:
        axis = norm_axis(node.attr("axis", 1), x.ndim)
        return x.reshape(int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:]))), 1, x.shape
    return x, norm_axis(node.attr("axis", -1), x.ndim), x.shape


def _rows_shape(shape: tuple[int, ...], axis: int) -> tuple[int, ...]:
    return tuple(1 if i == axis else d for i, d in enumerate(shape))


class _SoftmaxFamily(OpImpl):
    dtypes = FLOATS_BF

    def compute(self, node, inputs):
        from ._interp import node_opset

        x = inputs[0]
        if x.size == 0:  # no rows, or rows of no values (a reduction of none has no identity): an empty output
            return [x.copy()]
        keep = x.dtype == np.float16 or x.dtype.name == "bfloat16"  # as the reference computes: in the dtype
        v, axis, shape = _softmax_axes(node, x if keep else upcast(x), node_opset(node))
        with np.errstate(all="ignore"):
            y = self.fn(v, axis)
        return [np.asarray(y).reshape(shape).astype(x.dtype)]


@register("Softmax", since=1)
class Softmax(_SoftmaxFamily):
    """float32 / float64: into the output block, the row maxima and sums in workspace slot 0."""

    writes_output = True

    def compute(self, node, inputs):
        from ._interp import node_opset

        x = inputs[0]
        if x.dtype not in (np.float32, np.float64):
            return super().compute(node, inputs)
        v, axis, shape = _softmax_axes(node, x, node_opset(node))
        out = self.output(0, shape, x.dtype)
        if x.size == 0:  # no rows, or rows of no values (a reduction of none has no identity)
            return [out]
        o = out.reshape(v.shape)
        stat = self.workspace(0, _rows_shape(v.shape, axis), x.dtype)
        with np.errstate(all="ignore"):
            np.max(v, axis=axis, keepdims=True, out=stat)
            np.subtract(v, stat, out=o)
            np.exp(o, out=o)
            np.sum(o, axis=axis, keepdims=True, out=stat)
            np.divide(o, stat, out=o)
        return [out]

    def workspace_bytes(self, node, input_shapes):
        from ._interp import node_opset

        shape = input_shapes[0] if input_shapes else None
        dt = np_dtype(out_dtype(node)) if out_dtype(node) else None
        if shape is None or dt is None or dt not in (np.float32, np.float64) or not shape:
            return []
        if node_opset(node) < 13:  # coerced to 2-D: one statistic per row of the leading dims
            rows = (int(np.prod(shape[:norm_axis(node.attr("axis", 1), len(shape))])), 1)
        else:
            rows = _rows_shape(tuple(shape), norm_axis(node.attr("axis", -1), len(shape)))
        return [(0, workspace_nbytes(rows, dt))]

    @staticmethod
    def fn(x, axis):
        e = np.exp(x - np.max(x, axis=axis, keepdims=True))
        return e / np.sum(e, axis=axis, keepdims=True)


@register("LogSoftmax", since=1)
class LogSoftmax(_SoftmaxFamily):
    @staticmethod
    def fn(x, axis):
        s = x - np.max(x, axis=axis, keepdims=True)
        return s - np.log(np.sum(np.exp(s), axis=axis, keepdims=True))


@register("Hardmax", since=1)
class Hardmax(_SoftmaxFamily):
    @staticmethod
    def fn(x, axis):
        idx = np.expand_dims(np.argmax(x, axis=axis), axis)
        y = np.zeros_like(x)
        np.put_along_axis(y, idx, 1, axis=axis)
        return y

