"""The C float32 Relu, Clip, HardSigmoid, LeakyRelu and HardSwish (csrc/act_unary.c, act_math.c) against the numpy
kernel bit for bit (Sigmoid within a few ulp) and onnxruntime within float32 rounding, one node at a time through the CPU provider: special
values, attributes, Clip's two forms (opset 6 attributes, opset 11+ optional inputs), thread counts, and which nodes
the C kernels take."""

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
SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -3e-42, 3.4e38, -3.4e38, 1.0, -3.0, 3.0, 6.0],
                    np.float32)


def _values(shape, seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 4).astype(np.float32)
    flat = x.reshape(-1)
    flat[::5] = SPECIALS[rng.integers(0, len(SPECIALS), flat[::5].shape)]
    return x


def _model(op, shape, *, opset=22, extra_inputs=(), inits=(), **attrs):
    inputs = ["x", *[name for name, _ in extra_inputs]]
    vis = [helper.make_tensor_value_info("x", F, list(shape))]
    vis += [helper.make_tensor_value_info(name, F, list(s)) for name, s in extra_inputs if name]
    model = one_node_model(helper.make_node(op, inputs, ["y"], **attrs), vis,
                           [helper.make_tensor_value_info("y", F, list(shape))], inits)
    model.opset_import[0].version = opset
    return model


def _ort(model, feeds):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def _check(model, feeds):
    got = same_bits_as_numpy(model, feeds)["y"]
    want = _ort(model, feeds)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=2e-7, atol=1e-7)


@pytest.mark.parametrize("shape", [(1,), (7,), (2, 3, 17, 5), (0, 4)])
@pytest.mark.parametrize(("op", "attrs"), [
    ("Relu", {}), ("HardSigmoid", {}), ("HardSigmoid", {"alpha": 0.1666667, "beta": 0.5}), ("LeakyRelu", {}),
    ("LeakyRelu", {"alpha": 0.3}), ("HardSwish", {})])
def test_unary_matches_numpy_bits_and_onnxruntime(op, attrs, shape):
    _check(_model(op, shape, **attrs), {"x": _values(shape)})


@pytest.mark.parametrize(("lo", "hi"), [(0.0, 6.0), (-1.0, None), (None, 2.5), (None, None), (3.0, -1.0)])
def test_clip_bounds_as_inputs(lo, hi):
    shape = (3, 50)
    extra = [("lo" if lo is not None else "", ()), ("hi", ())] if hi is not None else ([("lo", ())] if lo is not None else [])
    feeds = {"x": _values(shape)}
    if lo is not None:
        feeds["lo"] = np.array(lo, np.float32)
    if hi is not None:
        feeds["hi"] = np.array(hi, np.float32)
    model = _model("Clip", shape, extra_inputs=extra)
    got = run_one_node(model, feeds, "C")["y"]
    assert got.tobytes() == run_one_node(model, feeds, "numpy")["y"].tobytes()
    # onnxruntime's absent bound is the float's lowest / largest finite value (Clip(-inf) = -3.4e38 without a
    # min); the numpy kernel's, and so this one's, leaves +-inf as they are
    finite = np.isfinite(feeds["x"])
    np.testing.assert_array_equal(got[finite], _ort(model, feeds)[finite])


def test_clip_bounds_as_constant_initializers():
    inits = [numpy_helper.from_array(np.array(0.0, np.float32), "lo"), numpy_helper.from_array(np.array(6.0, np.float32), "hi")]
    model = _model("Clip", (4, 33), extra_inputs=[("lo", ()), ("hi", ())], inits=inits)
    _check(model, {"x": _values((4, 33))})


def test_clip_opset6_attributes():
    model = _model("Clip", (4, 33), opset=6, min=-0.5, max=0.75)
    _check(model, {"x": _values((4, 33))})


def test_clip_bound_that_is_not_a_scalar_is_an_error():
    model = _model("Clip", (4, 8), extra_inputs=[("lo", (2,))])
    with pytest.raises(ort_abi.KernelError, match="input min has 2 elements; it must be a scalar"):
        run_one_node(model, {"x": _values((4, 8)), "lo": np.zeros(2, np.float32)}, "C")


@pytest.mark.parametrize("shape", [(1,), (7,), (3, 5, 41), (0, 4)])
def test_sigmoid_within_a_few_ulp_of_numpy_and_onnxruntime(shape, isa_cap):
    x = _values(shape)
    x.reshape(-1)[1::9] = np.array([-87.0, 87.5, -100.0, 100.0, 15.0, -15.0], np.float32)[
        np.arange(x.reshape(-1)[1::9].size) % 6]
    model = _model("Sigmoid", shape)
    got = run_one_node(model, {"x": x}, "C")["y"]
    # numpy: a few ulp (below x = -88 this kernel gives 0 where numpy has ~1e-38); onnxruntime's own logistic
    # approximation is close in absolute terms only (1e-7 off near 0)
    for want, rtol, atol in ((run_one_node(model, {"x": x}, "numpy")["y"], 1e-6, 1e-37), (_ort(model, {"x": x}), 1e-6, 1e-7)):
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        ok = ~np.isnan(want)
        np.testing.assert_allclose(got[ok], want[ok], rtol=rtol, atol=atol)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_unary_thread_counts_give_the_same_bits(threads):
    model = _model("HardSwish", (3, 70001))
    x = _values((3, 70001))
    assert run_one_node(model, {"x": x}, "C", threads=threads)["y"].tobytes() == run_one_node(model, {"x": x}, "numpy")["y"].tobytes()


def _language(model) -> str:
    m = ort_graph.from_proto(model)
    ep = CpuExecutionProvider(m.graph, m.opset_imports)
    return c_kernels.kernel_language(ep.entry(m.graph.nodes[0]))


def test_unary_nodes_the_c_kernels_take():
    assert _language(_model("Relu", (2, 3))) == "C"
    double = _model("Relu", (2, 3))
    double.graph.input[0].type.tensor_type.elem_type = TensorProto.DOUBLE
    double.graph.output[0].type.tensor_type.elem_type = TensorProto.DOUBLE
    assert _language(double) == "numpy"
    assert _language(_model("HardSwish", (2, 3))) == "C"


@pytest.mark.parametrize("kernel, dtype", [("C", np.float32), ("numpy", np.float32), ("numpy", np.float16)])
@pytest.mark.parametrize("bounds", [("", ""), ("mn", ""), ("", "mx"), None])
def test_clip_with_an_absent_bound_clamps_infinities_as_onnxruntime(dtype, bounds, kernel):
    """onnxruntime takes an absent Clip bound as the type's lowest / largest finite value, so +-inf come out
    finite; NaN stays NaN. Opset 13 inputs (`bounds`) and opset 6 attributes (None: no attribute at all)."""
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    x = np.array([np.inf, -np.inf, np.nan, 0.5, -3.0], dtype)
    if bounds is None:
        node, inits, opset = helper.make_node("Clip", ["x"], ["y"]), [], 6
    else:
        names = ["x", *bounds]
        inits = [helper.make_tensor(n, elem, [], [v]) for n, v in (("mn", -1.0), ("mx", 1.0)) if n in bounds]
        node, opset = helper.make_node("Clip", names, ["y"]), 13
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", elem, [5])],
                          [helper.make_tensor_value_info("y", elem, [5])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = run_one_node(model, {"x": x}, kernel)["y"]
    np.testing.assert_array_equal(got, want)
