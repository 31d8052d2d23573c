"""Resize (opsets 10-19) and Upsample (7, 9): separable nearest / linear / cubic interpolation, one axis at a time.

Per resized axis the output coordinates map to input coordinates x by coordinate_transformation_mode
(half_pixel, half_pixel_symmetric, pytorch_half_pixel, align_corners, asymmetric, tf_half_pixel_for_nn,
tf_crop_and_resize with roi), computed in float32 as ONNX Runtime does. Nearest picks round(x) by
nearest_mode; linear / cubic (cubic_coeff_a) weight the taps floor(x) + k, clamped to the edge, or dropped
and renormalized with exclude_outside; antialias (opset 18) widens the kernel by 1 / scale when
downsampling. tf_crop_and_resize writes extrapolation_value where x leaves [0, in - 1]. Resize-10 and
Upsample use asymmetric coordinates, and nearest truncates (ceil when downsampling) as ONNX Runtime's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from onnx import TensorProto

from ort_graph import Node, dtype_name

from ._registry import Decline, InputInfo, OpImpl, attrs_of, register

_MODES = ("nearest", "linear", "cubic")
_COORD = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
          "tf_half_pixel_for_nn", "tf_crop_and_resize")
_NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple")
_DTYPES = frozenset({TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.INT8,
                     TensorProto.UINT8, TensorProto.INT32, TensorProto.INT64})


def source_coords(mode: str, out_len: int, in_len: int, scale: float, roi: tuple[float, float] | None) -> np.ndarray:
    """Input coordinate (float32) of every output index along one axis."""
    f = np.float32
    o = np.arange(out_len, dtype=f)
    s = f(scale)
    ow = s * f(in_len)  # the unrounded output length (differs from out_len when scale * in_len is fractional)
    if mode == "half_pixel":
        return (o + f(0.5)) / s - f(0.5)
    if mode == "half_pixel_symmetric":
        adj = f(out_len) / (s * f(in_len))
        offset = f(in_len) / f(2) * (f(1) - adj)
        return offset + (o + f(0.5)) / s - f(0.5)
    if mode == "pytorch_half_pixel":
        return (o + f(0.5)) / s - f(0.5) if ow > 1 else np.full(out_len, f(-0.5))
    if mode == "align_corners":
        return o * f(in_len - 1) / (ow - f(1)) if ow != 1 else np.zeros(out_len, f)
    if mode == "asymmetric":
        return o / s
    if mode == "tf_half_pixel_for_nn":
        return (o + f(0.5)) / s
    if mode == "tf_crop_and_resize":
        start, end = (f(roi[0]), f(roi[1])) if roi is not None else (f(0), f(1))
        if ow != 1:
            return start * f(in_len - 1) + o * (end - start) * f(in_len - 1) / (ow - f(1))
        return np.full(out_len, f(0.5) * (start + end) * f(in_len - 1), f)
    raise ValueError(f"coordinate_transformation_mode {mode!r}")


def _nearest_index(x: np.ndarray, mode: str, downsample: bool) -> np.ndarray:
    if mode == "round_prefer_floor":
        idx = np.where(x - np.floor(x) == 0.5, np.floor(x), np.round(x))
    elif mode == "round_prefer_ceil":
        idx = np.floor(x + np.float32(0.5))
    elif mode == "floor":
        idx = np.floor(x)
    elif mode == "ceil":
        idx = np.ceil(x)
    else:  # "simple" (Resize-10 / Upsample): ceil when downsampling, else truncation
        idx = np.ceil(x) if downsample else np.trunc(x)
    return idx.astype(np.int64)


def _cubic(t: np.ndarray, a: float) -> np.ndarray:
    t = np.abs(t)
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return np.where(t <= 1, near, np.where(t < 2, far, 0.0))


def _taps(x: np.ndarray, mode: str, scale: float, antialias: bool, a: float) -> tuple[np.ndarray, np.ndarray]:
    """(indices (out, n), weights (out, n)) of the linear / cubic kernel around each coordinate x."""
    support = 1.0 if mode == "linear" else 2.0
    s = min(scale, 1.0) if antialias else 1.0
    start = math.floor(-support / s) + 1
    n = 2 - 2 * start
    base = np.floor(x).astype(np.int64)
    ratio = (x - base).astype(np.float64)
    k = np.arange(start, start + n)
    idx = base[:, None] + k[None, :]
    t = (k[None, :] - ratio[:, None]) * s
    w = np.clip(1 - np.abs(t), 0, 1) if mode == "linear" else _cubic(t, a)
    if antialias:
        w = w / w.sum(axis=1, keepdims=True)
    return idx, w


def resize_axis(data: np.ndarray, axis: int, out_len: int, scale: float, a: dict, roi: tuple[float, float] | None,
                opset: int) -> np.ndarray:
    """Resize `data` (float64) along one axis."""
    in_len = data.shape[axis]
    mode = str(a.get("mode", "nearest"))
    coord = "asymmetric" if opset < 11 else str(a.get("coordinate_transformation_mode", "half_pixel"))
    x = source_coords(coord, out_len, in_len, scale, roi)
    shape = [1] * data.ndim
    shape[axis] = out_len
    if mode == "nearest":
        nmode = "simple" if opset < 11 else str(a.get("nearest_mode", "round_prefer_floor"))
        idx = np.clip(_nearest_index(x, nmode, scale < 1), 0, in_len - 1)
        result = np.take(data, idx, axis=axis)
    else:
        idx, w = _taps(x, mode, scale, bool(int(a.get("antialias", 0))), float(a.get("cubic_coeff_a", -0.75)))
        if int(a.get("exclude_outside", 0)):
            w = np.where((idx < 0) | (idx >= in_len), 0.0, w)
            tot = w.sum(axis=1, keepdims=True)
            w = w / np.where(tot == 0, 1.0, tot)
        gathered = np.take(data, np.clip(idx, 0, in_len - 1), axis=axis)  # axis -> (out, n)
        wshape = [1] * data.ndim + [1]
        wshape[axis], wshape[axis + 1] = out_len, w.shape[1]
        result = (np.moveaxis(gathered, axis + 1, -1) * np.moveaxis(w.reshape(wshape), axis + 1, -1)).sum(-1)
    if coord == "tf_crop_and_resize":
        outside = ((x < 0) | (x > in_len - 1)).reshape(shape)
        result = np.where(outside, float(a.get("extrapolation_value", 0.0)), result)
    return result


def _plan(x_shape: tuple[int, ...], scales: np.ndarray | None, sizes: np.ndarray | None, axes: list[int],
          policy: str) -> tuple[list[int], list[float]]:
    """(output sizes, scales) for every axis of x."""
    r = len(x_shape)
    out, sc = list(x_shape), [1.0] * r
    if sizes is not None and sizes.size:
        want = {ax: int(v) for ax, v in zip(axes, sizes.reshape(-1))}
        ratios = {ax: want[ax] / x_shape[ax] for ax in axes}
        if policy in ("not_larger", "not_smaller"):
            pick = min(ratios.values()) if policy == "not_larger" else max(ratios.values())
            for ax in axes:
                sc[ax], out[ax] = pick, int(math.floor(pick * x_shape[ax] + 0.5))
        else:
            for ax in axes:
                sc[ax], out[ax] = ratios[ax], want[ax]
    else:
        for ax, v in zip(axes, np.asarray(scales, np.float32).reshape(-1)):
            sc[ax], out[ax] = float(v), int(math.floor(x_shape[ax] * float(v)))
    return out, sc


def resize(x: np.ndarray, scales: np.ndarray | None, sizes: np.ndarray | None, roi: np.ndarray | None, a: dict,
           opset: int) -> np.ndarray:
    r = x.ndim
    axes = [ax % r for ax in (a.get("axes") or range(r))]
    out, sc = _plan(x.shape, scales, sizes, axes, str(a.get("keep_aspect_ratio_policy", "stretch")))
    roi_full = None
    if roi is not None and np.asarray(roi).size:
        rv = np.asarray(roi, np.float64).reshape(-1)
        n = len(rv) // 2
        roi_full = {ax: (rv[i], rv[n + i]) for i, ax in enumerate(axes if n == len(axes) else range(r))}
    data = x.astype(np.float64)
    coord = "asymmetric" if opset < 11 else str(a.get("coordinate_transformation_mode", "half_pixel"))
    for ax in axes:
        if out[ax] == data.shape[ax] and sc[ax] == 1.0 and coord != "tf_crop_and_resize":
            continue
        data = resize_axis(data, ax, out[ax], sc[ax], a, None if roi_full is None else roi_full.get(ax), opset)
    if np.issubdtype(x.dtype, np.integer):
        info = np.iinfo(x.dtype)
        data = np.clip(np.round(data), info.min, info.max)
    return data.astype(x.dtype)


class _ResizeBase(OpImpl):
    dtypes = _DTYPES

    def supports(self, node: Node, inputs: Sequence[InputInfo], opset: int) -> Decline | None:
        d = super().supports(node, inputs, opset)
        if d is not None:
            return d
        a = attrs_of(node)
        for name, allowed, default in (("mode", _MODES, "nearest"), ("coordinate_transformation_mode", _COORD,
                                       "half_pixel"), ("nearest_mode", _NEAREST[:4], "round_prefer_floor"),
                                       ("keep_aspect_ratio_policy", ("stretch", "not_larger", "not_smaller"),
                                        "stretch")):
            v = str(a.get(name, default))
            if v not in allowed:
                return Decline(rejected=f"{name}={v!r}", accepts=", ".join(allowed), remedy=f"fix the {name} attribute")
        if self.op_type == "Upsample" and str(a.get("mode", "nearest")) == "cubic":
            return Decline(rejected="Upsample mode='cubic'", accepts="nearest, linear", remedy="use Resize")
        if str(a.get("coordinate_transformation_mode", "")) == "tf_half_pixel_for_nn" and \
                str(a.get("mode", "nearest")) != "nearest":
            return Decline(rejected=f"coordinate_transformation_mode='tf_half_pixel_for_nn' with mode={a['mode']!r}",
                           accepts="tf_half_pixel_for_nn with mode='nearest' (as ONNX Runtime)",
                           remedy="use half_pixel for linear/cubic")
        if int(a.get("antialias", 0)) and str(a.get("mode", "nearest")) == "nearest":
            return Decline(rejected="antialias=1 with mode='nearest'", accepts="antialias with linear or cubic",
                           remedy="set antialias=0 or use linear/cubic")
        x = inputs[0]
        if x.dtype in (TensorProto.INT32, TensorProto.INT64) and str(a.get("mode", "nearest")) != "nearest":
            return Decline(rejected=f"mode={a.get('mode')!r} on {dtype_name(x.dtype)}",
                           accepts="nearest for int32/int64; any mode for float and 8-bit types",
                           remedy="cast to float before resizing")
        return None


@register("Resize", since=10)
class Resize(_ResizeBase):
    """Resize(X, roi, scales, sizes) (opset 10: Resize(X, scales))."""

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        from ._interp import node_opset

        opset = node_opset(node)
        a = attrs_of(node)
        x = inputs[0]
        if opset < 11 or len(node.inputs) == 2:  # Resize-10: (X, scales)
            opset = min(opset, 10)
            return [resize(x, inputs[1], None, None, a, opset)]
        get = lambda i: inputs[i] if len(inputs) > i else None  # noqa: E731
        scales, sizes = get(2), get(3)
        if scales is not None and scales.size == 0:
            scales = None
        return [resize(x, scales, sizes, get(1), a, opset)]


@register("Upsample", since=7)
class Upsample(_ResizeBase):
    """Upsample with scales as attribute (7) or input (9); asymmetric coordinates."""

    def compute(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray | None]:
        a = attrs_of(node)
        scales = np.asarray(inputs[1] if len(inputs) > 1 else a.get("scales"), np.float32)
        return [resize(inputs[0], scales, None, None, a | {"mode": str(a.get("mode", "nearest"))}, 10)]


__all__ = ["Resize", "Upsample", "resize", "source_coords"]
