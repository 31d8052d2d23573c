"""Reductions (Reduce*), ArgMax/ArgMin, CumSum/CumProd, TopK."""

from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto as T

from ._registry import OpImpl, register
from ._util import I64, INDEX, NUMERIC_BF, IndexTyped, check_dtype, ints, is_lowp, norm_axis, upcast


def _reduce_axes(node, inputs, opset: int, since: int, ndim: int) -> tuple[int, ...] | None:
    """The axes to reduce, () for a no-op, None for all."""
    if opset >= since:
        axes = ints(inputs[1]) if len(inputs) > 1 and inputs[1] is not None else []
    else:
        axes = node.attr("axes") or []
    if not axes:
        return () if node.attr("noop_with_empty_axes", 0) else None
    if len(axes) == 1:  # the usual case, asked per node: no sort
        return (norm_axis(axes[0], ndim),)
    return tuple(sorted(norm_axis(a, ndim) for a in axes))


class _Reduce(IndexTyped):
    index_dtypes = {1: I64}
    axes_input_since = 18
    allowed = NUMERIC_BF

    def supports(self, node, inputs, opset):
        return check_dtype(inputs, 0, self.allowed) or super().supports(node, inputs, opset)

    def compute(self, node, inputs):
        from ._interp import node_opset

        return self._compute_at(node, inputs, node_opset(node))

    def bind(self, node, opset):
        return lambda inputs: self._compute_at(node, inputs, opset)

    def _compute_at(self, node, inputs, opset: int) -> list:
        x = inputs[0]
        axes = _reduce_axes(node, inputs, opset, self.axes_input_since, x.ndim)
        keep = bool(node.attr("keepdims", 1))
        if axes == ():
            return [np.array(self.identity_map(upcast(x))).astype(x.dtype)]
        if self.ufunc_reduce is not None and x.dtype.kind == "f" and not is_lowp(x) and x.size:
            ax = tuple(range(x.ndim)) if axes is None else axes
            shape = tuple(1 if i in ax else d for i, d in enumerate(x.shape)) if keep else \
                tuple(d for i, d in enumerate(x.shape) if i not in ax)
            out = self.output(0, shape, x.dtype)
            _reduce_into(self.ufunc_reduce, x, ax, keep, out, math.prod(x.shape[i] for i in ax) if self.mean else 0)
            return [out]
        with np.errstate(all="ignore"):
            y = self.reduce(upcast(x), axes, keep)
        return [np.asarray(y).astype(x.dtype)]

    ufunc_reduce = None  # set: a float input is reduced straight into the output block
    mean = False

    def identity_map(self, x):
        return x

    def reduce(self, x, axes, keep):
        raise NotImplementedError


@np.errstate(all="ignore")  # as a decorator: no errstate object built and entered per call (about 0.5 us less)
def _reduce_into(reduce, x: np.ndarray, axes: tuple[int, ...], keep: bool, out: np.ndarray, mean_of: int) -> None:
    """`reduce` (a ufunc's reduce) of `x` over `axes` into `out`, divided by `mean_of` unless 0."""
    reduce(x, axis=axes, keepdims=keep, out=out)
    if mean_of:
        out /= x.dtype.type(mean_of)


def _init_for(x: np.ndarray, high: bool):
    if x.dtype.kind == "f":
        return -np.inf if high else np.inf
    if x.dtype == bool:
        return not high
    info = np.iinfo(x.dtype)
    return info.min if high else info.max


@register("ReduceSum", since=1)
class ReduceSum(_Reduce):
    axes_input_since = 13
    writes_output = True
    ufunc_reduce = staticmethod(np.add.reduce)

    def reduce(self, x, axes, keep):
        return np.sum(x, axis=axes, keepdims=keep, dtype=x.dtype)


@register("ReduceMean", since=1)
class ReduceMean(_Reduce):
    writes_output = True
    ufunc_reduce = staticmethod(np.add.reduce)
    mean = True

    def reduce(self, x, axes, keep):
        return np.mean(x, axis=axes, keepdims=keep)


@register("ReduceMax", since=1)
class ReduceMax(_Reduce):
    allowed = NUMERIC_BF | {T.BOOL}
    writes_output = True
    ufunc_reduce = staticmethod(np.maximum.reduce)

    def reduce(self, x, axes, keep):
        return np.max(x, axis=axes, keepdims=keep, initial=_init_for(x, True))


@register("ReduceMin", since=1)
class ReduceMin(_Reduce):
    allowed = NUMERIC_BF | {T.BOOL}
    writes_output = True
    ufunc_reduce = staticmethod(np.minimum.reduce)

    def reduce(self, x, axes, keep):
        return np.min(x, axis=axes, keepdims=keep, initial=_init_for(x, False))


@register("ReduceProd", since=1)
class ReduceProd(_Reduce):
    def reduce(self, x, axes, keep):
        return np.prod(x, axis=axes, keepdims=keep, dtype=x.dtype)


