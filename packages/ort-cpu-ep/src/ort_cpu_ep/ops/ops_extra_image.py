"""Sampling / region ops: GridSample (16, 20; N-D), RoiAlign (10, 16) and MaxRoiPool (1).

GridSample: grid (N, *out, r) holds normalized coordinates in reversed spatial order (x first); they are
unnormalized with align_corners, rounded half-to-even for nearest, brought back in range by padding_mode
(border: clamp, but not for cubic, as ONNX Runtime and PyTorch; reflection: reflect about the borders),
then every tap index follows padding_mode (zeros: outside taps read 0). linear uses 2^r taps, cubic 4^r taps (Keys, a = -0.75).

RoiAlign follows ONNX Runtime's CPU kernel: bilinear samples on a roi_bin_grid (sampling_ratio or
ceil(bin size)), averaged (avg) or, for max, the maximum of the four weighted corner values per sample.
MaxRoiPool is Caffe's: rounded roi corners, floor/ceil bin edges, max per bin (0 for an empty bin).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
from onnx import TensorProto

from ort_graph import Node

from ._registry import Decline, InputInfo, OpImpl, attrs_of, register

_FLOATS = frozenset({TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16})
_GS_MODES = {"bilinear": "linear", "bicubic": "cubic", "nearest": "nearest", "linear": "linear", "cubic": "cubic"}


def _reflect(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    span = hi - lo
    if span <= 0:
        return np.full_like(x, lo)
    below, above = x < lo, x > hi
    dx = np.where(below, lo - x, x - hi)
    n = np.trunc(dx / span)
    r = dx - n * span
    even = (n % 2) == 0
    return np.where(below, np.where(even, lo + r, hi - r), np.where(above, np.where(even, hi - r, lo + r), x))


def _cubic_weights(t: np.ndarray) -> list[np.ndarray]:
    a = -0.75
    t = np.abs(t)
    w0 = ((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a
    w1 = ((a + 2) * t - (a + 3)) * t * t + 1
    w2 = ((a + 2) * (1 - t) - (a + 3)) * (1 - t) * (1 - t) + 1
    w3 = ((a * (2 - t) - 5 * a) * (2 - t) + 8 * a) * (2 - t) - 4 * a
    return [w0, w1, w2, w3]


def grid_sample(x: np.ndarray, grid: np.ndarray, mode: str, padding: str, align_corners: bool) -> np.ndarray:
    n, c = x.shape[:2]
    dims = x.shape[2:]
    r = len(dims)
    out_sp = grid.shape[1:-1]
    xt = np.moveaxis(x.astype(np.float64), 1, -1)  # (N, *dims, C)
    coords = []
    for i in range(r):
        g = grid[..., r - 1 - i].astype(np.float64)  # grid's last axis is reversed
        size = dims[i]
        u = (g + 1) / 2 * (size - 1) if align_corners else ((g + 1) * size - 1) / 2
        if mode == "nearest":
            u = np.rint(u)
        lo, hi = (0.0, size - 1.0) if align_corners else (-0.5, size - 0.5)
        if padding == "border" and mode != "cubic":  # cubic + border clamps only the taps (ORT, PyTorch)
            u = np.where((u < lo) | (u > hi), np.clip(u, 0, size - 1), u)
        elif padding == "reflection":
            u = _reflect(u, lo, hi)
        coords.append((u, lo, hi, size))
    batch = np.arange(n).reshape((n,) + (1,) * len(out_sp))

    def fetch(idxs: list[np.ndarray]) -> np.ndarray:
        valid = np.ones(idxs[0].shape, bool)
        fixed = []
        for i, (_, lo, hi, size) in zip(idxs, coords):
            if padding == "zeros":
                valid &= (i >= 0) & (i < size)
                fixed.append(np.clip(i, 0, size - 1))
            elif padding == "border":
                fixed.append(np.clip(i, 0, size - 1))
            else:
                fixed.append(np.clip(_reflect(i.astype(np.float64), lo, hi).astype(np.int64), 0, size - 1))
        vals = xt[(batch, *fixed)]  # (N, *out, C)
        return np.where(valid[..., None], vals, 0.0)

    if mode == "nearest":
        out = fetch([u.astype(np.int64) for u, *_ in coords])
    else:
        offsets, weight_fns = ((0, 1), None) if mode == "linear" else ((-1, 0, 1, 2), _cubic_weights)
        bases = [np.floor(u).astype(np.int64) for u, *_ in coords]
        fracs = [u - b for (u, *_), b in zip(coords, bases)]
        per_dim = [[1 - f, f] if weight_fns is None else weight_fns(f) for f in fracs]
        out = np.zeros((n, *out_sp, c))
        for combo in itertools.product(range(len(offsets)), repeat=r):
            w = np.ones(bases[0].shape)
            for d, k in enumerate(combo):
                w = w * per_dim[d][k]
            out += w[..., None] * fetch([b + offsets[k] for b, k in zip(bases, combo)])
    return np.moveaxis(out, -1, 1).astype(x.dtype)


@register("GridSample", since=16)
class GridSample(OpImpl):
    """GridSample(X, grid): N-D sampling with nearest / (bi)linear / (bi)cubic and zeros/border/reflection padding."""

    dtypes = _FLOATS

    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        d = super().supports(node, inputs, opset)
        if d is not None:
            return d
        a = attrs_of(node)
        mode = str(a.get("mode", "bilinear" if opset < 20 else "linear"))
        if mode not in _GS_MODES:
            return Decline(rejected=f"mode={mode!r}", accepts="nearest, linear/bilinear, cubic/bicubic",
                           remedy="fix the mode attribute")
        pad = str(a.get("padding_mode", "zeros"))
        if pad not in ("zeros", "border", "reflection"):
            return Decline(rejected=f"padding_mode={pad!r}", accepts="zeros, border, reflection",
                           remedy="fix the padding_mode attribute")
        x, g = inputs[0], inputs[1]
        if x.shape is not None and g.shape is not None and len(g.shape) != len(x.shape):
            return Decline(rejected=f"grid rank {len(g.shape)} for X rank {len(x.shape)}",
                           accepts="grid (N, *out_spatial, r) with r = rank(X) - 2", remedy="fix the grid shape")
        return None

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        a = attrs_of(node)
        mode = _GS_MODES[str(a.get("mode", "linear"))]
        return [grid_sample(inputs[0], inputs[1], mode, str(a.get("padding_mode", "zeros")),
                            bool(int(a.get("align_corners", 0))))]


@register("RoiAlign", since=10)
class RoiAlign(OpImpl):
    """RoiAlign(X, rois, batch_indices) -> (num_rois, C, output_height, output_width)."""

    dtypes = _FLOATS

    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        d = super().supports(node, inputs, opset)
        if d is not None:
            return d
        a = attrs_of(node)
        if str(a.get("mode", "avg")) not in ("avg", "max"):
            return Decline(rejected=f"mode={a['mode']!r}", accepts="avg, max", remedy="fix the mode attribute")
        ctm = str(a.get("coordinate_transformation_mode", "half_pixel"))
        if ctm not in ("half_pixel", "output_half_pixel"):
            return Decline(rejected=f"coordinate_transformation_mode={ctm!r}", accepts="half_pixel, output_half_pixel",
                           remedy="fix the attribute")
        if inputs[0].shape is not None and len(inputs[0].shape) != 4:
            return Decline(rejected=f"X rank {len(inputs[0].shape)}", accepts="4-D X (N, C, H, W)",
                           remedy="reshape X to NCHW")
        return None

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        from ._interp import node_opset

        a = attrs_of(node)
        x, rois, bidx = inputs[0], inputs[1].astype(np.float64), np.asarray(inputs[2], np.int64)
        ph_n, pw_n = int(a.get("output_height", 1)), int(a.get("output_width", 1))
        ratio, scale = int(a.get("sampling_ratio", 0)), float(a.get("spatial_scale", 1.0))
        default_ctm = "half_pixel" if node_opset(node) >= 16 else "output_half_pixel"
        half = str(a.get("coordinate_transformation_mode", default_ctm)) == "half_pixel"
        is_max = str(a.get("mode", "avg")) == "max"
        _, c, h, w = x.shape
        xf = x.astype(np.float64)
        out = np.zeros((rois.shape[0], c, ph_n, pw_n))
        off = 0.5 if half else 0.0
        for r in range(rois.shape[0]):  # per roi: the sample grid differs in size
            x1, y1, x2, y2 = rois[r] * scale - off
            rw, rh = x2 - x1, y2 - y1
            if not half:
                rw, rh = max(rw, 1.0), max(rh, 1.0)
            bh, bw = rh / ph_n, rw / pw_n
            gh = ratio if ratio > 0 else int(math.ceil(rh / ph_n))
            gw = ratio if ratio > 0 else int(math.ceil(rw / pw_n))
            count = max(gh * gw, 1)
            ys = y1 + np.arange(ph_n)[:, None] * bh + (np.arange(gh)[None, :] + 0.5) * bh / gh  # (ph, gh)
            xs = x1 + np.arange(pw_n)[:, None] * bw + (np.arange(gw)[None, :] + 0.5) * bw / gw  # (pw, gw)
            (yl, yh, ly, oky), (xl, xh, lx, okx) = _bilinear_1d(ys, h), _bilinear_1d(xs, w)
            img = xf[bidx[r]]  # (C, H, W)
            # corner values (C, ph, gh, pw, gw)
            v = [img[:, yi[:, :, None, None], xi[None, None, :, :]] for yi in (yl, yh) for xi in (xl, xh)]
            wy = [(1 - ly), ly]
            wx = [(1 - lx), lx]
            ok = (oky[:, :, None, None] & okx[None, None, :, :])
            terms = [wy[i][:, :, None, None] * wx[j][None, None, :, :] * v[2 * i + j] * ok
                     for i in (0, 1) for j in (0, 1)]
            if is_max:
                samples = np.maximum.reduce(terms)  # (C, ph, gh, pw, gw)
                out[r] = samples.max(axis=(2, 4))
            else:
                out[r] = sum(terms).sum(axis=(2, 4)) / count
        return [out.astype(x.dtype)]


def _bilinear_1d(p: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """ORT's per-sample bilinear setup along one axis: (low, high, fraction, in-range mask)."""
    ok = (p >= -1.0) & (p <= size)
    q = np.maximum(p, 0.0)
    low = np.floor(q).astype(np.int64)
    at_edge = low >= size - 1
    low = np.where(at_edge, size - 1, low)
    high = np.where(at_edge, size - 1, low + 1)
    q = np.where(at_edge, low, q)
    frac = np.where(ok, q - low, 0.0)
    return np.where(ok, low, 0), np.where(ok, high, 0), frac, ok


