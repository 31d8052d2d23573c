"""The C float32 Softmax over rows of contiguous values (csrc/softmax_kernel.c: the last axis; before opset 13
the input coerced to 2-D at axis) against a float64 reference, the numpy kernel
and onnxruntime, one node at a time through the CPU provider: ranks 1-4, row lengths around the 8-float vectors,
special values, y written over x, threads, no workspace, and which nodes it takes."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from onnx import TensorProto, helper

import ort_abi
import ort_graph
from ort_cpu_ep import CpuExecutionProvider, c_kernels
from ort_cpu_ep.testing import c_kernel_workspace, compute_over_input, one_node_model, run_one_node

F = TensorProto.FLOAT
EP = "CPUExecutionProvider"


@pytest.fixture(params=[1, 2], ids=["vectors", "avx512"])
def isa_cap(request, library):
    """Both paths: GCC vectors (ort_cpu_ep_set_isa_cap below 2) and AVX-512 (where the CPU has it; else the
    first again)."""
    lib = ctypes.CDLL(str(c_kernels.library_path()))
    before = lib.ort_cpu_ep_isa_cap()
    lib.ort_cpu_ep_set_isa_cap(request.param)
    yield request.param
    lib.ort_cpu_ep_set_isa_cap(before)


def _softmax(shape, *, dtype=F, opset=None, **attrs):
    node = helper.make_node("Softmax", ["x"], ["y"], **attrs)
    model = one_node_model(node, [helper.make_tensor_value_info("x", dtype, None if shape is None else list(shape))],
                           [helper.make_tensor_value_info("y", dtype, None if shape is None else list(shape))])
    if opset is not None:
        model.opset_import[0].version = opset
    return model


def _language(model) -> str:
    m = ort_graph.from_proto(model)
    ep = CpuExecutionProvider(m.graph, m.opset_imports)
    return c_kernels.kernel_language(ep.entry(m.graph.nodes[0]))


def _reference(x):
    x64 = x.astype(np.float64)
    with np.errstate(invalid="ignore"):
        e = np.exp(x64 - x64.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)


def _onnxruntime(model, x):
    ort = pytest.importorskip("onnxruntime")
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=[EP]).run(None, {"x": x})[0]


def _check(got, x, model):
    """Within float32 rounding of the float64 softmax (x - max rounds as numpy's does, so the tolerance is the
    exp's and the sum's), and close to the numpy kernel and onnxruntime."""
    assert got.shape == x.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, _reference(x), rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(got, run_one_node(model, {"x": x}, "numpy")["y"], rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(got, _onnxruntime(model, x), rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("shape", [(1,), (7,), (8,), (3, 1), (5, 33), (2, 3, 8), (2, 3, 7), (1, 4, 3, 512),
                                   (2, 4097), (2, 2, 2, 33), (3, 40)])
def test_c_softmax_matches_a_float64_reference_numpy_and_onnxruntime(isa_cap, shape):
    rng = np.random.default_rng(shape[-1] * 7 + len(shape))
    x = (rng.standard_normal(shape) * 4).astype(np.float32)
    model = _softmax(shape)
    got = run_one_node(model, {"x": x}, "C")["y"]
    _check(got, x, model)
    np.testing.assert_allclose(got.sum(axis=-1), 1.0, rtol=2e-6)


def test_the_axis_given_as_the_last_index_is_taken_too(library):
    x = np.random.default_rng(1).standard_normal((3, 4, 9)).astype(np.float32)
    model = _softmax(x.shape, axis=2)
    assert _language(model) == "C"
    _check(run_one_node(model, {"x": x}, "C")["y"], x, model)


# rows of special values, padded to 3, 11 and 19 (tails after 0, 8 and 16 floats), the value at every position
_SPECIAL_ROWS = {
    "nan": [np.nan, 1.0, 2.0],                    # NaN anywhere: the whole row NaN
    "+inf": [np.inf, 1.0, 2.0],                   # inf - inf: NaN
    "-inf only": [-np.inf] * 3,                   # -inf - -inf: NaN
    "some -inf": [-np.inf, 0.0, 1.0],             # exp(-inf) = 0
    "huge": [3e38, -3e38, 0.0],                   # x - max overflows to -inf: 0
    "all equal": [-100.0, -100.0, -100.0],
    "exp underflow": [0.0, -87.5, -95.0],         # C: 0 below FLT_MIN, numpy: a denormal
    "big spread": [80.0, -80.0, 0.0],
}


@pytest.mark.parametrize("name", list(_SPECIAL_ROWS))
@pytest.mark.parametrize("width", [3, 11, 19])
def test_special_values_as_numpy_and_onnxruntime_give_them(isa_cap, name, width):
    values = _SPECIAL_ROWS[name]
    rows = []
    for pos in range(width):  # the special value at each position: in the vectors and in the tail
        row = np.full(width, values[2], np.float32)
        row[pos], row[(pos + 1) % width] = values[0], values[1]
        rows.append(row)
    x = np.stack(rows)
    model = _softmax(x.shape)
    got = run_one_node(model, {"x": x}, "C")["y"]
    want = run_one_node(model, {"x": x}, "numpy")["y"]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1.2e-38)  # below FLT_MIN: 0 vs a denormal
    np.testing.assert_allclose(got, _onnxruntime(model, x), rtol=2e-6, atol=1.2e-38)
    if name in ("nan", "+inf", "-inf only"):
        assert np.isnan(got).all()
    else:
        assert not np.isnan(got).any()


@pytest.mark.parametrize("shape", [(3, 0), (0, 5), (2, 0, 4), (0,)])
def test_empty_inputs_give_empty_outputs(library, shape):
    x = np.zeros(shape, np.float32)
    model = _softmax(shape)
    got = run_one_node(model, {"x": x}, "C")["y"]
    assert got.shape == shape and got.dtype == np.float32
    assert run_one_node(model, {"x": x}, "numpy")["y"].shape == shape
    assert _onnxruntime(model, x).shape == shape


@pytest.mark.parametrize("shape", [(6, 37), (2, 3, 512)])
def test_y_written_over_x_gives_the_same_bits(isa_cap, shape):
    """The memory plan may give Y the buffer of X: each row is read (max) before it is written, and each vector
    of x is read before the same vector of y is written."""
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    model = _softmax(shape)
    apart = run_one_node(model, {"x": x}, "C")["y"]
    np.testing.assert_array_equal(compute_over_input(model, {"x": x}), apart)


def test_threads_give_the_same_bits(isa_cap):
    """Rows split across threads (4 x 50 x 513 values: enough for 3); a row's arithmetic is the same whatever
    thread computes it."""
    x = (np.random.default_rng(5).standard_normal((4, 50, 513)) * 3).astype(np.float32)
    model = _softmax(x.shape)
    one, three = (run_one_node(model, {"x": x}, "C", threads=n)["y"] for n in (1, 3))
    np.testing.assert_array_equal(one, three)
    _check(three, x, model)


def test_no_workspace_is_estimated_or_declared(library):
    assert c_kernel_workspace(_softmax((4, 64)), [(4, 64)]) == (0, [])


@pytest.mark.parametrize(("opset", "shape", "attrs", "language"), [
    (11, (2, 3, 5), {"axis": 2}, "C"), (12, (2, 3, 5), {"axis": -1}, "C"),
    (12, (4, 7), {}, "C"),                        # default axis 1: the last of a rank-2 input
    (11, (2, 3, 5), {}, "C"),                     # default axis 1 of rank 3: rows over the last two axes
    (12, (2, 3, 5), {"axis": 1}, "C"),
    (9, (1, 1000, 1, 1), {}, "C"),                # squeezenet's classifier
    (11, (2, 3, 5), {"axis": 0}, "C"),            # one row of everything
    (13, (2, 1000, 1, 1), {"axis": 1}, "C"),      # from 13 on: one axis, only ones after it
    (13, (2, 7, 3, 1), {"axis": 1}, "numpy")])
def test_a_softmax_over_rows_of_contiguous_values_is_c(library, opset, shape, attrs, language):
    """Before opset 13 Softmax coerces its input to 2-D at axis (default 1): each row (everything from the axis
    on) is contiguous, whatever the axis; from 13 on an axis with only size-1 dimensions after it is the same.
    The C kernel computes those; the others stay with numpy."""
    model = _softmax(shape, opset=opset, **attrs)
    assert _language(model) == language
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    got = run_one_node(model, {"x": x}, language)["y"]
    np.testing.assert_allclose(got, _onnxruntime(model, x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape,axis", [((2, 3, 5), 1), ((2, 3, 5), -2), ((4, 5), 0), ((2, 3, 5), 5)])
def test_another_axis_goes_to_numpy(library, shape, axis):
    assert _language(_softmax(shape, axis=axis)) == "numpy"


def test_float16_and_unknown_rank_go_to_numpy(library):
    assert _language(_softmax((2, 8), dtype=TensorProto.FLOAT16)) == "numpy"
    assert _language(_softmax(None)) == "numpy"
    assert _language(_softmax((2, 8))) == "C"


def test_the_kernel_refuses_an_axis_it_was_not_given_for(library):
    """The provider never sends it another axis; called directly, it says so instead of computing the wrong one."""
    m = ort_graph.from_proto(_softmax((2, 3, 5), axis=1))
    ep = CpuExecutionProvider(m.graph, m.opset_imports)
    (node,) = m.graph.nodes
    entry = c_kernels.c_registry().find("Softmax", "", 22, EP, {"T": F})
    assert c_kernels.kernel_language(entry) == "C"
    kernel = entry.create_kernel(ort_abi.KernelInfo.from_node(node, ep))
    ctx = ort_abi.KernelContext([np.zeros((2, 3, 5), np.float32)], output_count=1, output_types=[F])
    with pytest.raises(ort_abi.KernelError, match="axis 1 of a rank-3 input with more than one value after it"):
        kernel.compute(ctx)
    kernel.release()


def test_a_malformed_axis_attribute_goes_to_numpy_without_raising(library):
    """A model file is untrusted: an axis that is not an integer is refused at load (a typed error naming the
    attribute); a graph built in code can still carry one, and it is the numpy kernel's to report."""
    from onnx import AttributeProto

    model = _softmax((2, 8))
    model.graph.node[0].attribute.append(helper.make_attribute("axis", ""))
    with pytest.raises(ort_graph.ModelLoadError, match="axis"):
        ort_graph.from_proto(model)
    m = ort_graph.from_proto(_softmax((2, 8)))
    m.graph.nodes[0].attributes["axis"] = ort_graph.Attr("axis", AttributeProto.STRING, b"")
    ep = CpuExecutionProvider(m.graph, m.opset_imports)
    assert c_kernels.kernel_language(ep.entry(m.graph.nodes[0])) == "numpy"


