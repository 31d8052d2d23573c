"""DeformConv (opset 19, 2-D): convolution whose kernel taps move by learned offsets (and are scaled by a mask).

Tap (a, b) of output (i, j) samples X at (i * stride_h - pad_top + a * dilation_h + offset_h,
j * stride_w - pad_left + b * dilation_w + offset_w) bilinearly, with zeros outside the image; offsets come
per offset_group as (N, offset_group * kH * kW * 2, oH, oW) in (h, w) pairs, the optional mask as
(N, offset_group * kH * kW, oH, oW). The sampled columns then meet W per group in one matmul.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import TensorProto

from ort_graph import Node

from ._registry import Decline, InputInfo, OpImpl, attrs_of, register

_FLOATS = frozenset({TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16})


def _bilinear_zeros(img: np.ndarray, y: np.ndarray, x: np.ndarray) -> np.ndarray:
    """img (C, H, W) sampled at float coordinates y, x (same shape S) -> (C, *S), zeros outside."""
    _, h, w = img.shape
    y0, x0 = np.floor(y).astype(np.int64), np.floor(x).astype(np.int64)
    fy, fx = y - y0, x - x0
    out = np.zeros((img.shape[0],) + y.shape, dtype=np.float64)
    for dy, wy in ((0, 1 - fy), (1, fy)):
        for dx, wx in ((0, 1 - fx), (1, fx)):
            yy, xx = y0 + dy, x0 + dx
            ok = (yy >= 0) & (yy < h) & (xx >= 0) & (xx < w)
            vals = img[:, np.clip(yy, 0, h - 1), np.clip(xx, 0, w - 1)]
            out += vals * (wy * wx * ok)
    return out


@register("DeformConv", since=19)
class DeformConv(OpImpl):
    """DeformConv(X, W, offset, B?, mask?) for 2-D inputs (N, C, H, W)."""

    dtypes = _FLOATS

    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        d = super().supports(node, inputs, opset)
        if d is not None:
            return d
        x = inputs[0]
        if x.shape is not None and len(x.shape) != 4:
            return Decline(rejected=f"X rank {len(x.shape)}", accepts="4-D X (N, C, H, W): 2-D deformable conv",
                           remedy="run other ranks on another execution provider")
        return None

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        a = attrs_of(node)
        x, w, offset = inputs[0], inputs[1], inputs[2]
        b = inputs[3] if len(inputs) > 3 else None
        mask = inputs[4] if len(inputs) > 4 else None
        n, c, _, _ = x.shape
        oc = w.shape[0]
        kh, kw = (int(v) for v in (a.get("kernel_shape") or w.shape[2:]))
        sh, sw = (int(v) for v in (a.get("strides") or (1, 1)))
        dh, dw = (int(v) for v in (a.get("dilations") or (1, 1)))
        pads = [int(v) for v in (a.get("pads") or (0, 0, 0, 0))]
        group, og = int(a.get("group", 1)), int(a.get("offset_group", 1))
        oh, ow = offset.shape[2:]
        off = offset.astype(np.float64).reshape(n, og, kh, kw, 2, oh, ow)
        msk = None if mask is None else mask.astype(np.float64).reshape(n, og, kh, kw, oh, ow)
        base_y = (np.arange(oh) * sh - pads[0])[None, None, :, None] + (np.arange(kh) * dh)[:, None, None, None]
        base_x = (np.arange(ow) * sw - pads[1])[None, None, None, :] + (np.arange(kw) * dw)[None, :, None, None]
        xf = x.astype(np.float64)
        wf = w.astype(np.float64)
        cpg, cpo, opg = c // og, c // group, oc // group
        out = np.zeros((n, oc, oh * ow))
        for bi in range(n):
            cols = np.empty((c, kh, kw, oh, ow))
            for g in range(og):
                yy = base_y + off[bi, g, :, :, 0]
                xx = base_x + off[bi, g, :, :, 1]
                sampled = _bilinear_zeros(xf[bi, g * cpg:(g + 1) * cpg], yy, xx)
                if msk is not None:
                    sampled = sampled * msk[bi, g]
                cols[g * cpg:(g + 1) * cpg] = sampled
            for g in range(group):
                wg = wf[g * opg:(g + 1) * opg].reshape(opg, -1)
                out[bi, g * opg:(g + 1) * opg] = wg @ cols[g * cpo:(g + 1) * cpo].reshape(cpo * kh * kw, oh * ow)
        if b is not None:
            out += b.astype(np.float64)[None, :, None]
        return [out.reshape(n, oc, oh, ow).astype(x.dtype)]


__all__ = ["DeformConv"]
