"""Convolutions: Conv (im2col + tensordot per group), com.microsoft FusedConv (Conv, + Z, then its activation),
ConvTranspose (per-kernel-tap scatter), Col2Im."""

from __future__ import annotations

import numpy as np

from ._registry import Decline, OpImpl, register
from ._util import FLOATS_BF, check_all, decline_attr, ints, rank, upcast
from ._window import conv_pads, out_size, windows

_AUTO = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


def _geometry(node, xshape, wshape):
    n = len(xshape) - 2
    kernel = list(node.attr("kernel_shape") or wshape[2:])
    strides = list(node.attr("strides") or [1] * n)
    dil = list(node.attr("dilations") or [1] * n)
    pads = conv_pads(node, xshape[2:], kernel, strides, dil)
    outs = [out_size(xshape[2 + i], kernel[i], strides[i], dil[i], pads[i], pads[n + i], False) for i in range(n)]
    return kernel, strides, dil, pads, outs


def _compute_dtype(dt: np.dtype) -> np.dtype:
    return dt if dt in (np.float32, np.float64) else np.dtype(np.float32)


def im2col_bytes(xshape, wshape, node, dt: np.dtype) -> int:
    kernel, _, _, _, outs = _geometry(node, xshape, wshape)
    return int(xshape[0] * xshape[1] * int(np.prod(outs)) * int(np.prod(kernel))) * _compute_dtype(dt).itemsize


