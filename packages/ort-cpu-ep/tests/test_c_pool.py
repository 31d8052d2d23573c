"""The C float32 MaxPool, AveragePool, GlobalAveragePool and GlobalMaxPool (csrc/pool_kernel.c) against the numpy
kernels and onnxruntime, one node at a time through the CPU provider: kernel sizes, strides, dilations, pads,
auto_pad, ceil_mode, count_include_pad, NaN, thread counts, and which nodes the C kernels take."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import ort_graph
from ort_cpu_ep import CpuExecutionProvider, c_kernels
from ort_cpu_ep.testing import one_node_model, run_one_node

F = TensorProto.FLOAT


def _model(op, shape, *, outputs=("y",), opset=22, **attrs):
    return one_node_model(helper.make_node(op, ["x"], list(outputs), **attrs),
                          [helper.make_tensor_value_info("x", F, list(shape))],
                          [helper.make_tensor_value_info(o, F if i == 0 else TensorProto.INT64, None)
                           for i, o in enumerate(outputs)])


def _ort(model, feeds):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def _check(model, x, *, exact, threads=None):
    got = run_one_node(model, {"x": x}, "C", threads=threads)["y"]
    want = run_one_node(model, {"x": x}, "numpy")["y"]
    assert got.shape == want.shape and got.dtype == np.float32
    if exact:
        assert got.tobytes() == want.tobytes()
    else:
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got, _ort(model, {"x": x}), rtol=1e-6, atol=1e-6)
    return got


WINDOWS = [
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [2, 2], "strides": [2, 2]},
    {"kernel_shape": [3, 2], "strides": [1, 2], "pads": [1, 0, 2, 1]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1},
    {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]},
    {"kernel_shape": [4, 4], "auto_pad": "SAME_LOWER"},
    {"kernel_shape": [2, 3], "auto_pad": "VALID", "strides": [2, 1]},
    {"kernel_shape": [2, 2], "strides": [1, 1], "dilations": [2, 2], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [5, 5], "pads": [2, 2, 2, 2]},
    # stride 1, as many output columns as input ones: the flattened-plane passes (pool_plane_flat)
    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [3, 3], "pads": [0, 2, 2, 0]},
    {"kernel_shape": [3, 3], "dilations": [2, 2], "pads": [2, 2, 2, 2]},
    {"kernel_shape": [1, 7], "pads": [0, 3, 0, 3]},
]


@pytest.mark.parametrize("attrs", WINDOWS)
@pytest.mark.parametrize("shape", [(1, 3, 11, 13), (2, 4, 8, 8)])
def test_max_pool_matches_numpy_bits_and_onnxruntime(shape, attrs):
    _check(_model("MaxPool", shape, **attrs), np.random.default_rng(0).standard_normal(shape).astype(np.float32), exact=True)


# count_include_pad with a SAME auto_pad goes to the numpy kernel (see test_pool_nodes_the_c_kernels_take)
@pytest.mark.parametrize(("attrs", "count_include_pad"), [(a, c) for a in WINDOWS for c in (0, 1)
                                                          if not (c and a.get("auto_pad", "").startswith("SAME"))])
def test_average_pool_matches_numpy_and_onnxruntime(attrs, count_include_pad):
    shape = (2, 3, 11, 13)
    _check(_model("AveragePool", shape, count_include_pad=count_include_pad, **attrs),
           np.random.default_rng(1).standard_normal(shape).astype(np.float32), exact=False)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", [(1, 5, 7, 9), (2, 3, 17), (1, 2, 3, 4, 5), (1, 64, 1, 1), (1, 6, 508), (1, 3, 16)])
def test_global_pools_match_numpy_and_onnxruntime(op, shape):
    _check(_model(op, shape), (np.random.default_rng(2).standard_normal(shape) + 3).astype(np.float32),
           exact=op == "GlobalMaxPool")


@pytest.mark.parametrize(("shape", "attrs"), [
    ((1, 3, 27, 27), {"kernel_shape": [3, 3], "strides": [2, 2]}),      # squeezenet's, 13 outputs a row
    ((2, 2, 40, 111), {"kernel_shape": [3, 3], "strides": [2, 2]}),     # vector passes and their tails
    ((1, 2, 9, 40), {"kernel_shape": [2, 3], "strides": [1, 2]}),
    ((1, 2, 17, 50), {"kernel_shape": [5, 4], "strides": [3, 2]}),
    ((1, 3, 112, 112), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),  # resnet's stem pool
    ((1, 2, 21, 40), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [0, 2, 1, 0]}),
    ((1, 2, 13, 27), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ((1, 2, 9, 11), {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 7, 6), {"kernel_shape": [4, 4], "strides": [1, 2], "pads": [3, 3, 3, 3]}),  # windows of pads only
])
@pytest.mark.parametrize("special", [None, np.nan, np.inf, -np.inf])
def test_max_pool_of_column_stride_two(shape, attrs, special):
    """Each column's window rows first, then each window's columns (pool_plane_max_s2): numpy's bits, a NaN or an
    infinity wherever it lies (the vector lanes and the scalar tails); onnxruntime's values too, but for NaN,
    which its MaxPool does not propagate, and -inf, where a window of -inf and pads gives its -FLT_MAX."""
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    if special is not None:
        x.reshape(-1)[[0, 17, 33, x.size // 2, x.size - 1]] = special
    model = _model("MaxPool", shape, **attrs)
    if special is not None and (np.isnan(special) or special < 0):
        got, want = (run_one_node(model, {"x": x}, lang)["y"] for lang in ("C", "numpy"))
        assert got.tobytes() == want.tobytes() and (np.isnan(got).any() or not np.isnan(special))
    else:
        _check(model, x, exact=True)


@pytest.mark.parametrize("op", ["MaxPool", "GlobalMaxPool", "AveragePool", "GlobalAveragePool"])
def test_nan_propagates_as_in_numpy(op):
    x = np.random.default_rng(3).standard_normal((1, 2, 6, 6)).astype(np.float32)
    x[0, 0, 1, 1] = np.nan
    attrs = {} if op.startswith("Global") else {"kernel_shape": [2, 2], "strides": [2, 2]}
    model = _model(op, x.shape, **attrs)
    got = run_one_node(model, {"x": x}, "C")["y"]
    want = run_one_node(model, {"x": x}, "numpy")["y"]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got).any()


@pytest.mark.parametrize("at", [0, 5, 15, 16, 31, 40, 44])  # the vector lanes, the second register, the tail
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_global_max_pool_special_values_in_every_lane(at, value):
    x = np.random.default_rng(5).standard_normal((1, 2, 45)).astype(np.float32)
    x[0, 1, at] = value
    model = _model("GlobalMaxPool", x.shape)
    got = run_one_node(model, {"x": x}, "C")["y"]
    np.testing.assert_array_equal(got, run_one_node(model, {"x": x}, "numpy")["y"])
    np.testing.assert_array_equal(got, x.max(axis=2, keepdims=True))


@pytest.mark.parametrize("strides", [[2, 2], [1, 1], [1, 2]])
@pytest.mark.parametrize("cell", [(0, 0), (0, 1), (1, 0), (1, 1)])
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_two_by_two_windows_inside_the_input(op, cell, strides):
    """The 2 x 2 windows that never reach a pad (cls's MaxPool), overlapping ones too: numpy's values (MaxPool's
    bits) and onnxruntime's; then every cell of a window NaN in turn, which numpy propagates (onnxruntime's MaxPool
    does not wherever the NaN sits)."""
    shape = (1, 3, 4, 8)
    x = np.random.default_rng(6).standard_normal(shape).astype(np.float32)
    model = _model(op, shape, kernel_shape=[2, 2], strides=strides)
    _check(model, x, exact=op == "MaxPool")
    x[0, 1, 2 + cell[0], 4 + cell[1]] = np.nan
    got = run_one_node(model, {"x": x}, "C")["y"]
    want = run_one_node(model, {"x": x}, "numpy")["y"]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_pool_thread_counts(threads):
    shape = (2, 40, 33, 35)
    x = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    _check(_model("MaxPool", shape, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), x, exact=True, threads=threads)
    _check(_model("GlobalAveragePool", shape), x, exact=False, threads=threads)


def _language(model) -> str:
    m = ort_graph.from_proto(model)
    ep = CpuExecutionProvider(m.graph, m.opset_imports)
    return c_kernels.kernel_language(ep.entry(m.graph.nodes[0]))


def test_pool_nodes_the_c_kernels_take():
    assert _language(_model("MaxPool", (1, 2, 8, 8), kernel_shape=[2, 2])) == "C"
    assert _language(_model("MaxPool", (1, 2, 8, 8), outputs=("y", "i"), kernel_shape=[2, 2])) == "numpy"  # Indices
    assert _language(_model("MaxPool", (1, 2, 8), kernel_shape=[2])) == "numpy"                            # 1-D
    assert _language(_model("AveragePool", (1, 2, 8, 8), kernel_shape=[3, 3], auto_pad="SAME_UPPER",
                            count_include_pad=1)) == "numpy"
    assert _language(_model("GlobalAveragePool", (1, 2, 8))) == "C"


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize(("shape", "attrs"), [
    ((1, 4, 1, 8), {"kernel_shape": [2, 2], "strides": [2, 2]}),        # ppocr_mobile_v2_cls at a 16x16 input
    ((1, 2, 1, 3), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ((2, 3, 2, 2), {"kernel_shape": [3, 3], "strides": [2, 2]}),
    ((1, 2, 1, 5), {"kernel_shape": [2, 2], "strides": [2, 2], "count_include_pad": 1}),
])
def test_a_window_overhanging_the_input_by_less_than_a_stride_pools_what_it_covers(op, shape, attrs):
    """Integer division toward zero (onnxruntime's rule and onnx shape inference's): one output position on
    that axis, pooled over the cells the window covers. Both kernels refused it, though the plan (from onnx
    shape inference) had planned that output."""
    if op == "MaxPool":
        attrs = {k: v for k, v in attrs.items() if k != "count_include_pad"}
    model = _model(op, shape, **attrs)
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    got = _check(model, x, exact=False)
    assert got.shape[2] == 1


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_a_window_larger_than_the_input_is_refused_as_onnxruntime_does(op):
    """No output position: onnxruntime fails the node; the C kernel too (it returned an empty Y), with a typed
    status naming the op, and so does the numpy kernel."""
    model = _model(op, [1, 2, 1, 1], kernel_shape=[3, 3])
    x = np.ones((1, 2, 1, 1), np.float32)
    with pytest.raises(Exception, match="Non-zero status|MaxPool|AveragePool|Pool"):
        _ort(model, {"x": x})
    with pytest.raises(Exception, match=f"{op}: the pooling window is larger than the padded input"):
        run_one_node(model, {"x": x}, "C")
    with pytest.raises(Exception, match="window shape cannot be larger|larger than"):
        run_one_node(model, {"x": x}, "numpy")


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize(("shape", "attrs"), [
    ((1, 2, 600, 9), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),     # rows saved and restored in chunks
    ((1, 1, 5, 1030), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),    # wider than the flattened passes take
    ((1, 3, 4, 1), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),       # one column: every tap but one wraps
    ((1, 2, 2, 3), {"kernel_shape": [5, 5], "pads": [2, 2, 2, 2]}),       # windows larger than the plane
])
def test_stride_one_same_size_planes_of_every_extent(op, shape, attrs):
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    model = _model(op, shape, **(attrs if op == "MaxPool" else {**attrs, "count_include_pad": 1}))
    _check(model, x, exact=op == "MaxPool")
    x.reshape(-1)[::37] = np.nan  # a NaN sticks in every window that covers it, as in numpy (onnxruntime drops it)
    got = run_one_node(model, {"x": x}, "C")["y"]
    want = run_one_node(model, {"x": x}, "numpy")["y"]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize(("shape", "attrs"), [
    ((1, 13, 7, 7), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),                 # 13 planes: a partial block
    ((2, 9, 14, 14), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 8, 16, 16), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ((1, 5, 9, 6), {"kernel_shape": [3, 2], "strides": [2, 1], "dilations": [2, 1], "pads": [2, 0, 1, 1],
                    "ceil_mode": 1}),
])
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_small_planes_pooled_eight_at_a_time(op, shape, attrs, threads):
    """Planes of at most 256 cells, 4 or more of them: interleaved 8 at a time (pool_planes8)."""
    x = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    for count_pad in ((0,) if op == "MaxPool" else (0, 1)):
        model = _model(op, shape, **(attrs if op == "MaxPool" else {**attrs, "count_include_pad": count_pad}))
        _check(model, x, exact=op == "MaxPool", threads=threads)
    x.reshape(-1)[::29] = np.nan
    model = _model(op, shape, **attrs)
    got = run_one_node(model, {"x": x}, "C", threads=threads)["y"]
    want = run_one_node(model, {"x": x}, "numpy")["y"]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
