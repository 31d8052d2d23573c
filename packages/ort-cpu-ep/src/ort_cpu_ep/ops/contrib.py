"""Normalization and activation kernels of the ops exported LLMs use (ONNX Runtime contrib ops).

Semantics follow ONNX Runtime's CPU kernels:

- `SimplifiedLayerNormalization` (RMSNorm, default domain: the genai builder emits it there) and the ORT
  `LayerNormalization` function of opsets 1-16: statistics in float32 (float64 for double inputs),
  `var = E[x^2] - E[x]^2` as ORT computes it, `inv_std_var` output in float32.
- com.microsoft `SkipLayerNormalization` / `SkipSimplifiedLayerNormalization`: `s = input + skip (+ bias)`
  normalized over the last axis; outputs (y, mean, inv_std_var, s); the simplified op's mean is zeros.
- com.microsoft `QuickGelu`, `FusedMatMul` (`Gelu`, `FastGelu`, `BiasGelu`: ops_extra_gelu).

The other com.microsoft kernels live in the `ops_extra_*` modules; each op module is imported when an op it
registers is first looked up (`load_op`), or by `load_all_ops()`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import numpy as np
from onnx import TensorProto

from ort_graph import Node, dtype_name

from ._registry import Decline, InputInfo, OpImpl, attrs_of, register, workspace_nbytes
from ._util import broadcast_shape, np_dtype, out_dtype
from .ops_extra_attention import requested
from .ops_math import matmul_into
from .ops_norm import (
    fast_norm,
    half_norm,
    half_norm_stage,
    half_norm_workspace,
    norm_rows,
    norm_workspace,
    normalize_half_rows_into,
    normalize_rows_into,
)

MS = "com.microsoft"
F16, F32, F64, BF16 = TensorProto.FLOAT16, TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.BFLOAT16
_FLOATS = frozenset({F16, F32, BF16})  # bfloat16 computes in float32 (ONNX Runtime's CPU EP has no bf16 kernels)


def check_dtypes(inputs: Sequence[InputInfo], allowed: dict[int, frozenset[int]], remedy: str | None = None) -> Decline | None:
    """Decline when a present input with a known dtype is outside `allowed[index]`."""
    for i, accepted in allowed.items():
        if i < len(inputs) and inputs[i].present and inputs[i].dtype and inputs[i].dtype not in accepted:
            return Decline(
                rejected=f"input {i} dtype {dtype_name(inputs[i].dtype)}",
                accepts=", ".join(sorted(dtype_name(d) for d in accepted)),
                **({"remedy": remedy} if remedy else {}),
            )
    return None


def _stat_dtype(x: np.ndarray) -> type:
    return np.float64 if x.dtype == np.float64 else np.float32


# ---------------------------------------------------------------------------------------------------------------
# LayerNormalization family (default domain: ORT's contrib registrations live there)
# ---------------------------------------------------------------------------------------------------------------


class _NormBase(OpImpl):
    simplified: ClassVar[bool] = False

    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        x, scale = inputs[0], inputs[1] if len(inputs) > 1 else InputInfo(0, None)
        if x.dtype and scale.dtype:
            pair_ok = (x.dtype in _FLOATS and scale.dtype in _FLOATS) or (x.dtype == scale.dtype == F64)
            if not pair_ok:
                return Decline(
                    rejected=f"X dtype {dtype_name(x.dtype)} with scale dtype {dtype_name(scale.dtype)}",
                    accepts="X and scale each float16 or float32, or both double (as ONNX Runtime's CPU kernels)",
                )
        elif x.dtype and x.dtype not in (F16, F32, F64, BF16):
            return Decline(rejected=f"input 0 dtype {dtype_name(x.dtype)}", accepts="bfloat16, float16, float32, double")
        if x.shape is not None:
            axis = int(node.attr("axis", -1))
            if not -len(x.shape) <= axis < len(x.shape):
                return Decline(rejected=f"axis={axis!r} for rank {len(x.shape)}",
                               accepts="an axis in [-rank, rank)", remedy="fix the axis attribute")
        return None

    writes_output = True  # float32 / float16 with only Y requested; row statistics in slot 0 (float16: rows in slot 1)

    def workspace_bytes(self, node: Node, input_shapes: Sequence[tuple[int, ...] | None]) -> list[tuple[int, int]]:
        axis = int(node.attr("axis", -1))
        return norm_workspace(node, input_shapes, axis) + half_norm_workspace(node, input_shapes, axis)

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        x, scale = inputs[0], inputs[1]
        bias = inputs[2] if not self.simplified and len(inputs) > 2 else None
        a = attrs_of(node)
        eps, axis = float(a.get("epsilon", 1e-5)), int(a.get("axis", -1))
        axis = axis + x.ndim if axis < 0 else axis
        if not any(node.outputs[1:]) and fast_norm(x, scale, bias) and x.size:
            rows = norm_rows(x.shape, axis)
            out = self.output(0, x.shape, x.dtype)
            normalize_rows_into(x.reshape(rows, -1), out.reshape(rows, -1), scale, bias, eps, self.simplified,
                                self.workspace(0, (rows,), np.float32))
            return [out]
        if not any(node.outputs[1:]) and scale.dtype == x.dtype and half_norm(node, x, scale, bias) and x.size:
            rows = norm_rows(x.shape, axis)
            out = self.output(0, x.shape, x.dtype)
            normalize_half_rows_into(x.reshape(rows, -1), out.reshape(rows, -1), scale, bias, eps, self.simplified,
                                     self.workspace(0, (rows,), np.float32),
                                     self.workspace(1, (half_norm_stage(x.shape, axis),), np.float32))
            return [out]
        axes = tuple(range(axis, x.ndim))
        st = _stat_dtype(x)
        xf = x.astype(st, copy=False)
        n = int(np.prod([x.shape[i] for i in axes]))
        msq = np.sum(xf * xf, axis=axes, keepdims=True) / st(n)
        if self.simplified:
            mean = None
            denom = np.sqrt(msq + st(eps))
            y = xf / denom * scale.astype(st)
        else:
            mean = np.sum(xf, axis=axes, keepdims=True) / st(n)
            denom = np.sqrt(msq - mean * mean + st(eps))
            y = (xf - mean) / denom * scale.astype(st)
            if bias is not None:
                y = y + bias.astype(st)
        out_dtype = scale.dtype
        inv = (st(1) / denom).astype(np.float32)
        results: list[np.ndarray | None] = [y.astype(out_dtype)]
        if self.simplified:
            results.append(inv)
        else:
            results += [mean.astype(np.float32), inv]
        return requested(node, results)


@register("SimplifiedLayerNormalization", since=1)
class SimplifiedLayerNormalization(_NormBase):
    """RMSNorm: y = x / sqrt(mean(x^2) + epsilon) * scale; outputs (Y, inv_std_var)."""

    simplified = True


@register("LayerNormalization", since=1, until=16)
class LayerNormalizationContrib(_NormBase):
    """ONNX Runtime's LayerNormalization for opsets before 17 (outputs Y, Mean, InvStdDev)."""

    simplified = False


