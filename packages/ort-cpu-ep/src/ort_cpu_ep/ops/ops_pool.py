"""Pooling: MaxPool (with Indices), AveragePool, LpPool, GlobalAverage/Max/LpPool, MaxUnpool."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto as TP

from ._registry import Decline, OpImpl, register
from ._util import FLOATS_BF, INTS, check_dtype, decline_attr, ints, rank, upcast
from ._window import conv_pads, out_size, windows

_AUTO = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


def _geometry(node, x: np.ndarray):
    n = x.ndim - 2
    kernel = list(node.attr("kernel_shape"))
    strides = list(node.attr("strides") or [1] * n)
    dil = list(node.attr("dilations") or [1] * n)
    ceil = bool(node.attr("ceil_mode", 0))
    auto = node.attr("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        outs = [-(-x.shape[2 + i] // strides[i]) for i in range(n)]
        pads = []
        for i in range(n):
            total = max((outs[i] - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - x.shape[2 + i], 0)
            pads.append(total // 2 if auto == "SAME_UPPER" else total - total // 2)
        pads += [0] * n  # end padding is implied by the window view
        return kernel, strides, dil, pads, outs
    pads = conv_pads(node, x.shape[2:], kernel, strides, dil)
    outs = [out_size(x.shape[2 + i], kernel[i], strides[i], dil[i], pads[i], pads[n + i], ceil, truncate=True)
            for i in range(n)]
    if any(o < 0 for o in outs):
        raise ValueError(f"{node.op_type}: the pooling window is larger than the padded input (output extent {outs} "
                         f"for input {list(x.shape)}, kernel_shape {kernel}, strides {strides}, pads {pads}); give "
                         "an input at least as large as the kernel, or pads")
    return kernel, strides, dil, pads, outs


class _PoolBase(OpImpl):
    allowed = FLOATS_BF

    def supports(self, node, inputs, opset):
        if node.attr("auto_pad", "NOTSET") not in _AUTO:
            return decline_attr("auto_pad", node.attr("auto_pad"), ", ".join(_AUTO))
        r = rank(inputs, 0)
        if r is not None and r < 3:
            return Decline(rejected=f"input rank {r}", accepts="rank >= 3 (N, C, spatial...)")
        if node.attr("kernel_shape") is None and not self.op_type.startswith("Global"):
            return decline_attr("kernel_shape", None, "a kernel_shape", "set kernel_shape")
        return check_dtype(inputs, 0, self.allowed)


@register("MaxPool", since=1)
class MaxPool(_PoolBase):
    allowed = FLOATS_BF | {TP.INT8, TP.UINT8}

    def compute(self, node, inputs):
        x = inputs[0]
        n = x.ndim - 2
        kernel, strides, dil, pads, outs = _geometry(node, x)
        xf = x if x.dtype.kind in "iu" else upcast(x)
        fill = -np.inf if xf.dtype.kind == "f" else np.iinfo(xf.dtype).min
        win = windows(xf, kernel, strides, dil, pads, outs, fill)
        flat = win.reshape(win.shape[:2 + n] + (int(np.prod(kernel)),))
        y = flat.max(axis=-1).astype(x.dtype)
        if len(node.outputs) < 2 or not node.outputs[1]:
            return [y]
        arg = flat.argmax(axis=-1)
        offs = np.unravel_index(arg, kernel)
        coords = []
        for i in range(n):
            start = (np.arange(outs[i]) * strides[i] - pads[i]).reshape([-1 if j == i else 1 for j in range(n)])
            coords.append(start + offs[i] * dil[i])
        spatial = x.shape[2:]
        nc = (np.arange(x.shape[0]).reshape((-1, 1) + (1,) * n) * x.shape[1]
              + np.arange(x.shape[1]).reshape((1, -1) + (1,) * n))
        if node.attr("storage_order", 0) == 0:
            idx = nc
            for i in range(n):
                idx = idx * spatial[i] + coords[i]
        else:  # column-major within each image
            idx = np.zeros_like(coords[0])
            for i in reversed(range(n)):
                idx = idx * spatial[i] + coords[i]
            idx = nc * int(np.prod(spatial)) + idx
        return [y, idx.astype(np.int64)]


@register("AveragePool", since=1)
class AveragePool(_PoolBase):
    def compute(self, node, inputs):
        x = inputs[0]
        n = x.ndim - 2
        kernel, strides, dil, pads, outs = _geometry(node, x)
        xf = upcast(x)
        win = windows(xf, kernel, strides, dil, pads, outs, 0)
        axes = tuple(range(2 + n, 2 + 2 * n))
        total = win.sum(axis=axes)
        ones = np.ones((1, 1) + x.shape[2:], dtype=xf.dtype)
        if node.attr("count_include_pad", 0):
            # explicit pads count; cells past the padded extent (ceil mode) do not
            padded = np.pad(ones, [(0, 0), (0, 0)] + [(pads[i], pads[n + i]) for i in range(n)],
                            constant_values=1)
            cnt = windows(padded, kernel, strides, dil, [0] * (2 * n), outs, 0).sum(axis=axes)
        else:
            cnt = windows(ones, kernel, strides, dil, pads, outs, 0).sum(axis=axes)
        with np.errstate(all="ignore"):
            return [(total / cnt).astype(x.dtype)]


@register("LpPool", since=1)
class LpPool(_PoolBase):
    def compute(self, node, inputs):
        x = inputs[0]
        n = x.ndim - 2
        p = node.attr("p", 2)
        kernel, strides, dil, pads, outs = _geometry(node, x)
        win = windows(np.abs(upcast(x)) ** p, kernel, strides, dil, pads, outs, 0)
        return [(win.sum(axis=tuple(range(2 + n, 2 + 2 * n))) ** (1.0 / p)).astype(x.dtype)]


class _Global(_PoolBase):
    def compute(self, node, inputs):
        x = inputs[0]
        axes = tuple(range(2, x.ndim))
        return [np.asarray(self.fn(node, upcast(x), axes)).astype(x.dtype)]


@register("GlobalAveragePool", since=1)
class GlobalAveragePool(_Global):
    @staticmethod
    def fn(node, x, axes):
        return x.mean(axis=axes, keepdims=True)


@register("GlobalMaxPool", since=1)
class GlobalMaxPool(_Global):
    @staticmethod
    def fn(node, x, axes):
        return x.max(axis=axes, keepdims=True)


@register("GlobalLpPool", since=1)
class GlobalLpPool(_Global):
    @staticmethod
    def fn(node, x, axes):
        p = node.attr("p", 2)
        return (np.abs(x) ** p).sum(axis=axes, keepdims=True) ** (1.0 / p)


@register("MaxUnpool", since=9)
class MaxUnpool(OpImpl):
    def supports(self, node, inputs, opset):
        return check_dtype(inputs, 0, FLOATS_BF | INTS)

    def compute(self, node, inputs):
        x, idx = inputs[0], inputs[1]
        n = x.ndim - 2
        kernel = list(node.attr("kernel_shape"))
        strides = list(node.attr("strides") or [1] * n)
        pads = list(node.attr("pads") or [0] * (2 * n))
        inferred = list(x.shape[:2]) + [(x.shape[2 + i] - 1) * strides[i] - pads[i] - pads[n + i] + kernel[i]
                                        for i in range(n)]
        y = np.zeros(int(np.prod(inferred)), dtype=x.dtype)
        y[idx.reshape(-1)] = x.reshape(-1)
        y = y.reshape(inferred)
        if len(inputs) > 2 and inputs[2] is not None:  # indices address the inferred shape; pad at the end
            shape = ints(inputs[2])
            out = np.zeros(shape, dtype=x.dtype)
            out[tuple(slice(0, min(a, b)) for a, b in zip(inferred, shape))] = \
                y[tuple(slice(0, min(a, b)) for a, b in zip(inferred, shape))]
            return [out]
        return [y]
