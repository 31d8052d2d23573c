"""Resize / Upsample (separable per-axis interpolation matrices) and GridSample (tap gathering)."""

from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto as T

from ._registry import Decline, OpImpl, register
from ._util import FLOATS_BF, NUMERIC_BF, check_dtype, decline_attr, ints, norm_axis, upcast

_CT_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
             "tf_crop_and_resize")
_NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _source_coords(out_len: int, in_len: int, scale: float, mode: str, roi: tuple[float, float] | None):
    """Input coordinates of the output positions, in float32 arithmetic as ONNX Runtime computes them.

    align_corners and tf_crop_and_resize divide by `output_width - 1` with the fractional
    output_width = scale * in_len, as the ONNX backend tests (and onnx.reference) define it; ONNX
    Runtime uses the integer length there, which differs only for non-integral scale * in_len."""
    f = np.float32
    x = np.arange(out_len, dtype=f)
    sc = f(scale)
    out_w = sc * f(in_len)
    if mode == "align_corners":
        return np.zeros_like(x) if out_w == 1 else x * f(in_len - 1) / (out_w - f(1))
    if mode == "asymmetric":
        return x / sc
    if mode == "tf_crop_and_resize":
        r0, r1 = f(roi[0]), f(roi[1])
        if out_w == 1:
            return np.full_like(x, (r1 - r0) * f(in_len - 1) / f(2) + r0 * f(in_len - 1))
        return x * (r1 - r0) * f(in_len - 1) / (out_w - f(1)) + r0 * f(in_len - 1)
    if mode == "pytorch_half_pixel":
        return np.zeros_like(x) if out_len == 1 else (x + f(0.5)) / sc - f(0.5)
    if mode == "tf_half_pixel_for_nn":
        return (x + f(0.5)) / sc
    if mode == "half_pixel_symmetric":
        adjustment = f(out_len) / out_w
        offset = f(in_len) / f(2) * (f(1) - adjustment)
        return offset + (x + f(0.5)) / sc - f(0.5)
    return (x + f(0.5)) / sc - f(0.5)


def _cubic(t: np.ndarray, a: float) -> np.ndarray:
    t = np.abs(t)
    return np.where(t <= 1, (a + 2) * t**3 - (a + 3) * t**2 + 1,
                    np.where(t < 2, a * t**3 - 5 * a * t**2 + 8 * a * t - 4 * a, 0.0))


def _weights(node, out_len: int, in_len: int, scale: float, roi) -> tuple[np.ndarray, np.ndarray | None]:
    """(W of shape (out, in), rows to replace by extrapolation_value or None)."""
    mode = node.attr("mode", "nearest")
    ct = node.attr("coordinate_transformation_mode", "half_pixel")
    xs = _source_coords(out_len, in_len, scale, ct, roi).astype(np.float64)
    extrap = None
    if ct == "tf_crop_and_resize":
        extrap = (xs < 0) | (xs > in_len - 1)
    base = np.ceil(xs) - 1  # ratio in (0, 1]: prefer the pixel on the left
    ratio = xs - base
    rows = np.arange(out_len)
    w = np.zeros((out_len, in_len), dtype=np.float64)
    if mode == "nearest":
        nm = node.attr("nearest_mode", "round_prefer_floor")
        if nm == "round_prefer_floor":
            pick = ratio > 0.5
        elif nm == "round_prefer_ceil":
            pick = ratio >= 0.5
        elif nm == "floor":
            pick = ratio == 1
        else:
            pick = np.ones_like(ratio, dtype=bool)
        idx = np.clip(base + pick, 0, in_len - 1).astype(np.int64)
        w[rows, idx] = 1.0
        return w, extrap
    s = min(scale, 1.0) if node.attr("antialias", 0) else 1.0
    radius = 1 if mode == "linear" else 2
    start = int(math.floor(-radius / s) + 1)
    offs = np.arange(start, 2 - start)
    taps = base[:, None] + offs[None, :]
    t = (offs[None, :] - ratio[:, None]) * s
    if mode == "linear":
        coef = np.clip(1 - np.abs(t), 0, 1)
    else:
        coef = _cubic(t, node.attr("cubic_coeff_a", -0.75))
    if node.attr("exclude_outside", 0):
        coef = np.where((taps < 0) | (taps >= in_len), 0.0, coef)
    coef = coef / coef.sum(axis=1, keepdims=True)
    np.add.at(w, (np.repeat(rows, len(offs)), np.clip(taps, 0, in_len - 1).astype(np.int64).reshape(-1)),
              coef.reshape(-1))
    return w, extrap