# ---------------------------------------------------------------------------------------------------------------
# Skip(Simplified)LayerNormalization (com.microsoft)
# ---------------------------------------------------------------------------------------------------------------


class _SkipNormBase(OpImpl):
    simplified: ClassVar[bool] = False

    def _idx(self) -> tuple[int | None, int]:
        """(beta index or None, bias index)."""
        return (None, 3) if self.simplified else (3, 4)

    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        d = check_dtypes(inputs, {i: _FLOATS for i in range(len(inputs))},
                         remedy="cast input, skip, gamma (and beta/bias) to float32 or float16")
        if d is not None:
            return d
        x, skip = inputs[0], inputs[1]
        if x.shape is not None and len(x.shape) not in (2, 3):
            return Decline(rejected=f"input rank {len(x.shape)} (shape {x.shape!r})",
                           accepts="input of rank 3 (batch, sequence, hidden) or 2 (tokens, hidden)",
                           remedy="reshape the input to 3D or run the node elsewhere")
        if x.shape is not None and skip.shape is not None:
            hid_x, hid_s = x.shape[-1], skip.shape[-1]
            if isinstance(hid_x, int) and isinstance(hid_s, int) and hid_x != hid_s:
                return Decline(rejected=f"skip hidden size {hid_s!r} != input hidden size {hid_x!r}",
                               accepts="skip broadcastable to input over the leading dims",
                               remedy="fix the skip input shape")
        return None

    writes_output = True  # float32 / float16 with Y (and the sum) requested; row statistics in slot 0 (float16: rows in 1)

    def workspace_bytes(self, node: Node, input_shapes: Sequence[tuple[int, ...] | None]) -> list[tuple[int, int]]:
        return norm_workspace(node, input_shapes, -1) + half_norm_workspace(node, input_shapes, -1)

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        x, skip, gamma = inputs[0], inputs[1], inputs[2]
        beta_i, bias_i = self._idx()
        beta = inputs[beta_i] if beta_i is not None and len(inputs) > beta_i else None
        bias = inputs[bias_i] if len(inputs) > bias_i else None
        eps = float(node.attr("epsilon", 1e-5))
        if not any(node.outputs[1:3]) and fast_norm(x, skip, gamma, beta, bias) and x.size:
            return self._into(node, x, skip, gamma, beta, bias, eps)
        if (not any(node.outputs[1:3]) and skip.shape == x.shape and half_norm(node, x, skip, gamma, beta, bias)
                and x.size):
            return self._half_into(node, x, skip, gamma, beta, bias, eps)
        s = x.astype(np.float32) + skip.astype(np.float32)
        if bias is not None:
            s = s + bias.astype(np.float32)
        hidden = np.float32(x.shape[-1])
        msq = np.sum(s * s, axis=-1, keepdims=True) / hidden
        if self.simplified:
            mean = np.zeros_like(msq)
            denom = np.sqrt(msq + np.float32(eps))
            y = s / denom * gamma.astype(np.float32)
        else:
            mean = np.sum(s, axis=-1, keepdims=True) / hidden
            denom = np.sqrt(msq - mean * mean + np.float32(eps))
            y = (s - mean) / denom * gamma.astype(np.float32)
            if beta is not None:
                y = y + beta.astype(np.float32)
        outs: list[np.ndarray | None] = [y.astype(x.dtype), mean, np.float32(1) / denom, s.astype(x.dtype)]
        return requested(node, outs)


    def _into(self, node: Node, x: np.ndarray, skip: np.ndarray, gamma: np.ndarray, beta: np.ndarray | None,
              bias: np.ndarray | None, eps: float) -> list[np.ndarray | None]:
        """The sum into output 3 when requested (else into Y), then normalized into Y."""
        y = self.output(0, x.shape, x.dtype)
        total = self.output(3, x.shape, x.dtype) if len(node.outputs) > 3 and node.outputs[3] else y
        np.add(x, skip, out=total)
        if bias is not None:
            np.add(total, bias, out=total)
        rows = norm_rows(x.shape, -1)
        normalize_rows_into(total.reshape(rows, -1), y.reshape(rows, -1), gamma, beta, eps, self.simplified,
                            self.workspace(0, (rows,), np.float32))
        return requested(node, [y, None, None, total])


    def _half_into(self, node: Node, x: np.ndarray, skip: np.ndarray, gamma: np.ndarray, beta: np.ndarray | None,
                   bias: np.ndarray | None, eps: float) -> list[np.ndarray | None]:
        """float16: the sum in float32 chunk by chunk in slot 1 (rounded into output 3 when requested), normalized
        there and rounded into Y; as the generic path computes it, without its whole-tensor float32 copies."""
        rows = norm_rows(x.shape, -1)
        y = self.output(0, x.shape, x.dtype)
        total = self.output(3, x.shape, x.dtype) if len(node.outputs) > 3 and node.outputs[3] else None
        normalize_half_rows_into(x.reshape(rows, -1), y.reshape(rows, -1), gamma, beta, eps, self.simplified,
                                 self.workspace(0, (rows,), np.float32),
                                 self.workspace(1, (half_norm_stage(x.shape, -1),), np.float32),
                                 skip=skip.reshape(rows, -1), skip_bias=bias,
                                 total=None if total is None else total.reshape(rows, -1))
        return requested(node, [y, None, None, total])


