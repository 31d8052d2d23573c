"""GridSample / RoiAlign / MaxRoiPool (ops_extra_image) against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from ort_cpu_ep.ops import InputInfo
from ort_cpu_ep.ops.ops_extra_image import GridSample

# Called directly: the op table may also hold another GridSample (ops_resize); `find` picks one of them.
GRID_SAMPLE = GridSample()


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [0, 1])
def test_grid_sample_2d_matches_onnxruntime(kit, rng, mode, padding, align_corners):
    x = rng.standard_normal((2, 3, 5, 6)).astype(np.float32)
    grid = (rng.random((2, 4, 7, 2)) * 2.6 - 1.3).astype(np.float32)  # some samples fall outside [-1, 1]
    attrs = dict(mode=mode, padding_mode=padding, align_corners=align_corners)
    ref = kit.ort("GridSample", [x, grid], 1, domain="", opset=20, **attrs)[0]
    got = kit.ours("GridSample", [x, grid], 1, domain="", opset=20, impl=GRID_SAMPLE, **attrs)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
def test_grid_sample_opset16_mode_names(kit, rng, mode):
    x = rng.standard_normal((1, 2, 4, 4)).astype(np.float32)
    grid = (rng.random((1, 3, 3, 2)) * 2 - 1).astype(np.float32)
    ref = kit.ort("GridSample", [x, grid], 1, domain="", opset=16, mode=mode)[0]
    got = kit.ours("GridSample", [x, grid], 1, domain="", opset=16, impl=GRID_SAMPLE, mode=mode)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
def test_grid_sample_3d(kit, rng, mode, padding):
    x = rng.standard_normal((1, 2, 3, 4, 5)).astype(np.float32)
    grid = (rng.random((1, 2, 3, 4, 3)) * 2.4 - 1.2).astype(np.float32)
    attrs = dict(mode=mode, padding_mode=padding)
    try:
        ref = kit.ort("GridSample", [x, grid], 1, domain="", opset=20, **attrs)[0]
    except Exception:  # onnxruntime builds without volumetric GridSample: use the ONNX reference
        ref = kit.reference("GridSample", [x, grid], 1, domain="", opset=20, **attrs)[0]
    got = kit.ours("GridSample", [x, grid], 1, domain="", opset=20, impl=GRID_SAMPLE, **attrs)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("opset,ctm", [(10, None), (16, "half_pixel"), (16, "output_half_pixel")])
@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("sampling_ratio", [0, 2])
def test_roi_align_matches_onnxruntime(kit, rng, opset, ctm, mode, sampling_ratio):
    x = rng.standard_normal((2, 3, 10, 12)).astype(np.float32)
    rois = np.array([[0, 0, 9, 9], [2.5, 1.2, 7.7, 8.1], [-2, -1, 4, 3], [6, 4, 14, 13], [1, 1, 1.5, 1.2]],
                    np.float32)
    bidx = np.array([0, 1, 0, 1, 1], np.int64)
    attrs = dict(mode=mode, output_height=3, output_width=4, sampling_ratio=sampling_ratio, spatial_scale=0.9)
    if ctm:
        attrs["coordinate_transformation_mode"] = ctm
    ref = kit.ort("RoiAlign", [x, rois, bidx], 1, domain="", opset=opset, **attrs)[0]
    got = kit.ours("RoiAlign", [x, rois, bidx], 1, domain="", opset=opset, **attrs)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("scale", [1.0, 0.5])
def test_max_roi_pool_matches_onnxruntime(kit, rng, scale):
    x = rng.standard_normal((2, 3, 8, 9)).astype(np.float32)
    rois = np.array([[0, 0, 0, 7, 7], [1, 2.4, 1.6, 6.5, 5.5], [1, -3, -2, 3, 2], [0, 5, 5, 20, 20]], np.float32)
    ref = kit.ort("MaxRoiPool", [x, rois], 1, domain="", opset=20, pooled_shape=[2, 3], spatial_scale=scale)[0]
    got = kit.ours("MaxRoiPool", [x, rois], 1, domain="", opset=20, pooled_shape=[2, 3], spatial_scale=scale)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-6)


def test_image_declines(kit):
    F = TensorProto.FLOAT
    d = kit.decline_of("GridSample", [InputInfo(F, (1, 1, 4, 4)), InputInfo(F, (1, 2, 2, 2))], domain="", opset=20,
                       impl=GRID_SAMPLE,
                       mode="lanczos")
    assert d is not None and "lanczos" in d.rejected
    d = kit.decline_of("GridSample", [InputInfo(F, (1, 1, 4, 4)), InputInfo(F, (1, 2, 2, 2, 2))], domain="",
                       opset=20, impl=GRID_SAMPLE)
    assert d is not None and "grid rank" in d.rejected
    d = kit.decline_of("RoiAlign", [InputInfo(F, (1, 1, 4, 4))] * 3, domain="", opset=16, mode="median")
    assert d is not None and "median" in d.rejected
    d = kit.decline_of("MaxRoiPool", [InputInfo(F, (1, 1, 4, 4)), InputInfo(F, (2, 5))], domain="", opset=22)
    assert d is not None and "pooled_shape" in d.rejected
