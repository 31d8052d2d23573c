"""Indexing ops: Gather, GatherElements, GatherND, Scatter*, TensorScatter, Compress, OneHot, NonZero,
Unique, ReverseSequence."""

from __future__ import annotations

import numpy as np

from ._errors import IndexOutOfRangeError
from ._registry import OpImpl, register
from ._util import I64, INDEX, IndexTyped, decline_attr, ints, norm_axis

_REDUCTIONS = ("none", "add", "mul", "max", "min")


def _fix(idx: np.ndarray, dim: int, node, axis: int) -> np.ndarray:
    """Indices along `axis` (length `dim`) as non-negative int64 (the given array itself when it already is:
    callers only read it); any outside `[-dim, dim-1]` is refused. The range is checked with the minimum and
    maximum, so valid indices cost no index-sized temporaries."""
    idx = np.asarray(idx).astype(np.int64, copy=False)
    if idx.size == 0:
        return idx
    if idx.size == 1:  # a shape element or a token id: the value itself (min and max are a reduction each)
        lo = hi = int(idx.reshape(-1)[0])
    else:
        lo, hi = int(idx.min()), int(idx.max())
    if lo < -dim or hi >= dim:
        _check_range(idx, dim, node, axis)  # raises, naming the first offending index
    return np.where(idx < 0, idx + dim, idx) if lo < 0 else idx


def _check_range(idx: np.ndarray, dim, node, axis: int, tuple_indices: bool = False) -> None:
    """Raise `IndexOutOfRangeError` naming the node, the first offending index, its data axis and the
    valid range. `tuple_indices`: the last index dimension holds one index per data axis from `axis` on
    (GatherND, ScatterND), and `dim` is the array of those axes' sizes."""
    dim = np.asarray(dim, dtype=np.int64)
    bad = (idx < -dim) | (idx >= dim)
    if not bad.any():
        return
    pos = tuple(int(i) for i in np.argwhere(bad)[0])
    n = int(np.broadcast_to(dim, idx.shape)[pos])
    data_axis = axis + pos[-1] if tuple_indices else axis
    raise IndexOutOfRangeError(
        f"{node.op_type} node {node.name!r}: index {int(idx[pos])} at position {list(pos)} of the indices is "
        f"outside the valid range [{-n}, {n - 1}] for data axis {data_axis} (size {n}); indices must address an "
        "existing element (negative values count from the end)")


@register("Gather", since=1)
class Gather(IndexTyped):
    index_dtypes = {1: INDEX}
    writes_output = True

    def compute(self, node, inputs):
        x, idx = inputs
        axis = norm_axis(node.attr("axis", 0), x.ndim)
        idx = _fix(idx, x.shape[axis], node, axis)
        if x.dtype.kind == "O" or x.shape[axis] == 0:
            return [np.take(x, idx, axis=axis)]
        out = self.output(0, (*x.shape[:axis], *idx.shape, *x.shape[axis + 1:]), x.dtype)
        # indices checked above; "raise" would buffer `out`. The method, as np.take calls it (two Python calls less)
        if isinstance(x, np.ndarray):
            x.take(idx, axis=axis, out=out, mode="clip")
        else:
            np.take(x, idx, axis=axis, out=out, mode="clip")
        return [out]


@register("GatherElements", since=11)
class GatherElements(IndexTyped):
    index_dtypes = {1: INDEX}

    def compute(self, node, inputs):
        x, idx = inputs
        axis = norm_axis(node.attr("axis", 0), x.ndim)
        return [np.take_along_axis(x, _fix(idx, x.shape[axis], node, axis), axis=axis)]


@register("GatherND", since=11)
class GatherND(IndexTyped):
    index_dtypes = {1: I64}

    def compute(self, node, inputs):
        x, idx = inputs
        b = node.attr("batch_dims", 0)
        idx = idx.astype(np.int64)
        k = idx.shape[-1]
        bshape = x.shape[:b]
        nb = int(np.prod(bshape))
        xb = x.reshape((nb,) + x.shape[b:])
        ib = idx.reshape((nb, int(np.prod(idx.shape[b:-1])), k))
        dims = np.array(x.shape[b:b + k], dtype=np.int64)
        _check_range(ib, dims, node, b, tuple_indices=True)
        ib = np.where(ib < 0, ib + dims, ib)
        batch = np.arange(nb)[:, None]
        out = xb[(batch,) + tuple(ib[..., j] for j in range(k))]
        return [out.reshape(idx.shape[:-1] + x.shape[b + k:])]


def _apply(data: np.ndarray, index: tuple, updates: np.ndarray, reduction: str) -> None:
    if reduction == "none":
        data[index] = updates
    elif reduction == "add":
        np.add.at(data, index, updates)
    elif reduction == "mul":
        np.multiply.at(data, index, updates)
    elif reduction == "max":
        np.maximum.at(data, index, updates)
    else:
        np.minimum.at(data, index, updates)


class _ScatterBase(IndexTyped):
    index_dtypes = {1: INDEX}

    def supports(self, node, inputs, opset):
        r = node.attr("reduction", "none")
        if r not in _REDUCTIONS or (r in ("max", "min") and opset < 18):
            return decline_attr("reduction", r, "'none', 'add', 'mul' ('max', 'min' from opset 18)")
        return super().supports(node, inputs, opset)