@register("SkipLayerNormalization", domain=MS)
class SkipLayerNormalization(_SkipNormBase):
    """LayerNorm of input + skip (+ bias) with gamma/beta; outputs (y, mean, inv_std_var, sum)."""


@register("SkipSimplifiedLayerNormalization", domain=MS)
class SkipSimplifiedLayerNormalization(_SkipNormBase):
    """RMSNorm of input + skip (+ bias) with gamma; outputs (y, mean (zeros), inv_std_var, sum)."""

    simplified = True


# ---------------------------------------------------------------------------------------------------------------
# Activations and FusedMatMul (com.microsoft)
# ---------------------------------------------------------------------------------------------------------------

_ACT_DTYPES = frozenset({F16, F32, F64})


class _Elementwise(OpImpl):
    dtypes = _ACT_DTYPES

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        x = inputs[0]
        bias = inputs[1] if len(inputs) > 1 else None
        st = _stat_dtype(x)
        xf = x.astype(st)
        if bias is not None:
            xf = xf + bias.astype(st)
        return [self.fn(node, xf).astype(x.dtype)]

    def fn(self, node: Node, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError


QUICK_GELU_CHUNK = 16384  # elements per pass of the one-pass QuickGelu (its declared workspace, 64 KiB in float32)


@register("QuickGelu", domain=MS)
class QuickGelu(_Elementwise):
    """y = x * sigmoid(alpha * x), alpha default 1.702 (alpha=1 is SiLU, the CPU provider's SiLUFusion).
    float32 / float64 without a bias: into the output block, chunk by chunk through workspace slot 0
    (`QUICK_GELU_CHUNK` elements): t = exp(-alpha x); t += 1; y = x / t. float16 the same in float32 (as the
    other activations compute it): the chunk of x upcast and t, two float32 chunks in slot 0, y rounded into
    the block. Safe when the plan writes y over x (each chunk of x is read before its chunk of y is written);
    exp overflowing to inf gives the exact limit -0 and is not reported."""

    writes_output = True

    def fn(self, node: Node, x: np.ndarray) -> np.ndarray:
        alpha = x.dtype.type(node.attr("alpha", 1.702))
        return x / (x.dtype.type(1) + np.exp(-alpha * x))

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        x = inputs[0]
        if x.dtype not in (np.float16, np.float32, np.float64) or (len(inputs) > 1 and inputs[1] is not None):
            return super().compute(node, inputs)
        out = self.output(0, x.shape, x.dtype)
        flat_x, flat_y = np.ascontiguousarray(x).reshape(-1), out.reshape(-1)
        half = x.dtype == np.float16
        st = _stat_dtype(x)
        chunk = min(flat_x.size, QUICK_GELU_CHUNK)
        tmp = self.workspace(0, ((2 if half else 1) * chunk,), st)
        neg_alpha = st(-float(node.attr("alpha", 1.702)))
        with np.errstate(over="ignore", under="ignore"):
            for start in range(0, flat_x.size, QUICK_GELU_CHUNK):
                xs = flat_x[start:start + QUICK_GELU_CHUNK]
                t = tmp[:xs.size]
                if half:  # x upcast in the second chunk; the quotient in t, rounded into the block
                    xs = tmp[chunk:chunk + xs.size]
                    np.copyto(xs, flat_x[start:start + QUICK_GELU_CHUNK])
                np.multiply(xs, neg_alpha, out=t)
                np.exp(t, out=t)
                np.add(t, 1, out=t)
                if half:
                    np.divide(xs, t, out=t)
                    np.copyto(flat_y[start:start + QUICK_GELU_CHUNK], t, casting="same_kind")
                else:
                    np.divide(xs, t, out=flat_y[start:start + QUICK_GELU_CHUNK])
        return [out]

    def workspace_bytes(self, node: Node, input_shapes: Sequence[tuple[int, ...] | None]) -> list[tuple[int, int]]:
        shape = input_shapes[0] if input_shapes else None
        dt = np_dtype(out_dtype(node)) if out_dtype(node) else None
        if shape is None or dt is None or dt not in (np.float16, np.float32, np.float64) or (
                len(node.inputs) > 1 and node.inputs[1]):
            return []
        chunk = min(int(np.prod(shape, dtype=np.int64)), QUICK_GELU_CHUNK)
        return [(0, workspace_nbytes((2 * chunk,), np.float32) if dt == np.float16 else workspace_nbytes((chunk,), dt))]


@register("FusedMatMul", domain=MS)
class FusedMatMul(OpImpl):
    """alpha * op(A) @ op(B) with transA/transB (last two axes) and transBatchA/transBatchB."""

    dtypes = _ACT_DTYPES
    writes_output = True

    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        d = super().supports(node, inputs, opset)
        if d is not None:
            return d
        for i in (0, 1):
            if inputs[i].shape is not None and len(inputs[i].shape) < 2 and (
                    node.attr("transBatchA" if i == 0 else "transBatchB", 0)
                    or node.attr("transA" if i == 0 else "transB", 0)):
                return Decline(rejected=f"input {i} of rank {len(inputs[i].shape)} with a transpose attribute",
                               accepts="rank >= 2 inputs when transA/transB/transBatch* are set",
                               remedy="remove the transpose attribute or reshape the input")
        return None

    @staticmethod
    def _prep(x: np.ndarray, trans: int, trans_batch: int) -> np.ndarray:
        if x.ndim < 2:
            return x
        if trans_batch and x.ndim > 2:
            # ORT's transBatch: axis 0 becomes the first matrix axis, axes 1..rank-2 the batch axes
            perm = list(range(1, x.ndim - 1)) + [0, x.ndim - 1]
            x = np.transpose(x, perm)
        if trans:
            x = np.swapaxes(x, -1, -2)
        return x

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        a = attrs_of(node)
        A = self._prep(inputs[0], int(a.get("transA", 0)), int(a.get("transBatchA", 0)))
        B = self._prep(inputs[1], int(a.get("transB", 0)), int(a.get("transBatchB", 0)))
        alpha = float(a.get("alpha", 1.0))
        if A.ndim < 2 or B.ndim < 2 or A.dtype != B.dtype:
            y = np.matmul(A, B)
            if alpha != 1.0:
                y = y * y.dtype.type(alpha)
            return [y.astype(inputs[0].dtype, copy=False)]
        # into the output block: BLAS reads the transposed views as they are (no transposed copy)
        out = self.output(0, (*broadcast_shape(A.shape[:-2], B.shape[:-2]), A.shape[-2], B.shape[-1]), A.dtype)
        if B.ndim == 2 and A.ndim > 2 and A.flags.c_contiguous:
            matmul_into(A, B, out)
        else:
            np.matmul(A, B, out=out)
        if alpha != 1.0:
            np.multiply(out, out.dtype.type(alpha), out=out)
        return [out]