def test_results_below_the_normal_range_are_zero_on_both_paths_and_the_float_mode_is_restored(library):
    """Rows computed with flush-to-zero (a denormal costs ~100 cycles per instruction; wide scores make many):
    exp(-95) and exp(-100), denormals in numpy, are 0; the caller's thread gets its float mode back."""
    lib = ctypes.CDLL(str(c_kernels.library_path()))
    x = np.array([[0.0, -95.0, -87.0, -100.0] + [-1.0] * 13], np.float32)
    model = _softmax(x.shape)
    want = run_one_node(model, {"x": x}, "numpy")["y"][0]
    before = lib.ort_cpu_ep_isa_cap()
    try:
        for cap in (1, 2):
            lib.ort_cpu_ep_set_isa_cap(cap)
            got = run_one_node(model, {"x": x}, "C")["y"][0]
            assert got[1] == 0 and got[3] == 0 and want[1] > 0 and want[3] > 0
            np.testing.assert_allclose(got, want, rtol=2e-6, atol=1.2e-38)
            assert np.float32(1e-39) * np.float32(1.0) > 0 and np.float32(1e-39) + np.float32(0.0) > 0
    finally:
        lib.ort_cpu_ep_set_isa_cap(before)


def test_the_two_paths_are_both_taken(library):
    """isa cap 2 runs the AVX-512 path where the CPU has it (its 16-float sums round differently), below 2 the
    GCC vectors."""
    import pathlib

    if "avx512f" not in pathlib.Path("/proc/cpuinfo").read_text():
        pytest.skip("this CPU has no AVX-512F")
    lib = ctypes.CDLL(str(c_kernels.library_path()))
    x = (np.random.default_rng(9).standard_normal((64, 1000)) * 3).astype(np.float32)
    model = _softmax(x.shape)
    before = lib.ort_cpu_ep_isa_cap()
    try:
        got = {}
        for cap in (1, 2):
            lib.ort_cpu_ep_set_isa_cap(cap)
            got[cap] = run_one_node(model, {"x": x}, "C")["y"]
    finally:
        lib.ort_cpu_ep_set_isa_cap(before)
    assert not np.array_equal(got[1], got[2])
    np.testing.assert_allclose(got[1], got[2], rtol=2e-6, atol=1e-7)