@register("ScatterElements", since=11)
class ScatterElements(_ScatterBase):
    def compute(self, node, inputs):
        x, idx, upd = inputs
        axis = norm_axis(node.attr("axis", 0), x.ndim)
        out = x.copy()
        idx = _fix(idx, x.shape[axis], node, axis)
        grids = list(np.indices(idx.shape, sparse=True))
        grids[axis] = idx
        _apply(out, tuple(grids), upd, node.attr("reduction", "none"))
        return [out]


@register("Scatter", since=9, until=10)
class Scatter(ScatterElements):
    pass


@register("ScatterND", since=11)
class ScatterND(_ScatterBase):
    index_dtypes = {1: I64}

    def compute(self, node, inputs):
        x, idx, upd = inputs
        out = x.copy()
        idx = idx.astype(np.int64)
        k = idx.shape[-1]
        dims = np.array(x.shape[:k], dtype=np.int64)
        _check_range(idx, dims, node, 0, tuple_indices=True)
        idx = np.where(idx < 0, idx + dims, idx)
        flat = idx.reshape(-1, k)
        u = upd.reshape((flat.shape[0],) + x.shape[k:])
        _apply(out, tuple(flat[:, j] for j in range(k)), u, node.attr("reduction", "none"))
        return [out]


@register("TensorScatter", since=24)
class TensorScatter(IndexTyped):
    index_dtypes = {2: I64}

    def supports(self, node, inputs, opset):
        if node.attr("mode", "linear") not in ("linear", "circular"):
            return decline_attr("mode", node.attr("mode"), "'linear' or 'circular'")
        return super().supports(node, inputs, opset)

    def compute(self, node, inputs):
        cache, upd = inputs[0], inputs[1]
        wi = inputs[2] if len(inputs) > 2 and inputs[2] is not None else np.zeros(cache.shape[0], np.int64)
        axis = norm_axis(node.attr("axis", -2), cache.ndim)
        out = cache.copy()
        n, size = upd.shape[axis], cache.shape[axis]
        for b in range(cache.shape[0]):
            pos = int(wi[b]) + np.arange(n)
            if node.attr("mode", "linear") == "circular":
                pos = pos % size
            elif n and (pos[0] < 0 or pos[-1] >= size):
                raise IndexOutOfRangeError(
                    f"TensorScatter node {node.name!r}: write index {int(wi[b])} of batch {b} places {n} update(s) "
                    f"at positions {int(pos[0])}..{int(pos[-1])}, outside [0, {size - 1}] of cache axis {axis} "
                    "(mode 'linear' does not wrap; use mode 'circular' or a smaller write index)")
            sl = [slice(None)] * (cache.ndim - 1)
            sl[axis - 1] = pos
            out[b][tuple(sl)] = upd[b]
        return [out]


@register("Compress", since=9)
class Compress(IndexTyped):
    index_dtypes = {1: frozenset({9})}

    def compute(self, node, inputs):
        x, cond = inputs
        axis = node.attr("axis")
        c = np.asarray(cond, dtype=bool)
        if axis is None:
            return [np.compress(c, x.reshape(-1))]
        return [np.compress(c, x, axis=norm_axis(axis, x.ndim))]


@register("OneHot", since=9)
class OneHot(OpImpl):
    def compute(self, node, inputs):
        idx, depth, values = inputs
        d = int(np.asarray(depth).reshape(-1)[0])
        idx = np.asarray(idx).astype(np.int64)
        idx = np.where(idx < 0, idx + d, idx)
        r = idx.ndim + 1
        axis = norm_axis(node.attr("axis", -1), r)
        hot = np.expand_dims(idx, axis) == np.arange(d).reshape([-1 if i == axis else 1 for i in range(r)])
        return [np.where(hot, values[1], values[0]).astype(values.dtype)]


@register("NonZero", since=9)
class NonZero(OpImpl):
    def compute(self, node, inputs):
        x = inputs[0]
        if x.ndim == 0:
            return [np.zeros((0, int(bool(x))), dtype=np.int64) if not x else np.zeros((0, 1), np.int64)]
        return [np.array(np.nonzero(x), dtype=np.int64)]


@register("Unique", since=11)
class Unique(OpImpl):
    def compute(self, node, inputs):
        x = inputs[0]
        axis = node.attr("axis")
        if axis is None:
            flat = x.reshape(-1)
            u, first, inv, counts = np.unique(flat, return_index=True, return_inverse=True, return_counts=True)
        else:
            axis = norm_axis(axis, x.ndim)
            u, first, inv, counts = np.unique(x, axis=axis, return_index=True, return_inverse=True,
                                              return_counts=True)
        inv = inv.reshape(-1)
        if not node.attr("sorted", 1):
            order = np.argsort(first, kind="stable")
            rank = np.empty_like(order)
            rank[order] = np.arange(len(order))
            u = np.take(u, order, axis=0 if axis is None else axis)
            first, counts, inv = first[order], counts[order], rank[inv]
        return [u, first.astype(np.int64), inv.astype(np.int64), counts.astype(np.int64)]


@register("ReverseSequence", since=10)
class ReverseSequence(IndexTyped):
    index_dtypes = {1: I64}

    def compute(self, node, inputs):
        x, lens = inputs
        bax, tax = node.attr("batch_axis", 1), node.attr("time_axis", 0)
        out = x.copy()
        for b, n in enumerate(ints(lens)):
            src = [slice(None)] * x.ndim
            src[bax], src[tax] = b, slice(0, n)
            dst = list(src)
            out[tuple(dst)] = np.flip(x[tuple(src)], axis=tax - (1 if bax < tax else 0))
        return [out]
