"""The C float32 2-D Conv (csrc/conv_kernel.c, conv_math.c, conv_depthwise.c) against the numpy kernel and
onnxruntime, one node at a time through the CPU provider: groups (1, grouped, depthwise with multipliers), 1x1
(X as the GEMM's B), pads, strides, dilations, auto_pad, bias, several im2col chunks, thread counts, the
workspace it declares, and which nodes the C kernel takes. The direct path (conv_direct.c: stride 1, 3x3 or more
taps, at least 6 output channels a group) takes several of the cases; DIRECT_CASES exercise it on purpose."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_abi
import ort_graph
from ort_cpu_ep import CpuExecutionProvider, c_kernels
from ort_cpu_ep.testing import c_kernel_workspace, one_node_model, run_one_node

F = TensorProto.FLOAT


def _conv(x_shape, w_shape, *, bias=False, const_w=True, seed=0, dtype=F, declared=None, **attrs):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal(w_shape) / np.sqrt(np.prod(w_shape[1:]))).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    inputs = ["x", "w"] + (["b"] if bias else [])
    inits = [numpy_helper.from_array(w, "w")] if const_w else []
    if bias:
        inits.append(numpy_helper.from_array(b, "b"))
    vis = [helper.make_tensor_value_info("x", dtype, list(declared or x_shape))]  # declared: X's dims as the model says
    if not const_w:
        vis.append(helper.make_tensor_value_info("w", dtype, list(w_shape)))
    model = one_node_model(helper.make_node("Conv", inputs, ["y"], **attrs), vis,
                           [helper.make_tensor_value_info("y", dtype, None)], inits)
    feeds = {"x": rng.standard_normal(x_shape).astype(np.float32)}
    if not const_w:
        feeds["w"] = w
    return model, feeds


def _ort(model, feeds):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0]


def _packed(model, feeds, threads=None):
    """Y through the direct path (W packed at initialization, as a session does), or None where W is not packed."""
    try:
        return run_one_node(model, feeds, "C", threads=threads, prepack=True)["y"]
    except AssertionError as e:
        if "no constant input was pre-packed" not in str(e):
            raise
        return None


def _check(model, feeds, threads=None):
    """The C kernel (im2col, and the direct path where W packs) against numpy and onnxruntime; the im2col Y."""
    got = run_one_node(model, feeds, "C", threads=threads)["y"]
    want = run_one_node(model, feeds, "numpy")["y"]
    assert got.shape == want.shape and got.dtype == np.float32
    scale = max(float(np.abs(want).max()), 1.0) if want.size else 1.0
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-6 * scale)
    np.testing.assert_allclose(got, _ort(model, feeds), rtol=0, atol=2e-6 * scale)
    direct = _packed(model, feeds, threads) if model.graph.initializer and model.graph.initializer[0].name == "w" else None
    if direct is not None:
        np.testing.assert_allclose(direct, want, rtol=0, atol=2e-6 * scale)
    return got


CASES = [
    # (x shape, w shape, attributes)
    ((1, 3, 12, 17), (8, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 5, 11, 9), (7, 5, 3, 2), {"strides": [2, 1], "pads": [0, 1, 2, 0]}),
    ((1, 4, 15, 13), (6, 4, 3, 3), {"dilations": [2, 3], "pads": [2, 1, 0, 3]}),
    ((1, 6, 10, 10), (8, 3, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}),
    ((1, 8, 9, 14), (8, 1, 3, 3), {"group": 8, "pads": [1, 1, 1, 1]}),           # depthwise
    ((2, 4, 13, 11), (8, 1, 5, 5), {"group": 4, "strides": [2, 2], "pads": [2, 2, 2, 2]}),  # multiplier 2
    ((1, 8, 10, 12), (8, 1, 3, 3), {"group": 8, "dilations": [2, 2], "strides": [1, 2]}),
    ((1, 6, 13, 37), (6, 1, 3, 3), {"group": 6, "dilations": [2, 2], "strides": [2, 1], "pads": [2, 2, 2, 2]}),
    ((2, 3, 11, 70), (6, 1, 5, 5), {"group": 3, "pads": [2, 2, 2, 2]}),  # 4-row blocks, a row tail, 3 column blocks
    ((1, 16, 7, 9), (24, 16, 1, 1), {}),                                          # 1x1: X is B
    ((2, 16, 7, 9), (12, 8, 1, 1), {"group": 2}),
    ((1, 16, 7, 9), (4, 16, 1, 1), {"strides": [2, 2]}),                         # 1x1 strided: im2col
    ((1, 3, 10, 11), (5, 3, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 3, 10, 11), (5, 3, 4, 4), {"auto_pad": "SAME_LOWER"}),
    ((1, 3, 10, 11), (5, 3, 3, 3), {"auto_pad": "VALID", "kernel_shape": [3, 3]}),
    ((1, 2, 4, 4), (3, 2, 3, 3), {"pads": [3, 3, 3, 3]}),                         # pads wider than the kernel
    ((1, 40, 30, 40), (20, 40, 3, 3), {"pads": [1, 1, 1, 1]}),                    # several im2col chunks
    ((1, 1, 5, 5), (1, 1, 5, 5), {}),                                             # one output pixel, M = 1
    ((1, 16, 40, 1), (24, 16, 5, 1), {"pads": [2, 0, 1, 0]}),                      # along H only (magika's)
    ((1, 8, 41, 1), (6, 8, 3, 1), {"strides": [2, 1], "dilations": [2, 1], "pads": [3, 0, 0, 0]}),
    ((1, 64, 700, 1), (8, 64, 5, 1), {}),                                          # along H, several chunks
    ((1, 1, 1, 512), (258, 1, 1, 256), {"strides": [1, 128], "pads": [0, 64, 0, 64]}),  # one channel, one group: GEMM
    ((2, 1, 13, 11), (6, 1, 3, 3), {"pads": [1, 1, 1, 1]}),                       # a grayscale first layer
]


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), CASES)
def test_conv_matches_numpy_and_onnxruntime(x_shape, w_shape, attrs, bias):
    model, feeds = _conv(x_shape, w_shape, bias=bias, **attrs)
    _check(model, feeds)


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), [CASES[0], CASES[4], CASES[7], CASES[14]])
def test_conv_same_result_at_every_thread_count(x_shape, w_shape, attrs, threads):
    model, feeds = _conv(x_shape, w_shape, bias=True, **attrs)
    one = run_one_node(model, feeds, "C", threads=1)["y"]
    np.testing.assert_array_equal(_check(model, feeds, threads=threads), one)


def test_conv_weights_computed_at_run_time():
    model, feeds = _conv((1, 4, 9, 9), (6, 4, 3, 3), bias=True, const_w=False, pads=[1, 1, 1, 1])
    _check(model, feeds)


def test_conv_input_smaller_than_the_kernel_is_an_error():
    model, feeds = _conv((1, 3, 2, 2), (2, 3, 3, 3))
    with pytest.raises(ort_abi.KernelError, match="padded input 2 x 2 is smaller than the dilated kernel 3 x 3"):
        run_one_node(model, feeds, "C")


def test_conv_special_values_propagate():
    model, feeds = _conv((1, 2, 6, 6), (3, 2, 3, 3), pads=[1, 1, 1, 1])
    feeds["x"][0, 0, 2, 3] = np.nan
    feeds["x"][0, 1, 4, 4] = np.inf
    got = run_one_node(model, feeds, "C")["y"]
    want = run_one_node(model, feeds, "numpy")["y"]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], atol=1e-5)


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs", "declared"), [
    ((1, 8, 9, 14), (8, 1, 3, 3), {"group": 8, "pads": [1, 1, 1, 1]}, True),  # depthwise: the padded plane
    ((1, 1, 1, 512), (258, 1, 1, 256), {"strides": [1, 128], "pads": [0, 64, 0, 64]}, True),  # one channel: im2col
    ((1, 16, 7, 9), (24, 16, 1, 1), {}, True),
    ((1, 40, 30, 40), (20, 40, 3, 3), {"pads": [1, 1, 1, 1]}, True),
])
def test_conv_declares_its_buffers(x_shape, w_shape, attrs, declared):
    model, _ = _conv(x_shape, w_shape, **attrs)
    estimate, slots = c_kernel_workspace(model, [x_shape, w_shape])
    if not declared:
        assert slots == [] and estimate == 0
        return
    (slot,) = slots
    assert slot.slot_id == 0 and slot.size_bytes > 0
    assert estimate == slot.size_bytes  # shapes known at claim: the Level-1 estimate is the declaration
    k = w_shape[1] * w_shape[2] * w_shape[3]
    assert slot.size_bytes < (k * 512 + 256 * 512 + 64) * 4 * c_kernels_threads()  # chunks, never the whole im2col


@pytest.mark.parametrize(("x_shape", "w_shape", "buffers"), [
    ((1, 3, 16, 16), (4, 3, 3, 3), 1),       # 6912 multiply-adds: a second thread does not pay
    ((1, 16, 64, 64), (32, 16, 3, 3), 2),    # 4.7 M, two chunks of 512 output pixels
    ((1, 64, 28, 28), (128, 64, 3, 3), 2),   # one chunk of 196 pixels: the threads split the output channels
])
def test_conv_declares_a_buffer_for_each_thread_compute_runs_and_never_asks_for_more(x_shape, w_shape, buffers):
    from ort_cpu_ep._threads import intra_op_thread_scope

    model, feeds = _conv(x_shape, w_shape, pads=[1, 1, 1, 1], strides=[2, 2])  # strided: im2col, not direct
    with intra_op_thread_scope(1):
        _, (one,) = c_kernel_workspace(model, [x_shape, w_shape])
    with intra_op_thread_scope(2):
        estimate, (two,) = c_kernel_workspace(model, [x_shape, w_shape])
    assert two.size_bytes == buffers * one.size_bytes  # the work limit of Compute, applied to the declaration
    assert estimate == two.size_bytes
    counters = ort_abi.ContextCounters()
    got = run_one_node(model, feeds, "C", threads=2, counters=counters)["y"]  # no plan: the host's scratch, traced
    assert counters.scratch_fallbacks == 1 and counters.scratch_bytes == two.size_bytes  # the declaration, no more
    np.testing.assert_allclose(got, run_one_node(model, feeds, "numpy")["y"], rtol=1e-4, atol=1e-4)


DIRECT_CASES = [  # the direct path: channel blocks of 32 (tails), rows in even tiles of up to 14 pixels (AVX-512)
    ((2, 12, 9, 11), (28, 12, 3, 3), {"pads": [1, 1, 1, 1]}),                      # 2 images, a partial block
    ((1, 8, 13, 29), (56, 8, 3, 3), {"strides": [2, 2], "pads": [1, 0, 1, 2]}),     # strided, 2 blocks, 15-px rows
    ((1, 3, 23, 23), (64, 3, 7, 7), {"strides": [2, 2], "pads": [3, 3, 3, 3]}),     # a stem
    ((1, 16, 20, 30), (48, 8, 3, 3), {"group": 2, "pads": [0, 2, 1, 0]}),          # groups of 24, uneven pads
    ((1, 8, 17, 19), (26, 8, 5, 5), {"dilations": [2, 1], "pads": [4, 2, 4, 2]}),
    ((1, 16, 5, 61), (30, 16, 3, 3), {}),                                         # unpadded: X read in place
    ((1, 3, 10, 11), (32, 3, 4, 4), {"auto_pad": "SAME_LOWER"}),
]


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), DIRECT_CASES)
def test_conv_direct_path_packs_w_and_matches_at_every_thread_count(x_shape, w_shape, attrs, threads):
    """A constant W of these shapes is packed; the direct path's Y is numpy's and onnxruntime's, the same bits at
    every thread count, and it asks the host for no more workspace than the Conv declares."""
    model, feeds = _conv(x_shape, w_shape, bias=True, **attrs)
    want = run_one_node(model, feeds, "numpy")["y"]
    one = _packed(model, feeds, threads=1)
    assert one is not None, "W was not packed for the direct path"
    scale = max(float(np.abs(want).max()), 1.0)
    np.testing.assert_allclose(one, want, rtol=0, atol=2e-6 * scale)
    np.testing.assert_allclose(one, _ort(model, feeds), rtol=0, atol=2e-6 * scale)
    from ort_cpu_ep._threads import intra_op_thread_scope

    with intra_op_thread_scope(threads):
        estimate, slots = c_kernel_workspace(model, [x_shape, w_shape])
    counters = ort_abi.ContextCounters()
    got = run_one_node(model, feeds, "C", threads=threads, prepack=True, counters=counters)["y"]
    np.testing.assert_array_equal(got, one)
    declared = slots[0].size_bytes if slots else 0
    assert estimate == declared and counters.scratch_bytes <= declared  # the padded copy fits the declaration


ALONG_H = [  # a convolution along H only (W = 1): im2col where X's width is known to be 1, else direct along W
    ((1, 4, 40, 1), (24, 4, 9, 1), {"pads": [4, 0, 4, 0]}),
    ((1, 16, 41, 1), (32, 16, 5, 1), {"pads": [2, 0, 1, 0], "strides": [2, 1], "dilations": [2, 1]}),
    ((2, 24, 70, 1), (32, 24, 5, 1), {}),                                          # magika's, unpadded
]


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), ALONG_H)
def test_conv_along_h_is_packed_only_for_an_unknown_width(isa_cap, x_shape, w_shape, attrs):
    model, feeds = _conv(x_shape, w_shape, bias=True, **attrs)
    assert _packed(model, feeds) is None  # known W = 1: im2col (measured 6% faster on magika's)
    model, feeds = _conv(x_shape, w_shape, bias=True, declared=[*x_shape[:3], "w"], **attrs)
    got = _packed(model, feeds)
    assert got is not None  # a width unknown at initialization: packed, and W = 1 runs along W
    want = run_one_node(model, feeds, "numpy")["y"]
    scale = max(float(np.abs(want).max()), 1.0)
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-6 * scale)
    np.testing.assert_allclose(got, _ort(model, feeds), rtol=0, atol=2e-6 * scale)


def test_conv_direct_path_is_not_taken_for_1x1_and_depthwise():
    for x_shape, w_shape, attrs in [((1, 16, 7, 9), (24, 16, 1, 1), {}), ((1, 8, 9, 14), (8, 1, 3, 3), {"group": 8})]:
        model, feeds = _conv(x_shape, w_shape, **attrs)
        assert _packed(model, feeds) is None


def c_kernels_threads() -> int:
    from ort_cpu_ep import _threads

    return max(_threads.physical_cores(), 1)


def _language(model) -> str:
    m = ort_graph.from_proto(model)
    ep = CpuExecutionProvider(m.graph, m.opset_imports)
    return c_kernels.kernel_language(ep.entry(m.graph.nodes[0]))


def test_conv_nodes_the_c_kernel_takes():
    assert _language(_conv((1, 3, 8, 8), (4, 3, 3, 3))[0]) == "C"
    assert _language(_conv((1, 3, 8), (4, 3, 3))[0]) == "numpy"                       # 1-D
    assert _language(_conv((1, 3, 4, 8, 8), (4, 3, 1, 3, 3))[0]) == "numpy"           # 3-D
    assert _language(_conv((1, 3, 8, 8), (4, 3, 3, 3), dtype=TensorProto.DOUBLE)[0]) == "numpy"


@pytest.mark.parametrize(("w_shape", "attrs"), [((4, 3, 3, 3), {"pads": [1, 1, 1, 1]}), ((3, 1, 3, 3), {"group": 3})])
def test_conv_of_an_empty_batch(w_shape, attrs):
    model, feeds = _conv((0, 3, 6, 6), w_shape, bias=True, **attrs)
    got = run_one_node(model, feeds, "C")["y"]
    want = run_one_node(model, feeds, "numpy")["y"]
    assert got.shape == want.shape and got.shape[0] == 0


@pytest.fixture(params=[0, 1, 2], ids=["portable", "avx2", "avx512"])
def isa_cap(request):
    """Each instruction-set path (those this CPU lacks fall back to the next narrower one)."""
    import ctypes

    if c_kernels.c_registry() is None:
        pytest.skip(f"the C kernels are not loaded: {c_kernels.status().reason}")
    lib = ctypes.CDLL(str(c_kernels.library_path()))
    before = lib.ort_cpu_ep_isa_cap()
    lib.ort_cpu_ep_set_isa_cap(request.param)
    yield request.param
    lib.ort_cpu_ep_set_isa_cap(before)


PACKED_CASES = [  # im2col straight into the sgemm's panels: K over one block (256), chunks, panel tails, strides;
    ((1, 40, 23, 29), (7, 40, 3, 3), {"pads": [1, 1, 1, 1]}),                     # K = 360: two K blocks
    ((2, 9, 33, 21), (29, 9, 3, 3), {"strides": [2, 2], "pads": [1, 0, 1, 2]}),
    ((1, 6, 40, 30), (64, 3, 3, 3), {"group": 2, "dilations": [2, 1], "pads": [2, 1, 2, 1]}),
    ((1, 3, 5, 1), (8, 3, 3, 3), {"pads": [1, 1, 1, 1]}),                          # W = 1, a 3-wide kernel
    ((1, 16, 37, 1), (12, 16, 5, 1), {"pads": [2, 0, 2, 0], "strides": [2, 1]}),   # along H only
    # depthwise: column phases (strides 2, 3), 4 / 2 / 1-row blocks, one-block rows' spare lanes, 2-block rows
    ((2, 5, 21, 23), (5, 1, 5, 5), {"group": 5, "strides": [2, 2], "pads": [2, 2, 2, 2]}),
    ((1, 4, 11, 10), (8, 1, 3, 3), {"group": 4, "pads": [1, 1, 1, 1]}),
    ((1, 3, 17, 70), (3, 1, 3, 3), {"group": 3, "strides": [3, 3], "pads": [1, 0, 2, 1], "dilations": [1, 2]}),
    ((1, 2, 6, 37), (2, 1, 3, 5), {"group": 2, "strides": [1, 2], "pads": [0, 2, 1, 2]}),
    ((1, 3, 9, 5), (3, 1, 3, 3), {"group": 3, "pads": [1, 1, 1, 1]}),
    # a 1x1 convolution of one pixel (squeeze-and-excite): a matrix-vector product, row and K tails, groups
    ((2, 200, 1, 1), (50, 200, 1, 1), {}),
    ((1, 74, 1, 1), (26, 37, 1, 1), {"group": 2}),
    ((1, 5, 1, 1), (9, 5, 1, 1), {}),
    # a few output pixels (up to 8): each weight row dotted with each pixel's taps; row, pixel and K tails, groups
    ((1, 129, 1, 4), (128, 129, 1, 3), {"pads": [0, 1, 0, 1]}),                   # 4 pixels, K = 387
    ((2, 7, 3, 3), (6, 7, 2, 2), {"pads": [1, 0, 0, 1], "strides": [2, 1]}),       # 6 pixels, 2 images
    ((1, 10, 5, 5), (10, 5, 3, 3), {"group": 2, "strides": [2, 3], "dilations": [1, 2], "pads": [1, 2, 1, 2]}),
    ((1, 3, 4, 4), (5, 3, 3, 3), {}),                                              # 2 x 2 pixels
    ((1, 2, 3, 10), (7, 2, 3, 3), {}),                                             # 8 pixels, K = 18
]


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_a_conv_of_a_few_pixels_same_result_at_every_thread_count(threads):
    model, feeds = _conv((1, 129, 1, 4), (128, 129, 1, 3), bias=True, pads=[0, 1, 0, 1])
    one = run_one_node(model, feeds, "C", threads=1)["y"]
    np.testing.assert_array_equal(_check(model, feeds, threads=threads), one)


@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), PACKED_CASES + DIRECT_CASES)
def test_conv_every_instruction_set_path(isa_cap, x_shape, w_shape, attrs):
    model, feeds = _conv(x_shape, w_shape, bias=True, **attrs)
    _check(model, feeds)