def conv(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, node, scratch=None, rows_scratch=None,
         out: np.ndarray | None = None) -> np.ndarray:
    """N-D grouped convolution: im2col into (N, *out, C, *k) rows, one GEMM per group.

    `scratch(nbytes)` may supply the im2col buffer (the declared workspace); else it is allocated.
    `rows_scratch(shape, dtype)` may supply the GEMM's (rows, M) result, and `out` (N, M, *out) of the compute
    type the final array (else a fresh one in x's dtype)."""
    n = x.ndim - 2
    kernel, strides, dil, pads, outs = _geometry(node, x.shape, w.shape)
    group = node.attr("group", 1)
    ct = _compute_dtype(x.dtype)
    win = windows(x, kernel, strides, dil, pads, outs, 0)  # (N, C, *out, *k) view
    perm = (0, *range(2, 2 + n), 1, *range(2 + n, 2 + 2 * n))
    shape = tuple(win.shape[i] for i in perm)
    nbytes = int(np.prod(shape)) * ct.itemsize
    buf = scratch(nbytes) if scratch is not None else None
    cols = (buf.reshape(-1).view(np.uint8)[:nbytes].view(ct).reshape(shape) if buf is not None and buf.nbytes >= nbytes
            else np.empty(shape, dtype=ct))
    np.copyto(cols, win.transpose(perm), casting="unsafe")
    rows = int(np.prod(shape[:1 + n]))
    per_group = x.shape[1] // group * int(np.prod(kernel))  # explicit sizes: zero-size batches reshape too
    cols2 = cols.reshape(rows, group, per_group)
    wf = w.astype(ct, copy=False).reshape(group, w.shape[0] // group, per_group)
    y = rows_scratch((rows, w.shape[0]), ct) if rows_scratch is not None else np.empty((rows, w.shape[0]), dtype=ct)
    mg = w.shape[0] // group
    for g in range(group):
        np.matmul(cols2[:, g, :], wf[g].T, out=y[:, g * mg:(g + 1) * mg])
    if b is not None:
        y += b.astype(ct)
    y = np.moveaxis(y.reshape(x.shape[0], *outs, w.shape[0]), -1, 1)
    if out is not None:
        np.copyto(out, y)
        return out
    return np.ascontiguousarray(y, dtype=x.dtype)


class _ConvBase(OpImpl):
    def supports(self, node, inputs, opset):
        if node.attr("auto_pad", "NOTSET") not in _AUTO:
            return decline_attr("auto_pad", node.attr("auto_pad"), ", ".join(_AUTO))
        r = rank(inputs, 0)
        if r is not None and r < 3:
            return Decline(rejected=f"input rank {r}", accepts="rank >= 3 (N, C, spatial...)")
        return check_all(inputs, FLOATS_BF, range(3))


@register("Conv", since=1)
class Conv(_ConvBase):
    def compute(self, node, inputs):
        return [conv(inputs[0], inputs[1], inputs[2] if len(inputs) > 2 else None, node,
                     scratch=lambda nbytes: self.scratch(0, nbytes))]

    def workspace_bytes(self, node, input_shapes):
        """Slot 0: the im2col buffer, N * C * prod(out) * prod(kernel) elements of the compute type
        (float32 for 16-bit inputs, else the input type)."""
        xs, ws = (list(input_shapes) + [None, None])[:2]
        if not xs or not ws or any(not isinstance(d, int) for d in list(xs) + list(ws)):
            return []
        v = node.graph.values.get(node.inputs[0]) if node.graph is not None else None
        dt = np.dtype(np.float64) if v is not None and v.dtype == 11 else np.dtype(np.float32)
        return [(0, im2col_bytes(xs, ws, node, dt))]


# FusedConv's activations: (number of activation_params, y -> activation(y) given the params); ONNX Runtime's
# MLAS set and HardSwish (the ConvActivationFusion's)
_FUSED_ACTIVATIONS = {
    "Relu": (0, lambda y, p: np.maximum(y, 0)),
    "Sigmoid": (0, lambda y, p: 1 / (1 + np.exp(-y))),
    "Tanh": (0, lambda y, p: np.tanh(y)),
    "HardSwish": (0, lambda y, p: y * np.clip(y / 6 + 0.5, 0, 1)),
    "LeakyRelu": (1, lambda y, p: np.where(y >= 0, y, y * p[0])),
    "HardSigmoid": (2, lambda y, p: np.clip(p[0] * y + p[1], 0, 1)),
    "Clip": (2, lambda y, p: np.clip(y, p[0], p[1])),
}


@register("FusedConv", domain="com.microsoft")
class FusedConv(Conv):
    """activation(Conv(X, W, B) + Z): float32 (ONNX Runtime's type), Z optional of Y's shape."""

    def supports(self, node, inputs, opset):
        act, params = node.attr("activation", ""), list(node.attr("activation_params") or [])
        if act not in _FUSED_ACTIVATIONS:
            return decline_attr("activation", act, ", ".join(_FUSED_ACTIVATIONS))
        if len(params) != _FUSED_ACTIVATIONS[act][0]:
            return Decline(rejected=f"activation_params {params!r} for activation {act!r}",
                           accepts=f"{_FUSED_ACTIVATIONS[act][0]} values for {act}",
                           remedy="give the activation's parameters (LeakyRelu: alpha; HardSigmoid: alpha, beta; "
                                  "Clip: min, max)")
        return super().supports(node, inputs, opset) or check_all(inputs, frozenset({1}), range(4))

    def compute(self, node, inputs):
        y = super().compute(node, inputs[:3])[0]
        if len(inputs) > 3 and inputs[3] is not None:
            y = y + inputs[3]
        fn = _FUSED_ACTIVATIONS[node.attr("activation")][1]
        with np.errstate(over="ignore"):
            return [np.asarray(fn(y, list(node.attr("activation_params") or [])), dtype=y.dtype)]


@register("ConvTranspose", since=1)
class ConvTranspose(_ConvBase):
    def compute(self, node, inputs):
        x, w = inputs[0], inputs[1]
        b = inputs[2] if len(inputs) > 2 else None
        n = x.ndim - 2
        kernel = list(node.attr("kernel_shape") or w.shape[2:])
        strides = list(node.attr("strides") or [1] * n)
        dil = list(node.attr("dilations") or [1] * n)
        group = node.attr("group", 1)
        opad = list(node.attr("output_padding") or [0] * n)
        ins = x.shape[2:]
        full = [strides[i] * (ins[i] - 1) + opad[i] + (kernel[i] - 1) * dil[i] + 1 for i in range(n)]
        oshape = node.attr("output_shape")
        auto = node.attr("auto_pad", "NOTSET")
        if oshape is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
            target = list(oshape)[-n:] if oshape is not None else [ins[i] * strides[i] for i in range(n)]
            begin, end = [], []
            for i in range(n):
                total = max(full[i] - target[i], 0)
                if auto == "SAME_UPPER":
                    begin.append(total // 2)
                    end.append(total - total // 2)
                else:
                    begin.append(total - total // 2)
                    end.append(total // 2)
            pads = begin + end
        elif auto == "VALID":
            pads = [0] * (2 * n)
        else:
            pads = list(node.attr("pads") or [0] * (2 * n))
        xf, wf = upcast(x), upcast(w)
        cg = x.shape[1] // group
        mg = w.shape[1]
        y = np.zeros((x.shape[0], mg * group, *full), dtype=xf.dtype)
        for g in range(group):
            xg = xf[:, g * cg:(g + 1) * cg]
            wg = wf[g * cg:(g + 1) * cg]  # (Cg, Mg, *k)
            cols = np.tensordot(xg, wg, axes=([1], [0]))  # (N, *in, Mg, *k)
            cols = np.moveaxis(cols, 1 + n, 1)  # (N, Mg, *in, *k)
            for tap in np.ndindex(*kernel):
                sl = [slice(None), slice(g * mg, (g + 1) * mg)]
                sl += [slice(tap[i] * dil[i], tap[i] * dil[i] + strides[i] * (ins[i] - 1) + 1, strides[i])
                       for i in range(n)]
                y[tuple(sl)] += cols[(Ellipsis,) + tuple(tap)]
        crop = [slice(None), slice(None)] + [slice(pads[i], full[i] - pads[n + i]) for i in range(n)]
        y = y[tuple(crop)]
        if oshape is not None:  # an output_shape beyond the full result implies zero output padding
            extra = [max(int(t) - y.shape[2 + i], 0) for i, t in enumerate(list(oshape)[-n:])]
            if any(extra):
                y = np.pad(y, [(0, 0), (0, 0)] + [(0, e) for e in extra])
        if b is not None:
            y = y + upcast(b).reshape((1, -1) + (1,) * n)
        return [np.ascontiguousarray(y).astype(x.dtype)]


@register("Col2Im", since=18)
class Col2Im(OpImpl):
    def supports(self, node, inputs, opset):
        return check_all(inputs, FLOATS_BF, [0])

    def compute(self, node, inputs):
        x, image, block = inputs[0], ints(inputs[1]), ints(inputs[2])
        n = len(image)
        strides = list(node.attr("strides") or [1] * n)
        dil = list(node.attr("dilations") or [1] * n)
        pads = list(node.attr("pads") or [0] * (2 * n))
        nb, ck, _ = x.shape
        c = ck // int(np.prod(block))
        outs = [out_size(image[i], block[i], strides[i], dil[i], pads[i], pads[n + i], False) for i in range(n)]
        cols = x.reshape(nb, c, *block, *outs)
        padded = [image[i] + pads[i] + pads[n + i] for i in range(n)]
        y = np.zeros((nb, c, *padded), dtype=x.dtype)
        for tap in np.ndindex(*block):
            sl = [slice(None), slice(None)]
            sl += [slice(tap[i] * dil[i], tap[i] * dil[i] + strides[i] * (outs[i] - 1) + 1, strides[i])
                   for i in range(n)]
            y[tuple(sl)] += cols[(slice(None), slice(None)) + tuple(tap)]
        crop = [slice(None), slice(None)] + [slice(pads[i], pads[i] + image[i]) for i in range(n)]
        return [np.ascontiguousarray(y[tuple(crop)])]

