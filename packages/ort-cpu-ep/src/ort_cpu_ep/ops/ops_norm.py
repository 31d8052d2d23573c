"""Normalizations: LayerNormalization, RMSNormalization, BatchNormalization, InstanceNormalization,
GroupNormalization, LpNormalization, MeanVarianceNormalization, LRN."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto as T

from ._registry import Decline, OpImpl, register, workspace_nbytes
from ._util import FLOATS_BF, check_all, decline_attr, norm_axis, np_dtype, upcast


def normalize_rows_into(x: np.ndarray, out: np.ndarray, scale: np.ndarray, bias: np.ndarray | None, eps: float,
                        simplified: bool, stat: np.ndarray) -> None:
    """Layer norm (RMS norm when `simplified`) of each row of the 2-D `x` into `out` (same shape; may be
    `x` itself), with per-row statistics in `stat` (one element per row, x's dtype) and no other
    temporary: centering happens in `out`, sums of squares are row dot products."""
    n = x.shape[1]
    dt = x.dtype.type
    src = x
    if not simplified:
        np.sum(x, axis=1, out=stat)
        stat /= dt(n)
        np.subtract(x, stat[:, None], out=out)
        src = out
    np.einsum("ij,ij->i", src, src, out=stat)  # no squared copy of the rows
    stat /= dt(n)
    stat += dt(eps)
    np.sqrt(stat, out=stat)
    np.reciprocal(stat, out=stat)
    np.multiply(src, stat[:, None], out=out)
    np.multiply(out, scale.reshape(1, n), out=out)
    if bias is not None:
        np.add(out, bias.reshape(1, n), out=out)


def norm_rows(shape: tuple[int, ...] | None, axis: int) -> int | None:
    """Rows of a norm over the trailing dims from `axis` (None when the shape is unknown)."""
    if shape is None or not all(isinstance(d, int) for d in shape):
        return None
    return int(np.prod(shape[:norm_axis(axis, len(shape))], dtype=np.int64))


def norm_workspace(node, input_shapes, axis: int) -> list[tuple[int, int]]:
    """The row statistics of `normalize_rows_into`: one float32 per row (slot 0)."""
    rows = norm_rows(input_shapes[0] if input_shapes else None, axis)
    return [] if rows is None else [(0, workspace_nbytes((rows,), np.float32))]


HALF_TYPES = (T.FLOAT16, T.BFLOAT16)  # 16-bit floats: computed in float32, staged in declared workspace
HALF_NORM_CHUNK = 16384  # float32 elements a float16 norm stages per pass (its declared slot 1, 64 KiB)


def half_norm_workspace(node, input_shapes, axis: int) -> list[tuple[int, int]]:
    """Slot 1 of a norm whose graph output is float16 or bfloat16 (`normalize_half_rows_into`): whole rows of float32,
    `HALF_NORM_CHUNK` elements or one row when a row is longer; [] otherwise."""
    from ._util import out_dtype

    shape = input_shapes[0] if input_shapes else None
    if out_dtype(node) not in HALF_TYPES or not norm_rows(shape, axis):
        return []
    return [(1, workspace_nbytes((half_norm_stage(shape, axis),), np.float32))]


def half_norm_stage(shape: tuple[int, ...], axis: int) -> int:
    """float32 elements of a float16 norm's staging slot: whole rows, `HALF_NORM_CHUNK` or one longer row."""
    rows = norm_rows(shape, axis) or 0
    hidden = int(np.prod(shape[norm_axis(axis, len(shape)):], dtype=np.int64))
    return min(rows, max(1, HALF_NORM_CHUNK // max(hidden, 1))) * hidden


def normalize_half_rows_into(x: np.ndarray, out: np.ndarray, scale: np.ndarray, bias: np.ndarray | None, eps: float,
                             simplified: bool, stat: np.ndarray, stage: np.ndarray, *, skip: np.ndarray | None = None,
                             skip_bias: np.ndarray | None = None, total: np.ndarray | None = None) -> None:
    """`normalize_rows_into` for float16 / bfloat16 rows (2-D `x`, `out`) computed in float32, whole rows at a time in
    `stage` (float32, a multiple of the row length): a chunk of x upcast (plus `skip` and `skip_bias`, in
    float32, rounded into `total` when given), normalized in place and rounded into `out`. Each chunk is read
    before its rows of `out` / `total` are written, so either may be x's or skip's block."""
    rows, n = x.shape
    chunk = max(1, stage.size // n)
    for r0 in range(0, rows, chunk):
        r1 = min(rows, r0 + chunk)
        s = stage[: (r1 - r0) * n].reshape(r1 - r0, n)
        np.copyto(s, x[r0:r1])
        if skip is not None:
            np.add(s, skip[r0:r1], out=s)
        if skip_bias is not None:
            np.add(s, skip_bias.reshape(1, n), out=s)
        if total is not None:
            np.copyto(total[r0:r1], s, casting="same_kind")
        normalize_rows_into(s, s, scale, bias, eps, simplified, stat[r0:r1])
        np.copyto(out[r0:r1], s, casting="same_kind")


def half_norm(node, x: np.ndarray, *params: np.ndarray | None) -> bool:
    """The 16-bit path of `normalize_half_rows_into` applies: the graph's output float16 or bfloat16 (slot 1
    declared), x and every present parameter float16, bfloat16 or float32, x not float32."""
    from ._util import out_dtype

    def half(a: np.ndarray) -> bool:
        return a.dtype == np.float16 or a.dtype.name == "bfloat16"

    return (half(x) and out_dtype(node) in HALF_TYPES
            and all(p is None or half(p) or p.dtype == np.float32 for p in params))


def fast_norm(x: np.ndarray, *params: np.ndarray | None) -> bool:
    """The float32 path of `normalize_rows_into` applies: x and every present parameter float32."""
    return x.dtype == np.float32 and all(p is None or p.dtype == np.float32 for p in params)


class _NormBase(OpImpl):
    def supports(self, node, inputs, opset):
        return check_all(inputs, FLOATS_BF)


class _StashedNorm(_NormBase):
    """Norms with a `stash_type` attribute: the precision statistics are computed in."""

    def supports(self, node, inputs, opset):
        st = node.attr("stash_type", 1)
        if st not in (T.FLOAT, T.DOUBLE, T.FLOAT16, T.BFLOAT16):
            return decline_attr("stash_type", st, "1 (float32), 11 (double), 10, 16")
        return super().supports(node, inputs, opset)


@register("LayerNormalization", since=17)
class LayerNormalization(_StashedNorm):
    """float32 with only Y requested: into the output block, row statistics in workspace slot 0."""

    writes_output = True

    def workspace_bytes(self, node, input_shapes):
        return norm_workspace(node, input_shapes, node.attr("axis", -1))

    def compute(self, node, inputs):
        x, scale = inputs[0], inputs[1]
        bias = inputs[2] if len(inputs) > 2 else None
        axis = norm_axis(node.attr("axis", -1), x.ndim)
        eps = node.attr("epsilon", 1e-5)
        only_y = not any(node.outputs[1:])
        if only_y and fast_norm(x, scale, bias) and node.attr("stash_type", 1) == T.FLOAT and x.size:
            rows = norm_rows(x.shape, axis)
            out = self.output(0, x.shape, x.dtype)
            normalize_rows_into(x.reshape(rows, -1), out.reshape(rows, -1), scale, bias, eps, False,
                                self.workspace(0, (rows,), np.float32))
            return [out]
        st = np_dtype(node.attr("stash_type", 1))
        xs = x.astype(st)
        axes = tuple(range(axis, x.ndim))
        mean = xs.mean(axis=axes, keepdims=True)
        d = xs - mean
        var = (d * d).mean(axis=axes, keepdims=True)
        inv = 1.0 / np.sqrt(var + st.type(eps))
        y = d * inv * scale.astype(st)
        if bias is not None:
            y = y + bias.astype(st)
        return [y.astype(x.dtype), mean.astype(st), inv.astype(st)]


@register("RMSNormalization", since=23)
class RMSNormalization(_StashedNorm):

    def compute(self, node, inputs):
        x, scale = inputs[0], inputs[1]
        axis = norm_axis(node.attr("axis", -1), x.ndim)
        eps = node.attr("epsilon", 1e-5)
        st = np_dtype(node.attr("stash_type", 1))
        xs = x.astype(st)
        ms = np.mean(xs * xs, axis=tuple(range(axis, x.ndim)), keepdims=True)
        y = xs / np.sqrt(ms + st.type(eps)) * scale.astype(st)
        return [y.astype(x.dtype)]


@register("BatchNormalization", since=1)
class BatchNormalization(_NormBase):
    def supports(self, node, inputs, opset):
        if opset < 9 and not node.attr("spatial", 1):
            return decline_attr("spatial", 0, "spatial=1", "use per-channel statistics (spatial=1)")
        if opset < 7 and not node.attr("is_test", 0):
            return decline_attr("is_test", 0, "is_test=1 (inference)", "export the model for inference")
        if opset < 14 and len([o for o in node.outputs if o]) > 1:
            return Decline(rejected=f"{len(node.outputs)} outputs before opset 14 (training statistics)",
                           accepts="the Y output only (inference) or training_mode from opset 14",
                           remedy="export the model for inference")
        return super().supports(node, inputs, opset)

    def compute(self, node, inputs):
        x, scale, b, mean, var = inputs[:5]
        eps = node.attr("epsilon", 1e-5)
        bshape = (1, -1) + (1,) * (x.ndim - 2)
        xf = upcast(x)
        if node.attr("training_mode", 0):
            axes = tuple(i for i in range(x.ndim) if i != 1)
            m, v = xf.mean(axis=axes), xf.var(axis=axes)
            mom = node.attr("momentum", 0.9)
            y = (xf - m.reshape(bshape)) / np.sqrt(v.reshape(bshape) + eps) * upcast(scale).reshape(bshape) \
                + upcast(b).reshape(bshape)
            rm = upcast(mean) * mom + m * (1 - mom)
            rv = upcast(var) * mom + v * (1 - mom)
            return [y.astype(x.dtype), rm.astype(mean.dtype), rv.astype(var.dtype)]
        y = (xf - upcast(mean).reshape(bshape)) / np.sqrt(upcast(var).reshape(bshape) + eps)
        y = y * upcast(scale).reshape(bshape) + upcast(b).reshape(bshape)
        return [y.astype(x.dtype)]


@register("InstanceNormalization", since=1)
class InstanceNormalization(_NormBase):
    def compute(self, node, inputs):
        x, scale, b = inputs
        eps = node.attr("epsilon", 1e-5)
        xf = upcast(x)
        axes = tuple(range(2, x.ndim))
        bshape = (1, -1) + (1,) * (x.ndim - 2)
        m = xf.mean(axis=axes, keepdims=True)
        v = xf.var(axis=axes, keepdims=True)
        y = (xf - m) / np.sqrt(v + eps) * upcast(scale).reshape(bshape) + upcast(b).reshape(bshape)
        return [y.astype(x.dtype)]


@register("GroupNormalization", since=18)
class GroupNormalization(_NormBase):
    def compute(self, node, inputs):
        from ._interp import node_opset

        x, scale, b = inputs
        g = node.attr("num_groups")
        eps = node.attr("epsilon", 1e-5)
        st = np_dtype(node.attr("stash_type", 1)) if node_opset(node) >= 21 else np.dtype(np.float32)
        n, c = x.shape[:2]
        xg = x.astype(st).reshape(n, g, int(np.prod(x.shape[1:])) // g)
        m = xg.mean(axis=2, keepdims=True)
        v = xg.var(axis=2, keepdims=True)
        y = ((xg - m) / np.sqrt(v + eps)).reshape(x.shape)
        bshape = (1, -1) + (1,) * (x.ndim - 2)
        if node_opset(node) >= 21 or scale.shape[0] == c:
            sc, bb = scale.astype(st).reshape(bshape), b.astype(st).reshape(bshape)
        else:  # opset 18: scale and bias per group
            rep = c // g
            sc = np.repeat(scale.astype(st), rep).reshape(bshape)
            bb = np.repeat(b.astype(st), rep).reshape(bshape)
        return [(y * sc + bb).astype(x.dtype)]


@register("LpNormalization", since=1)
class LpNormalization(_NormBase):
    def supports(self, node, inputs, opset):
        if node.attr("p", 2) not in (1, 2):
            return decline_attr("p", node.attr("p"), "1 or 2")
        return super().supports(node, inputs, opset)

    def compute(self, node, inputs):
        x = inputs[0]
        axis = norm_axis(node.attr("axis", -1), x.ndim)
        xf = upcast(x)
        if node.attr("p", 2) == 1:
            n = np.sum(np.abs(xf), axis=axis, keepdims=True)
        else:
            n = np.sqrt(np.sum(xf * xf, axis=axis, keepdims=True))
        with np.errstate(all="ignore"):
            y = np.where(n == 0, 0, xf / n)
        return [y.astype(x.dtype)]


@register("MeanVarianceNormalization", since=9)
class MeanVarianceNormalization(_NormBase):
    def compute(self, node, inputs):
        x = inputs[0]
        axes = tuple(norm_axis(a, x.ndim) for a in (node.attr("axes") or [0, 2, 3]))
        xf = upcast(x)
        m = xf.mean(axis=axes, keepdims=True)
        s = np.sqrt((xf * xf).mean(axis=axes, keepdims=True) - m * m)
        return [((xf - m) / (s + 1e-9)).astype(x.dtype)]


@register("LRN", since=1)
class LRN(_NormBase):
    def compute(self, node, inputs):
        x = inputs[0]
        size = node.attr("size")
        alpha, beta, bias = node.attr("alpha", 1e-4), node.attr("beta", 0.75), node.attr("bias", 1.0)
        xf = upcast(x)
        sq = xf * xf
        c = x.shape[1]
        lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
        pad = [(0, 0)] * x.ndim
        pad[1] = (lo, hi)
        csum = np.cumsum(np.pad(sq, pad), axis=1)
        csum = np.concatenate([np.zeros_like(csum[:, :1]), csum], axis=1)
        window = csum[:, size:size + c] - csum[:, :c]
        y = xf / (bias + alpha / size * window) ** beta
        return [y.astype(x.dtype)]
