"""The C float32 nearest Resize (csrc/resize_kernel.c) against the numpy kernel bit for bit and onnxruntime, and the
linear one within float32 rounding, one node at a time through the CPU provider: coordinate transformation modes,
nearest modes, scales up and down, sizes, an unchanged axis, and which nodes the C kernel takes."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_abi
import ort_graph
from ort_cpu_ep import CpuExecutionProvider, c_kernels
from ort_cpu_ep.testing import one_node_model, run_one_node, same_bits_as_numpy

F = TensorProto.FLOAT


def _model(shape, *, scales=None, sizes=None, opset=19, **attrs):
    inits = [numpy_helper.from_array(np.array(scales if scales is not None else [], np.float32), "scales")]
    inputs = ["x", "", "scales"]
    if sizes is not None:
        inits.append(numpy_helper.from_array(np.array(sizes, np.int64), "sizes"))
        inputs.append("sizes")
    model = one_node_model(helper.make_node("Resize", inputs, ["y"], **attrs),
                           [helper.make_tensor_value_info("x", F, list(shape))],
                           [helper.make_tensor_value_info("y", F, None)], inits)
    model.opset_import[0].version = opset
    return model


def _check(model, shape, *, onnxruntime_too=True):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    got = same_bits_as_numpy(model, {"x": x})["y"]
    if not onnxruntime_too:
        return
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    want = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
@pytest.mark.parametrize("coords", ["asymmetric", "half_pixel", "pytorch_half_pixel", "align_corners"])
@pytest.mark.parametrize("scales", [[1, 1, 2, 2], [1, 1, 0.5, 0.75], [1, 1, 1.7, 3.0], [1, 1, 1, 2.5]])
def test_nearest_scales_match_numpy_bits_and_onnxruntime(scales, coords, nearest_mode):
    # align_corners divides by the fractional output length (the ONNX backend tests' definition); onnxruntime by the
    # integer one: they differ where scale x length is not an integer (the numpy kernel's docstring)
    fractional = coords == "align_corners" and any(s * n != int(s * n) for s, n in zip(scales[2:], (7, 9)))
    _check(_model((2, 3, 7, 9), scales=scales, coordinate_transformation_mode=coords, nearest_mode=nearest_mode),
           (2, 3, 7, 9), onnxruntime_too=not fractional)


@pytest.mark.parametrize("sizes", [[1, 2, 14, 5], [1, 2, 3, 20], [1, 2, 6, 8]])
def test_nearest_sizes(sizes):
    _check(_model((1, 2, 6, 8), sizes=sizes, coordinate_transformation_mode="half_pixel"), (1, 2, 6, 8))


@pytest.mark.parametrize("scales", [[1, 1, 3, 3], [1, 1, 1, 3], [1, 1, 2, 4], [1, 1, 3, 1]])
@pytest.mark.parametrize("nearest_mode", ["floor", "round_prefer_floor"])
def test_whole_number_upsampling_repeats_rows_and_values(scales, nearest_mode):
    """Output rows that read the previous row's source are copies, whole-number factors along W repeat values (the
    asymmetric floor case; round_prefer_floor maps differently and takes the table)."""
    _check(_model((1, 3, 5, 7), scales=scales, coordinate_transformation_mode="asymmetric", nearest_mode=nearest_mode),
           (1, 3, 5, 7))


def test_the_ocr_detector_upsampling():  # ppocrv4_det: x2 asymmetric floor
    _check(_model((1, 96, 20, 20), scales=[1, 1, 2, 2], coordinate_transformation_mode="asymmetric",
                  nearest_mode="floor"), (1, 96, 20, 20))


@pytest.mark.parametrize("coords", ["asymmetric", "half_pixel", "pytorch_half_pixel", "align_corners"])
@pytest.mark.parametrize(("shape", "scales", "sizes"), [
    ((2, 3, 7, 9), [1, 1, 2, 2], None), ((1, 2, 8, 6), [1, 1, 0.5, 0.5], None), ((1, 2, 7, 9), [1, 1, 1.5, 3.0], None),
    ((1, 2, 5, 6), [1, 1, 1, 2], None), ((1, 1, 1, 5), [1, 1, 3, 2], None), ((1, 2, 6, 8), None, [1, 2, 9, 4]),
    ((1, 3, 4, 1100), [1, 1, 2, 1], None)])  # a row wider than the stacked taps
def test_linear_matches_onnxruntime_and_numpy(shape, scales, sizes, coords):
    model = _model(shape, scales=scales if sizes is None else [], sizes=sizes, mode="linear",
                   coordinate_transformation_mode=coords)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    got = run_one_node(model, {"x": x}, "C")["y"]
    np.testing.assert_allclose(got, run_one_node(model, {"x": x}, "numpy")["y"], rtol=1e-5, atol=1e-6)
    out_len = [int(s * n) for s, n in zip(scales[2:], shape[2:])] if sizes is None else sizes[2:]
    if coords == "align_corners" and sizes is None and any(s * n != o for s, n, o in zip(scales[2:], shape[2:], out_len)):
        return  # fractional output lengths: onnxruntime divides by the integer one (see the nearest test)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    want = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_linear_threads_agree():
    model = _model((2, 16, 40, 40), scales=[1, 1, 2, 2], mode="linear")
    x = np.random.default_rng(1).standard_normal((2, 16, 40, 40)).astype(np.float32)
    one = run_one_node(model, {"x": x}, "C", threads=1)["y"]
    np.testing.assert_array_equal(run_one_node(model, {"x": x}, "C", threads=3)["y"], one)


def _language(model) -> str:
    m = ort_graph.from_proto(model)
    ep = CpuExecutionProvider(m.graph, m.opset_imports)
    return c_kernels.kernel_language(ep.entry(m.graph.nodes[0]))


def test_resize_nodes_the_c_kernel_takes():
    assert _language(_model((1, 2, 4, 4), scales=[1, 1, 2, 2])) == "C"
    assert _language(_model((1, 2, 4, 4), scales=[1, 1, 2, 2], mode="linear")) == "C"
    assert _language(_model((1, 2, 4, 4), scales=[1, 1, 2, 2], mode="cubic")) == "numpy"
    assert _language(_model((1, 2, 4, 4), scales=[1, 1, 0.5, 0.5], mode="linear", antialias=1)) == "numpy"
    assert _language(_model((1, 2, 4, 4), scales=[1, 2, 2, 2])) == "numpy"          # resizes C
    assert _language(_model((1, 2, 4, 4), scales=[1, 1, 2, 2], coordinate_transformation_mode="tf_crop_and_resize")) == "numpy"
    runtime = _model((1, 2, 4, 4), scales=[1, 1, 2, 2])
    runtime.graph.initializer.pop()
    runtime.graph.input.append(helper.make_tensor_value_info("scales", F, [4]))
    assert _language(runtime) == "numpy"                                             # scales computed at run time


def test_resize_of_n_or_c_through_the_kernel_is_an_error():
    model = _model((1, 2, 4, 4), scales=[1, 1, 2, 2])
    m = ort_graph.from_proto(model)
    ep = CpuExecutionProvider(m.graph, m.opset_imports)
    (node,) = m.graph.nodes
    kernel = ep.entry(node).create_kernel(ort_abi.KernelInfo.from_node(node, ep))
    ctx = ort_abi.KernelContext([np.zeros((1, 2, 4, 4), np.float32), None, np.array([1, 2, 2, 2], np.float32)],
                                output_count=1, output_types=[F])
    with pytest.raises(ort_abi.KernelError, match="axis 1 .N or C. resized from 2 to 4"):
        kernel.compute(ctx)
    kernel.release()