@register("MaxRoiPool", since=1)
class MaxRoiPool(OpImpl):
    """MaxRoiPool(X, rois (num_rois, 5) = [batch, x1, y1, x2, y2]) -> (num_rois, C, pooled_h, pooled_w)."""

    dtypes = _FLOATS

    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        d = super().supports(node, inputs, opset)
        if d is not None:
            return d
        ps = node.attr("pooled_shape")
        if not ps or len(ps) != 2:
            return Decline(rejected=f"pooled_shape={ps!r}", accepts="pooled_shape [h, w]",
                           remedy="set the pooled_shape attribute")
        if inputs[0].shape is not None and len(inputs[0].shape) != 4:
            return Decline(rejected=f"X rank {len(inputs[0].shape)}", accepts="4-D X", remedy="reshape X to NCHW")
        return None

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        x, rois = inputs[0], inputs[1].astype(np.float64)
        ph_n, pw_n = (int(v) for v in node.attr("pooled_shape"))
        scale = float(node.attr("spatial_scale", 1.0))
        _, c, h, w = x.shape
        out = np.zeros((rois.shape[0], c, ph_n, pw_n), dtype=x.dtype)

        def rnd(v: float) -> int:  # std::round: half away from zero
            return int(math.floor(v + 0.5)) if v >= 0 else int(math.ceil(v - 0.5))

        for r in range(rois.shape[0]):
            b = int(rois[r, 0])
            xs, ys, xe, ye = (rnd(v * scale) for v in rois[r, 1:5])
            rh, rw = max(ye - ys + 1, 1), max(xe - xs + 1, 1)
            bh, bw = rh / ph_n, rw / pw_n
            for ph in range(ph_n):
                hs = min(max(int(math.floor(ph * bh)) + ys, 0), h)
                he = min(max(int(math.ceil((ph + 1) * bh)) + ys, 0), h)
                for pw in range(pw_n):
                    ws = min(max(int(math.floor(pw * bw)) + xs, 0), w)
                    we = min(max(int(math.ceil((pw + 1) * bw)) + xs, 0), w)
                    if he > hs and we > ws:
                        out[r, :, ph, pw] = x[b, :, hs:he, ws:we].max(axis=(1, 2))
        return [out]


__all__ = ["GridSample", "MaxRoiPool", "RoiAlign", "grid_sample"]