@register("ReduceL1", since=1)
class ReduceL1(_Reduce):
    def reduce(self, x, axes, keep):
        return np.sum(np.abs(x), axis=axes, keepdims=keep)

    def identity_map(self, x):
        return np.abs(x)


@register("ReduceL2", since=1)
class ReduceL2(_Reduce):
    def reduce(self, x, axes, keep):
        return np.sqrt(np.sum(np.square(x.astype(np.float64) if x.dtype.kind != "f" else x), axis=axes, keepdims=keep))

    def identity_map(self, x):
        return np.abs(x)


@register("ReduceSumSquare", since=1)
class ReduceSumSquare(_Reduce):
    def reduce(self, x, axes, keep):
        return np.sum(np.square(x), axis=axes, keepdims=keep)

    def identity_map(self, x):
        return np.square(x)


@register("ReduceLogSum", since=1)
class ReduceLogSum(_Reduce):
    def reduce(self, x, axes, keep):
        return np.log(np.sum(x, axis=axes, keepdims=keep))

    def identity_map(self, x):
        return np.log(x)


@register("ReduceLogSumExp", since=1)
class ReduceLogSumExp(_Reduce):
    def reduce(self, x, axes, keep):
        xf = x.astype(np.float64)
        if xf.size == 0:
            return np.log(np.sum(np.exp(xf), axis=axes, keepdims=keep))
        m = np.max(xf, axis=axes, keepdims=True)
        m = np.where(np.isfinite(m), m, 0)
        s = np.log(np.sum(np.exp(xf - m), axis=axes, keepdims=True)) + m
        return s if keep else np.squeeze(s, axis=axes)

    def identity_map(self, x):
        return x


class _Arg(OpImpl):
    def supports(self, node, inputs, opset):
        return check_dtype(inputs, 0, NUMERIC_BF)

    def compute(self, node, inputs):
        x = upcast(inputs[0])
        axis = norm_axis(node.attr("axis", 0), x.ndim)
        if node.attr("select_last_index", 0):
            flipped = np.flip(x, axis)
            idx = x.shape[axis] - 1 - self.fn(flipped, axis)
        else:
            idx = self.fn(x, axis)
        if node.attr("keepdims", 1):
            idx = np.expand_dims(idx, axis)
        return [idx.astype(np.int64)]


@register("ArgMax", since=1)
class ArgMax(_Arg):
    fn = staticmethod(lambda x, axis: np.argmax(x, axis=axis))


@register("ArgMin", since=1)
class ArgMin(_Arg):
    fn = staticmethod(lambda x, axis: np.argmin(x, axis=axis))


class _Cum(IndexTyped):
    index_dtypes = {1: INDEX}

    def supports(self, node, inputs, opset):
        return check_dtype(inputs, 0, NUMERIC_BF) or super().supports(node, inputs, opset)

    def compute(self, node, inputs):
        x = inputs[0]
        axis = norm_axis(int(np.asarray(inputs[1]).reshape(-1)[0]), x.ndim)
        y = upcast(x)
        if node.attr("reverse", 0):
            y = np.flip(y, axis)
        c = self.fn(y, axis=axis, dtype=y.dtype)
        if node.attr("exclusive", 0):
            c = self.combine_exclusive(y, c, axis)
        if node.attr("reverse", 0):
            c = np.flip(c, axis)
        return [np.ascontiguousarray(c).astype(x.dtype)]

    def combine_exclusive(self, y, c, axis):
        pad = [(0, 0)] * y.ndim
        pad[axis] = (1, 0)
        sl = [slice(None)] * y.ndim
        sl[axis] = slice(0, y.shape[axis])
        return np.pad(c, pad, constant_values=self.identity)[tuple(sl)]


@register("CumSum", since=11)
class CumSum(_Cum):
    fn = staticmethod(np.cumsum)
    identity = 0


@register("CumProd", since=26)
class CumProd(_Cum):
    fn = staticmethod(np.cumprod)
    identity = 1


@register("TopK", since=1)
class TopK(IndexTyped):
    index_dtypes = {1: I64}

    def supports(self, node, inputs, opset):
        # sorted=0 allows any order; the sorted order returned here is one of them
        return check_dtype(inputs, 0, NUMERIC_BF) or super().supports(node, inputs, opset)

    def compute(self, node, inputs):
        from ._interp import node_opset

        x = inputs[0]
        k = int(np.asarray(inputs[1]).reshape(-1)[0]) if node_opset(node) >= 10 else int(node.attr("k"))
        axis = norm_axis(node.attr("axis", -1), x.ndim)
        xu = upcast(x)
        if node.attr("largest", 1):
            key = -xu.astype(np.float64) if xu.dtype.kind in "uf" else -xu.astype(np.int64)
        else:
            key = xu
        idx = np.argsort(key, axis=axis, kind="stable")
        idx = np.take(idx, np.arange(k), axis=axis)
        return [np.take_along_axis(x, idx, axis=axis), idx.astype(np.int64)]
