"""Shape and layout ops: Shape, Size, Reshape, Flatten, (Un)Squeeze, Transpose, Concat, Split, Expand,
ConstantOfShape, Range, Tile, Slice, Pad, EyeLike, Trilu, Depth/SpaceToDepth, CenterCropPad."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto as T

from ._errors import CpuOpError
from ._registry import OpImpl, register
from ._util import (
    ANY,
    I64,
    INDEX,
    IndexTyped,
    broadcast_shape,
    check_dtype,
    decline_attr,
    ints,
    norm_axis,
    np_dtype,
    tensor_attr,
    write_output,
)


@register("Shape", since=1)
class Shape(OpImpl):
    writes_output = True
    def compute(self, node, inputs):
        shape = inputs[0].shape
        r = len(shape)
        start = node.attr("start", 0)
        end = node.attr("end", None)
        start = min(max(start + r if start < 0 else start, 0), r)
        end = r if end is None else min(max(end + r if end < 0 else end, 0), r)
        out = self.output(0, (len(shape[start:end]),), np.int64)
        out[:] = shape[start:end]
        return [out]


@register("Size", since=1)
class Size(OpImpl):
    def compute(self, node, inputs):
        return [np.array(inputs[0].size, dtype=np.int64)]


@register("Reshape", since=1)
class Reshape(IndexTyped):
    index_dtypes = {1: I64}
    writes_output = True

    def compute(self, node, inputs):
        x = inputs[0]
        shape = ints(inputs[1]) if len(inputs) > 1 and inputs[1] is not None else list(node.attr("shape"))
        if not node.attr("allowzero", 0):
            shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
        return [write_output(self, x.reshape(shape))]  # nothing moves where the plan reshapes in place


@register("Flatten", since=1)
class Flatten(OpImpl):
    writes_output = True
    def compute(self, node, inputs):
        x = inputs[0]
        axis = norm_axis(node.attr("axis", 1), x.ndim)
        outer = int(np.prod(x.shape[:axis]))
        return [write_output(self, x.reshape(outer, -1) if x.size or outer else
                             x.reshape(outer, int(np.prod(x.shape[axis:]))))]


def _axes(node, inputs, index: int, opset: int, since: int) -> list[int] | None:
    if opset >= since:
        return ints(inputs[index]) if len(inputs) > index and inputs[index] is not None else None
    return node.attr("axes")


@register("Squeeze", since=1)
class Squeeze(IndexTyped):
    index_dtypes = {1: I64}
    writes_output = True

    def compute(self, node, inputs):
        x = inputs[0]
        axes = _axes(node, inputs, 1, _opset(node), 13)
        if axes is None:
            return [write_output(self, np.squeeze(x))]
        return [write_output(self, np.squeeze(x, axis=tuple(norm_axis(a, x.ndim) for a in axes)))]


@register("Unsqueeze", since=1)
class Unsqueeze(IndexTyped):
    index_dtypes = {1: I64}
    writes_output = True

    def compute(self, node, inputs):
        return self._compute_at(node, inputs, _opset(node))

    def bind(self, node, opset):
        return lambda inputs: self._compute_at(node, inputs, opset)

    def _compute_at(self, node, inputs, opset: int) -> list:
        x = inputs[0]
        axes = _axes(node, inputs, 1, opset, 13)
        r = x.ndim + len(axes)
        where = sorted(norm_axis(a, r) for a in axes)
        if where and 0 <= where[0] and where[-1] < r and len(set(where)) == len(where):
            shape = list(x.shape)
            for a in where:  # np.expand_dims' result, without its axis normalization (about 1.5 us a call)
                shape.insert(a, 1)
            return [write_output(self, x.reshape(shape))]
        return [write_output(self, np.expand_dims(x, tuple(where)))]  # numpy's own error for a bad axis


def _opset(node) -> int:
    from ._interp import node_opset

    return node_opset(node)


@register("Transpose", since=1)
class Transpose(OpImpl):
    writes_output = True

    def compute(self, node, inputs):
        return [write_output(self, np.transpose(inputs[0], node.attr("perm")))]


@register("Concat", since=1)
class Concat(OpImpl):
    writes_output = True

    def compute(self, node, inputs):
        xs = [x for x in inputs if x is not None]
        first = xs[0]
        given = node.attr("axis", 1)  # Concat-1 defaults to axis 1
        if not -first.ndim <= given < max(first.ndim, 1):
            raise np.exceptions.AxisError(f"Concat axis {given!r} is out of range for inputs of rank {first.ndim}; "
                                          f"use an axis in [{-first.ndim}, {max(first.ndim - 1, 0)}]")
        axis = norm_axis(given, first.ndim)
        dtype, ndim, extent = first.dtype, first.ndim, 0
        for x in xs:  # a loop, not any() and sum() over generators: this runs per node (shape arithmetic)
            if x.dtype != dtype or x.ndim != ndim:
                return [np.concatenate(xs, axis=axis)]
        if dtype.kind == "O":
            return [np.concatenate(xs, axis=axis)]
        for x in xs:
            extent += x.shape[axis]
        shape = list(first.shape)
        shape[axis] = extent
        out = self.output(0, shape, dtype)
        np.concatenate(xs, axis=axis, out=out)
        return [out]

    def supports(self, node, inputs, opset):
        if node.attr("axis") is None and opset >= 4:
            return decline_attr("axis", None, "an axis attribute", "set Concat's axis")
        return None


@register("Split", since=1)
class Split(IndexTyped):
    index_dtypes = {1: I64}

    def compute(self, node, inputs):
        x = inputs[0]
        axis = norm_axis(node.attr("axis", 0), x.ndim)
        n = len(node.outputs)
        split = ints(inputs[1]) if len(inputs) > 1 and inputs[1] is not None else node.attr("split")
        dim = x.shape[axis]
        if split is None:
            k = node.attr("num_outputs", n)
            size = -(-dim // k)
            split = [min(size, dim - i * size) for i in range(k)]
        points = np.cumsum(split)[:-1]
        return list(np.split(x, points, axis=axis))


@register("Expand", since=8)
class Expand(IndexTyped):
    index_dtypes = {1: I64}
    writes_output = True

    def compute(self, node, inputs):
        x, shape = inputs[0], ints(inputs[1])
        return [write_output(self, np.broadcast_to(x, broadcast_shape(x.shape, tuple(shape))))]


@register("ConstantOfShape", since=9)
class ConstantOfShape(IndexTyped):
    index_dtypes = {0: I64}
    writes_output = True

    def compute(self, node, inputs):
        v = tensor_attr(node, "value")
        if v is None:
            v = np.zeros(1, dtype=np.float32)
        if v.dtype.kind == "O":
            return [np.full(ints(inputs[0]), v.reshape(-1)[0], dtype=v.dtype)]
        out = self.output(0, ints(inputs[0]), v.dtype)
        out.fill(v.reshape(-1)[0])
        return [out]


@register("Range", since=11)
class Range(OpImpl):
    """start + i * delta for i < ceil((limit - start) / delta), computed in the output block: the indices by an
    in-place running sum of ones (exact in float32 up to 2^24, as np.arange's), then one multiply and one add,
    each rounded once in the element type, as `start + arange(n) * delta` rounds."""

    writes_output = True

    def compute(self, node, inputs):
        start, limit, delta = (np.asarray(i).reshape(()) for i in inputs)
        n = max(int(np.ceil((float(limit) - float(start)) / float(delta))), 0)
        out = self.output(0, (n,), start.dtype)
        if n:
            out.fill(1)
            out[0] = 0
            np.cumsum(out, out=out)
            np.multiply(out, delta.astype(out.dtype), out=out)
            np.add(out, start, out=out)
        return [out]


@register("Tile", since=1)
class Tile(IndexTyped):
    index_dtypes = {1: I64}

    def compute(self, node, inputs):
        x = inputs[0]
        if _opset(node) < 6:  # Tile-1: (input, tiles, axis) repeats the whole tensor along one axis
            reps = [1] * x.ndim
            reps[norm_axis(int(np.asarray(inputs[2]).reshape(-1)[0]), x.ndim)] = int(np.asarray(inputs[1]).reshape(-1)[0])
        else:
            reps = ints(inputs[1])
        if any(r < 0 for r in reps):  # numpy would say only 'negative dimensions are not allowed'
            raise CpuOpError(f"Tile: repeats {list(reps)} has a negative entry; every repeat must be >= 0 (onnxruntime "
                             "refuses it too): fix the model's repeats input")
        return [np.tile(x, reps)]


@register("Slice", since=1)
class Slice(IndexTyped):
    index_dtypes = {1: INDEX, 2: INDEX, 3: INDEX, 4: INDEX}
    writes_output = True

    def compute(self, node, inputs):
        x = inputs[0]
        if _opset(node) < 10:
            starts, ends, axes, steps = node.attr("starts"), node.attr("ends"), node.attr("axes"), None
        else:
            opt = lambda i: ints(inputs[i]) if len(inputs) > i and inputs[i] is not None else None  # noqa: E731
            starts, ends, axes, steps = opt(1), opt(2), opt(3), opt(4)
        if axes is None:
            axes = list(range(len(starts)))
        if steps is None:
            steps = [1] * len(starts)
        sl = [slice(None)] * x.ndim
        for s, e, a, st in zip(starts, ends, axes, steps):
            a = norm_axis(a, x.ndim)
            dim = x.shape[a]
            s = s + dim if s < 0 else s
            e = e + dim if e < 0 else e
            if st > 0:
                s, e = min(max(s, 0), dim), min(max(e, 0), dim)
            else:
                s, e = min(max(s, 0), dim - 1), min(max(e, -1), dim - 1)  # start -1 would read from the end
            sl[a] = slice(s, None if (st < 0 and e < 0) else e, st)
        return [write_output(self, x[tuple(sl)])]


@register("Pad", since=1)
class Pad(IndexTyped):
    index_dtypes = {1: I64, 3: INDEX}

    def supports(self, node, inputs, opset):
        mode = node.attr("mode", "constant")
        if mode not in ("constant", "reflect", "edge", "wrap") or (mode == "wrap" and opset < 19):
            return decline_attr("mode", mode, "'constant', 'reflect', 'edge' ('wrap' from opset 19)")
        return check_dtype(inputs, 0, ANY - {T.STRING}) or super().supports(node, inputs, opset)

    def compute(self, node, inputs):
        x = inputs[0]
        mode = node.attr("mode", "constant")
        if _opset(node) < 11:
            pads = node.attr("pads") if node.attr("pads") is not None else node.attr("paddings")  # Pad-1
            value, axes = node.attr("value", 0.0), None
        else:
            pads = ints(inputs[1])
            value = inputs[2] if len(inputs) > 2 and inputs[2] is not None and inputs[2].size else 0
            value = np.asarray(value).reshape(-1)[0] if np.ndim(value) else value
            axes = ints(inputs[3]) if len(inputs) > 3 and inputs[3] is not None else None
        r = x.ndim
        axes = list(range(r)) if axes is None else [norm_axis(a, r) for a in axes]
        k = len(axes)
        width = [[0, 0] for _ in range(r)]
        for i, a in enumerate(axes):
            width[a] = [pads[i], pads[i + k]]
        # negative pads crop first
        crop = tuple(slice(max(-b, 0), x.shape[i] - max(-e, 0)) for i, (b, e) in enumerate(width))
        x = x[crop]
        width = [(max(b, 0), max(e, 0)) for b, e in width]
        if mode == "constant":
            return [np.pad(x, width, mode="constant", constant_values=np.asarray(value).astype(x.dtype))]
        return [np.pad(x, width, mode={"edge": "edge", "reflect": "reflect", "wrap": "wrap"}[mode])]


@register("EyeLike", since=9)
class EyeLike(OpImpl):
    def compute(self, node, inputs):
        x = inputs[0]
        dt = np_dtype(node.attr("dtype")) if node.attr("dtype") is not None else x.dtype
        return [np.eye(x.shape[0], x.shape[1], k=node.attr("k", 0), dtype=dt)]


@register("Trilu", since=14)
class Trilu(IndexTyped):
    index_dtypes = {1: I64}

    def compute(self, node, inputs):
        x = inputs[0]
        k = int(np.asarray(inputs[1]).reshape(-1)[0]) if len(inputs) > 1 and inputs[1] is not None else 0
        return [np.triu(x, k) if node.attr("upper", 1) else np.tril(x, k)]


@register("DepthToSpace", since=1)
class DepthToSpace(OpImpl):
    def compute(self, node, inputs):
        x = inputs[0]
        b = node.attr("blocksize")
        n, c, h, w = x.shape
        if node.attr("mode", "DCR") == "DCR":
            y = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
        else:
            y = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
        return [y.reshape(n, c // (b * b), h * b, w * b)]


@register("SpaceToDepth", since=1)
class SpaceToDepth(OpImpl):
    def compute(self, node, inputs):
        x = inputs[0]
        b = node.attr("blocksize")
        n, c, h, w = x.shape
        y = x.reshape(n, c, h // b, b, w // b, b)
        y = y.transpose(0, 1, 3, 5, 2, 4) if node.attr("mode", "DCR") == "CRD" else y.transpose(0, 3, 5, 1, 2, 4)
        return [y.reshape(n, c * b * b, h // b, w // b)]


@register("CenterCropPad", since=18)
class CenterCropPad(IndexTyped):
    index_dtypes = {1: INDEX}

    def compute(self, node, inputs):
        x, shape = inputs[0], ints(inputs[1])
        axes = node.attr("axes") or list(range(x.ndim))
        axes = [norm_axis(a, x.ndim) for a in axes]
        out_shape = list(x.shape)
        for a, s in zip(axes, shape):
            out_shape[a] = s
        y = np.zeros(out_shape, dtype=x.dtype)
        src, dst = [slice(None)] * x.ndim, [slice(None)] * x.ndim
        for a, s in zip(axes, shape):
            d = x.shape[a]
            if s <= d:
                off = (d - s) // 2
                src[a] = slice(off, off + s)
            else:
                off = (s - d) // 2
                dst[a] = slice(off, off + d)
        y[tuple(dst)] = x[tuple(src)]
        return [y]
