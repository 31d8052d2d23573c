"""Resize / Upsample (ops_extra_resize) against onnxruntime over modes, coordinate modes, nearest modes,
scales vs sizes, axes, keep_aspect_ratio_policy, antialias, exclude_outside, crop-and-resize, dtypes."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from ort_cpu_ep.ops import InputInfo
from ort_cpu_ep.ops.ops_extra_resize import Resize, Upsample

# The kernels of this module are called directly: the op table may also hold another Resize/Upsample
# (ops_resize), and `find` picks one of them per opset.
RESIZE, UPSAMPLE = Resize(), Upsample()

COORDS = ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
          "tf_half_pixel_for_nn"]


def _run(kit, ins, opset=19, oracle="ort", **attrs):
    run = kit.ort if oracle == "ort" else kit.reference
    ref = run("Resize", ins, 1, domain="", opset=opset, **attrs)[0]
    got = kit.ours("Resize", ins, 1, domain="", opset=opset, impl=RESIZE, **attrs)[0]
    assert got.shape == ref.shape and got.dtype == ref.dtype
    return got, ref


# tf_half_pixel_for_nn is nearest-only (declined otherwise: test_resize_declines)
_MODE_COORD = [(m, c) for m in ("nearest", "linear", "cubic") for c in COORDS
               if not (c == "tf_half_pixel_for_nn" and m != "nearest")]


@pytest.mark.parametrize("mode,coord", _MODE_COORD)
@pytest.mark.parametrize("scales", [(1, 1, 2.0, 1.5), (1, 1, 0.6, 0.8), (1, 1, 1.7, 0.5), (1, 1, 3.0, 1.0)])
def test_resize_scales_match_onnxruntime(kit, rng, mode, coord, scales):
    x = rng.standard_normal((2, 3, 5, 7)).astype(np.float32)
    fractional = any(abs(s * n - round(s * n)) > 1e-6 for s, n in zip(scales, x.shape))
    # onnxruntime differs from the ONNX spec here (the ONNX reference implementation decides): align_corners
    # divides by the unrounded output length (scale * in - 1)
    spec = coord == "align_corners" and fractional
    ins = [x, None, np.array(scales, np.float32)]
    got, ref = _run(kit, ins, oracle="reference" if spec else "ort", mode=mode, coordinate_transformation_mode=coord)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
@pytest.mark.parametrize("sizes", [(1, 2, 9, 4), (1, 2, 3, 11), (1, 2, 1, 1)])
def test_resize_nearest_modes_with_sizes(kit, rng, nearest_mode, sizes):
    x = rng.standard_normal((1, 2, 6, 5)).astype(np.float32)
    got, ref = _run(kit, [x, None, None, np.array(sizes, np.int64)], mode="nearest", nearest_mode=nearest_mode,
                    coordinate_transformation_mode="asymmetric")
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
def test_resize_axes_and_aspect_policy(kit, rng, mode, policy):
    x = rng.standard_normal((2, 6, 8, 3)).astype(np.float32)
    oracle = "reference" if mode == "cubic" else "ort"  # onnxruntime's cubic resizes only the last two axes
    got, ref = _run(kit, [x, None, None, np.array([4, 11], np.int64)], oracle=oracle, mode=mode, axes=[1, 2],
                    keep_aspect_ratio_policy=policy)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("scales", [(1, 1, 0.5, 0.6), (1, 1, 0.3, 1.0), (1, 1, 2.0, 0.75)])
def test_resize_antialias(kit, rng, mode, scales):
    x = rng.standard_normal((1, 2, 10, 9)).astype(np.float32)
    got, ref = _run(kit, [x, None, np.array(scales, np.float32)], mode=mode, antialias=1)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("exclude_outside", [0, 1])
@pytest.mark.parametrize("a", [-0.75, -0.5])
def test_resize_cubic_exclude_outside_and_coeff(kit, rng, exclude_outside, a):
    x = rng.standard_normal((1, 1, 6, 6)).astype(np.float32)
    got, ref = _run(kit, [x, None, np.array([1, 1, 1.6, 0.7], np.float32)], mode="cubic",
                    exclude_outside=exclude_outside, cubic_coeff_a=a)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_tf_crop_and_resize(kit, rng, mode):
    x = rng.standard_normal((1, 1, 6, 6)).astype(np.float32)
    roi = np.array([0, 0, -0.2, 0.3, 1, 1, 0.8, 1.3], np.float32)
    got, ref = _run(kit, [x, roi, None, np.array([1, 1, 5, 4], np.int64)], mode=mode,
                    coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=7.5)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    assert (got == 7.5).any()


@pytest.mark.parametrize("dt", [np.uint8, np.int8, np.float16])
def test_resize_small_types(kit, rng, dt):
    x = (rng.random((1, 1, 5, 5)) * 100).astype(dt)
    got, ref = _run(kit, [x, None, np.array([1, 1, 1.5, 0.8], np.float32)], mode="linear")
    np.testing.assert_allclose(got.astype(np.float32), ref.astype(np.float32), atol=1 if dt != np.float16 else 0.1)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("scales", [(1, 1, 2.0, 3.0), (1, 1, 0.5, 0.7)])
def test_resize10_and_upsample(kit, rng, mode, scales):
    x = rng.standard_normal((1, 2, 4, 6)).astype(np.float32)
    sc = np.array(scales, np.float32)
    ref = kit.ort("Resize", [x, sc], 1, domain="", opset=10, mode=mode)[0]
    got = kit.ours("Resize", [x, sc], 1, domain="", opset=10, impl=RESIZE, mode=mode)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    if min(scales) >= 1:
        ref = kit.ort("Upsample", [x, sc], 1, domain="", opset=9, mode=mode)[0]
        got = kit.ours("Upsample", [x, sc], 1, domain="", opset=9, impl=UPSAMPLE, mode=mode)[0]
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_resize_declines(kit):
    F = TensorProto.FLOAT
    d = kit.decline_of("Resize", [InputInfo(F, (1, 1, 4, 4))], domain="", opset=19, impl=RESIZE, mode="bicubic")
    assert d is not None and "bicubic" in d.rejected
    d = kit.decline_of("Resize", [InputInfo(F, (1, 1, 4, 4))], domain="", opset=19, impl=RESIZE, mode="linear",
                       coordinate_transformation_mode="tf_half_pixel_for_nn")
    assert d is not None and "tf_half_pixel_for_nn" in d.rejected
    d = kit.decline_of("Resize", [InputInfo(F, (1, 1, 4, 4))], domain="", opset=19, impl=RESIZE, antialias=1)
    assert d is not None and "antialias" in d.rejected
    d = kit.decline_of("Resize", [InputInfo(TensorProto.INT64, (1, 1, 4, 4))], domain="", opset=19, impl=RESIZE,
                       mode="linear")
    assert d is not None and "INT64" in d.rejected
    d = kit.decline_of("Resize", [InputInfo(TensorProto.STRING, (4,))], domain="", opset=19, impl=RESIZE)
    assert d is not None
