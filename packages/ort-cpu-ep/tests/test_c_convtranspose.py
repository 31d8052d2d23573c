"""The C float32 2-D ConvTranspose (csrc/convtranspose_kernel.c: sgemm + col2im) against the numpy kernel and
onnxruntime, one node at a time through the CPU provider: groups, strides, pads, output_padding, dilations,
output_shape, auto_pad, bias, several column chunks, thread counts, the workspace it declares, the errors it gives,
and which nodes it takes."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_abi
from ort_cpu_ep.testing import (
    c_kernel_workspace,
    chosen_language,
    one_node_model,
    onnxruntime_outputs,
    run_one_node,
)

F = TensorProto.FLOAT


def _convt(x_shape, w_shape, *, bias=False, const_w=True, seed=0, dtype=F, **attrs):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal(w_shape) / np.sqrt(np.prod(w_shape[1:]))).astype(np.float32)
    group = attrs.get("group", 1)
    b = rng.standard_normal(w_shape[1] * group).astype(np.float32)
    inputs = ["x", "w"] + (["b"] if bias else [])
    inits = [numpy_helper.from_array(w, "w")] if const_w else []
    if bias:
        inits.append(numpy_helper.from_array(b, "b"))
    vis = [helper.make_tensor_value_info("x", dtype, list(x_shape))]
    if not const_w:
        vis.append(helper.make_tensor_value_info("w", dtype, list(w_shape)))
    model = one_node_model(helper.make_node("ConvTranspose", inputs, ["y"], **attrs), vis,
                           [helper.make_tensor_value_info("y", dtype, None)], inits)
    feeds = {"x": rng.standard_normal(x_shape).astype(np.float32)}
    if not const_w:
        feeds["w"] = w
    return model, feeds




def _check(model, feeds, threads=None, numpy_too=True):
    got = run_one_node(model, feeds, "C", threads=threads)["y"]
    want = onnxruntime_outputs(model, feeds, optimize=False)[0]
    assert got.shape == want.shape and got.dtype == np.float32
    scale = max(float(np.abs(want).max()), 1.0) if want.size else 1.0
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-6 * scale)
    if numpy_too:
        np.testing.assert_allclose(got, run_one_node(model, feeds, "numpy")["y"], rtol=0, atol=2e-6 * scale)
    return got


CASES = [
    # (x shape, w shape [C, M / group, KH, KW], attributes)
    ((1, 24, 10, 10), (24, 24, 2, 2), {"strides": [2, 2]}),                      # ppocrv4_det's upsampling
    ((1, 24, 12, 9), (24, 1, 2, 2), {"strides": [2, 2], "pads": [0, 0, 0, 0]}),  # its single-channel head
    ((2, 5, 7, 6), (5, 3, 3, 3), {}),                                            # overlapping taps, stride 1
    ((1, 4, 6, 7), (4, 6, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 4, 6, 7), (4, 2, 3, 4), {"strides": [2, 3], "pads": [1, 0, 2, 1], "output_padding": [1, 2]}),
    ((1, 3, 5, 8), (3, 4, 3, 3), {"dilations": [2, 3], "pads": [2, 1, 0, 3]}),
    ((1, 6, 5, 5), (6, 2, 3, 3), {"group": 2, "strides": [2, 2]}),
    ((2, 8, 5, 6), (8, 1, 4, 4), {"group": 8, "strides": [2, 2], "pads": [1, 1, 1, 1]}),  # depthwise upsampling
    ((1, 3, 5, 5), (3, 2, 3, 3), {"strides": [2, 2], "output_shape": [10, 10]}),
    ((1, 1, 3, 3), (1, 2, 3, 3), {"strides": [3, 2], "output_shape": [10, 8]}),  # past the unpadded 9 x 7 (ONNX's test)
    ((1, 3, 5, 5), (3, 2, 3, 3), {"strides": [2, 2], "output_padding": [1, 1], "output_shape": [11, 10]}),
    ((1, 3, 5, 6), (3, 2, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 3, 5, 6), (3, 2, 4, 3), {"strides": [2, 1], "auto_pad": "SAME_LOWER"}),
    ((1, 3, 5, 6), (3, 2, 3, 3), {"strides": [2, 2], "auto_pad": "VALID", "kernel_shape": [3, 3]}),
    ((1, 16, 40, 50), (16, 8, 2, 2), {"strides": [2, 2]}),                      # several column chunks
    ((1, 8, 3, 700), (8, 4, 3, 3), {"pads": [1, 1, 1, 1]}),                     # a row wider than a chunk
    ((1, 1, 1, 1), (1, 1, 1, 1), {}),
    ((1, 4, 5, 6), (4, 3, 3, 3), {"strides": [3, 3]}),                          # tiles of 3 x 3
    ((1, 6, 4, 4), (6, 2, 2, 2), {"group": 3, "strides": [2, 2]}),              # grouped tiles
    ((1, 3, 4, 4), (3, 2, 2, 2), {"strides": [2, 2], "output_padding": [1, 1]}),  # no tiles: a padded edge
    ((1, 3, 4, 4), (3, 2, 2, 2), {"strides": [2, 2], "pads": [1, 0, 0, 1]}),      # no tiles: cropped
]


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), CASES)
def test_convtranspose_matches_onnxruntime_and_numpy(x_shape, w_shape, attrs, bias):
    model, feeds = _convt(x_shape, w_shape, bias=bias, **attrs)
    _check(model, feeds)


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), [CASES[0], CASES[4], CASES[7], CASES[14]])
def test_convtranspose_same_result_at_every_thread_count(x_shape, w_shape, attrs, threads):
    model, feeds = _convt(x_shape, w_shape, bias=True, **attrs)
    one = run_one_node(model, feeds, "C", threads=1)["y"]
    np.testing.assert_array_equal(_check(model, feeds, threads=threads), one)


def test_convtranspose_weights_computed_at_run_time():
    model, feeds = _convt((1, 4, 6, 6), (4, 3, 3, 3), bias=True, const_w=False, strides=[2, 2])
    _check(model, feeds)


def test_convtranspose_output_shape_past_the_full_output_is_an_error():
    model, feeds = _convt((1, 1, 3, 3), (1, 1, 3, 3), strides=[2, 2], output_shape=[9, 9])
    with pytest.raises(ort_abi.KernelError, match="output_shape 9 on axis 0 is past the unpadded output 7"):
        run_one_node(model, feeds, "C")
    with pytest.raises(Exception, match="output_shape"):  # onnxruntime refuses it too
        onnxruntime_outputs(model, feeds, optimize=False)[0]


def test_convtranspose_pads_leaving_no_output_is_an_error():
    model, feeds = _convt((1, 1, 2, 2), (1, 1, 2, 2), pads=[2, 0, 2, 0])
    with pytest.raises(ort_abi.KernelError, match="output extent on axis 0 would be -1"):
        run_one_node(model, feeds, "C")


def test_convtranspose_group_must_divide_the_channels():
    model, feeds = _convt((1, 5, 3, 3), (5, 2, 3, 3), group=2)
    with pytest.raises(ort_abi.KernelError, match="group 2 and W of 5 input channels"):
        run_one_node(model, feeds, "C")


def test_convtranspose_special_values_propagate():
    model, feeds = _convt((1, 2, 4, 4), (2, 3, 3, 3), strides=[2, 2])
    feeds["x"][0, 0, 1, 2] = np.nan
    feeds["x"][0, 1, 3, 3] = np.inf
    got = run_one_node(model, feeds, "C")["y"]
    want = onnxruntime_outputs(model, feeds, optimize=False)[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], atol=1e-5)


def test_convtranspose_of_an_empty_batch():
    model, feeds = _convt((0, 3, 4, 4), (3, 2, 3, 3), bias=True, strides=[2, 2])
    got = run_one_node(model, feeds, "C")["y"]
    assert got.shape == (0, 2, 9, 9)


def test_convtranspose_declares_its_buffers():
    x_shape, w_shape = (1, 16, 40, 50), (16, 8, 2, 2)
    model, _ = _convt(x_shape, w_shape, strides=[2, 2])
    estimate, slots = c_kernel_workspace(model, [x_shape, w_shape])
    (slot,) = slots
    assert slot.slot_id == 0 and slot.size_bytes > 0
    assert estimate == slot.size_bytes  # shapes known at claim: the Level-1 estimate is the declaration
    rows = 8 * 2 * 2
    full_columns = rows * 40 * 50 * 4
    from ort_cpu_ep import _threads

    per_thread = slot.size_bytes // max(_threads.physical_cores(), 1)
    assert per_thread < full_columns  # chunks of rows, never the whole column matrix


def test_convtranspose_nodes_the_c_kernel_takes():
    assert chosen_language(_convt((1, 3, 8, 8), (3, 4, 3, 3))[0]) == "C"
    assert chosen_language(_convt((1, 3, 8), (3, 4, 3))[0]) == "numpy"                        # 1-D
    assert chosen_language(_convt((1, 3, 4, 8, 8), (3, 4, 1, 3, 3))[0]) == "numpy"            # 3-D
    assert chosen_language(_convt((1, 3, 8, 8), (3, 4, 3, 3), dtype=TensorProto.DOUBLE)[0]) == "numpy"