def resize(node, x: np.ndarray, roi, scales, sizes, axes) -> np.ndarray:
    r = x.ndim
    axes = list(range(r)) if axes is None else [norm_axis(a, r) for a in axes]
    full_scale = [1.0] * r
    out = list(x.shape)
    if sizes is not None:
        for a, n in zip(axes, sizes):
            out[a] = int(n)
            full_scale[a] = n / x.shape[a]
        policy = node.attr("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            sc = [full_scale[a] for a in axes]
            s = min(sc) if policy == "not_larger" else max(sc)
            for a in axes:
                full_scale[a] = s
                out[a] = int(s * x.shape[a] + 0.5)
    else:
        for a, s in zip(axes, scales):
            full_scale[a] = float(s)
            out[a] = int(float(s) * x.shape[a])
    roi_full = None
    if roi is not None and np.asarray(roi).size:
        rv = [float(v) for v in np.asarray(roi).reshape(-1)]
        k = len(rv) // 2
        roi_full = [(0.0, 1.0)] * r
        for i, a in enumerate(axes if k == len(axes) else range(r)):
            roi_full[a] = (rv[i], rv[k + i])
    y = upcast(x).astype(np.float64)
    mask = None
    for a in axes:
        if math.isclose(full_scale[a], 1.0) and out[a] == x.shape[a] and (
                roi_full is None or roi_full[a] == (0.0, 1.0)):
            continue
        w, ex = _weights(node, out[a], x.shape[a], full_scale[a], None if roi_full is None else roi_full[a])
        y = np.moveaxis(np.tensordot(w, y, axes=([1], [a])), 0, a)
        if ex is not None and ex.any():
            m = ex.reshape([-1 if i == a else 1 for i in range(r)])
            mask = m if mask is None else (mask | m)
    if mask is not None:
        y = np.where(mask, node.attr("extrapolation_value", 0.0), y)
    if x.dtype.kind in "iu":
        info = np.iinfo(x.dtype)
        return np.clip(np.rint(y), info.min, info.max).astype(x.dtype)
    return y.astype(x.dtype)


@register("Resize", since=11)
class Resize(OpImpl):
    def supports(self, node, inputs, opset):
        mode = node.attr("mode", "nearest")
        if mode not in ("nearest", "linear", "cubic"):
            return decline_attr("mode", mode, "'nearest', 'linear', 'cubic'")
        ct = node.attr("coordinate_transformation_mode", "half_pixel")
        if ct not in _CT_MODES and not (ct == "tf_half_pixel_for_nn" and opset < 13):
            return decline_attr("coordinate_transformation_mode", ct,
                                ", ".join(_CT_MODES) + " (tf_half_pixel_for_nn before opset 13)")
        if node.attr("nearest_mode", "round_prefer_floor") not in _NEAREST:
            return decline_attr("nearest_mode", node.attr("nearest_mode"), ", ".join(_NEAREST))
        if node.attr("keep_aspect_ratio_policy", "stretch") not in ("stretch", "not_larger", "not_smaller"):
            return decline_attr("keep_aspect_ratio_policy", node.attr("keep_aspect_ratio_policy"),
                                "'stretch', 'not_larger', 'not_smaller'")
        if mode == "nearest" and node.attr("antialias", 0):
            return decline_attr("antialias", 1, "antialias only with linear/cubic")
        return check_dtype(inputs, 0, NUMERIC_BF if mode == "nearest" else FLOATS_BF | {T.UINT8, T.INT8})

    def compute(self, node, inputs):
        get = lambda i: inputs[i] if len(inputs) > i and inputs[i] is not None and inputs[i].size else None  # noqa: E731
        x = inputs[0]
        sizes = ints(get(3))
        scales = None if sizes is not None else [float(s) for s in get(2).reshape(-1)]
        return [resize(node, x, get(1), scales, sizes, node.attr("axes"))]


@register("Upsample", since=1, until=6)
class Upsample1(OpImpl):
    """Upsample-1: 4-D NCHW with height_scale / width_scale attributes, mode nearest or bilinear."""

    def supports(self, node, inputs, opset):
        if node.attr("mode", "nearest") not in ("nearest", "bilinear"):
            return decline_attr("mode", node.attr("mode"), "'nearest', 'bilinear'")
        if node.attr("height_scale") is None or node.attr("width_scale") is None:
            return Decline(rejected="Upsample-1 without height_scale/width_scale", accepts="both scale attributes",
                           remedy="fix the node")
        r = inputs[0].shape
        if r is not None and len(r) != 4:
            return Decline(rejected=f"input rank {len(r)}", accepts="4-D NCHW")
        return check_dtype(inputs, 0, FLOATS_BF)

    def compute(self, node, inputs):
        from ort_graph import Attr

        mode = "linear" if node.attr("mode", "nearest") == "bilinear" else "nearest"
        shim = type(node)(index=node.index, name=node.name, op_type="Resize", attributes={
            "mode": Attr("mode", 3, mode),
            "coordinate_transformation_mode": Attr("coordinate_transformation_mode", 3, "asymmetric"),
            "nearest_mode": Attr("nearest_mode", 3, "floor")})
        scales = [1.0, 1.0, float(node.attr("height_scale")), float(node.attr("width_scale"))]
        return [resize(shim, inputs[0], None, scales, None, None)]
