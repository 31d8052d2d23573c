"""com.microsoft Gelu, BiasGelu and FastGelu (ONNX Runtime's transformers-optimizer fusions), computed into the
output block by chunks of whole rows with their temporaries in one declared slot.

float32 / float16 compute in float32 (float16 rounded into its block at the end of each chunk), float64 in
float64. Gelu: y = 0.5 x (1 + erf(x / sqrt(2))), erf from a rational erfc fit evaluated in float64 (relative
error < 1.2e-7; exact `math.erf` for float64 inputs, which take the plain path). FastGelu:
y = 0.5 x (1 + tanh(0.7978845608 (x + 0.044715 x^3))). BiasGelu and FastGelu add their bias (over the last
axis) first. Each chunk of x is read before its chunk of y is written, so y may share x's block.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from onnx import TensorProto

from ort_graph import Node

from ._registry import OpImpl, register, workspace_nbytes
from ._util import out_dtype

MS = "com.microsoft"
CHUNK = 16384  # elements per chunk (whole rows; one row at least)
_ERFC = (-0.82215223, 1.48851587, -1.13520398, 0.27886807, -0.18628806, 0.09678418, 0.37409196, 1.00002368)


def _erf(x: np.ndarray) -> np.ndarray:
    """Vectorized erf: exact (math.erf) for float64, else the rational erfc fit (relative error < 1.2e-7)."""
    if x.dtype == np.float64:
        return np.frompyfunc(math.erf, 1, 1)(x).astype(np.float64)
    z = np.abs(x.astype(np.float64))
    t = 1.0 / (1.0 + 0.5 * z)
    p = t * 0.17087277
    for c in _ERFC:
        p = t * (c + p)
    erfc = t * np.exp(-z * z - 1.26551223 + p)
    return np.where(x >= 0, 1.0 - erfc, erfc - 1.0).astype(x.dtype)


def _chunk_rows(shape: Sequence[int]) -> tuple[int, int, int]:
    """(rows, row length, rows per chunk) of x flattened to rows along its last axis."""
    n = int(shape[-1]) if len(shape) else 1
    rows = int(np.prod(shape[:-1], dtype=np.int64)) if len(shape) > 1 else 1
    return rows, n, max(1, min(rows, CHUNK // max(n, 1)))


class _GeluBase(OpImpl):
    dtypes = frozenset({TensorProto.FLOAT16, TensorProto.FLOAT, TensorProto.DOUBLE})
    writes_output = True
    f32_buffers = 1  # float32 buffers of a chunk beyond x's own
    f64_buffers = 0  # float64 buffers of a chunk

    def workspace_bytes(self, node: Node, input_shapes: Sequence[tuple[int, ...] | None]) -> list[tuple[int, int]]:
        x = input_shapes[0] if input_shapes else None
        if x is None or out_dtype(node) == TensorProto.DOUBLE:
            return []
        _rows, n, per = _chunk_rows(x)
        m = per * n
        return [(0, workspace_nbytes(((1 + self.f32_buffers) * m + 2 * self.f64_buffers * m + m,), np.float32))]

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        x = inputs[0]
        bias = inputs[1] if len(inputs) > 1 else None
        if x.dtype == np.float64:
            xf = x if bias is None else x + bias
            return [self.plain(node, xf).astype(np.float64)]
        out = self.output(0, x.shape, x.dtype)
        rows, n, per = _chunk_rows(x.shape)
        m = per * n
        ws = self.workspace(0, ((1 + self.f32_buffers) * m + 2 * self.f64_buffers * m + m,), np.float32)
        f32 = [ws[i * m:(i + 1) * m] for i in range(1 + self.f32_buffers)]
        base = (1 + self.f32_buffers) * m
        f64 = [ws[base + 2 * i * m: base + 2 * (i + 1) * m].view(np.float64) for i in range(self.f64_buffers)]
        mask = ws[base + 2 * self.f64_buffers * m:base + 2 * self.f64_buffers * m + m].view(np.bool_)[:m]
        x2, y2 = x.reshape(rows, n), out.reshape(rows, n)
        b = None if bias is None else bias.astype(np.float32, copy=False).reshape(1, n)
        for r0 in range(0, rows, per):
            r1 = min(rows, r0 + per)
            k = (r1 - r0) * n
            xs = f32[0][:k].reshape(r1 - r0, n)
            np.copyto(xs, x2[r0:r1], casting="same_kind")
            if b is not None:
                xs += b
            self.into(node, xs.reshape(-1), [a[:k] for a in f32[1:]], [a[:k] for a in f64], mask[:k])
            np.copyto(y2[r0:r1], xs, casting="same_kind")
        return [out]

    def plain(self, node: Node, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def into(self, node: Node, x: np.ndarray, f32: list[np.ndarray], f64: list[np.ndarray], mask: np.ndarray) -> None:
        """y of the float32 chunk `x` written over it, with the given scratch buffers of its size."""
        raise NotImplementedError


@register("Gelu", domain=MS)
class GeluContrib(_GeluBase):
    """y = 0.5 x (1 + erf(x / sqrt(2)))."""

    f64_buffers = 3

    def plain(self, node, x):
        return 0.5 * x * (1 + _erf(x * x.dtype.type(1 / math.sqrt(2))))

    def into(self, node, x, f32, f64, mask):
        u, (z, t, p) = f32[0], f64
        np.multiply(x, np.float32(1 / math.sqrt(2)), out=u)
        np.greater_equal(u, 0, out=mask)
        np.abs(u, out=z, casting="unsafe")  # float32 -> float64, exact
        np.multiply(z, 0.5, out=t)
        t += 1.0
        np.divide(1.0, t, out=t)
        np.multiply(t, 0.17087277, out=p)
        for c in _ERFC:
            p += c
            p *= t
        np.multiply(z, z, out=z)
        np.negative(z, out=z)
        z -= 1.26551223
        z += p
        np.exp(z, out=z)
        z *= t  # erfc(|u|)
        np.subtract(1.0, z, out=t)
        z -= 1.0
        np.copyto(z, t, where=mask)  # erf(u): 1 - erfc for u >= 0, erfc - 1 below
        np.copyto(u, z, casting="same_kind")
        u += np.float32(1)
        x *= np.float32(0.5)
        x *= u


@register("BiasGelu", domain=MS)
class BiasGelu(GeluContrib):
    """Gelu(A + B) with B a 1-D bias over the last axis."""


@register("FastGelu", domain=MS)
class FastGelu(_GeluBase):
    """y = 0.5 x (1 + tanh(0.7978845608 (x + 0.044715 x^3))), with an optional bias added first."""

    def plain(self, node, x):
        t = x.dtype.type
        return t(0.5) * x * (t(1) + np.tanh(t(0.7978845608028654) * (x + t(0.044715) * x * x * x)))

    def into(self, node, x, f32, f64, mask):
        u = f32[0]
        f = np.float32
        np.multiply(x, f(0.044715), out=u)
        u *= x
        u *= x
        u += x
        u *= f(0.7978845608028654)
        np.tanh(u, out=u)
        u += f(1)
        x *= f(0.5)
        x *= u


__all__ = ["BiasGelu", "FastGelu", "GeluContrib"]
