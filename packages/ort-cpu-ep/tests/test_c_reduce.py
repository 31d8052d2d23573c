"""The C float32 ReduceSum, ReduceMean, ReduceMax and ReduceMin (csrc/reduce_kernel.c) against the numpy kernel and
onnxruntime, one node at a time through the CPU provider: axes as an attribute (old opsets) and as a constant input,
keepdims, noop_with_empty_axes, runs of axes with extents of 1 between, NaN, empty inputs, and which nodes it takes."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from ort_cpu_ep.testing import chosen_language, one_node_model, onnxruntime_outputs, run_one_node

F = TensorProto.FLOAT
OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"]
AXES_INPUT_SINCE = {"ReduceSum": 13, "ReduceMean": 18, "ReduceMax": 18, "ReduceMin": 18}


def _model(op, shape, axes, *, as_input=True, dtype=F, **attrs):
    opset = AXES_INPUT_SINCE[op] if as_input else 12
    inputs, inits = ["x"], []
    if axes is not None and as_input:
        inputs.append("axes")
        inits.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
    elif axes is not None:
        attrs["axes"] = axes
    model = one_node_model(helper.make_node(op, inputs, ["y"], **attrs),
                           [helper.make_tensor_value_info("x", dtype, list(shape))],
                           [helper.make_tensor_value_info("y", dtype, None)], inits)
    model.opset_import[0].version = opset
    return model




def _check(model, x):
    got = run_one_node(model, {"x": x}, "C")["y"]
    for want in (run_one_node(model, {"x": x}, "numpy")["y"], onnxruntime_outputs(model, {"x": x})[0]):
        assert got.shape == want.shape and got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)
    return got


CASES = [((1, 512, 256), [1]), ((1, 214), [1]), ((1, 512), [-1]), ((3, 4, 5), [0]), ((3, 4, 5), [1, 2]),
         ((3, 4, 5), [0, 1]), ((2, 3, 4, 5), [1, 2]), ((2, 1, 4, 5), [0, 2]), ((3, 4, 1, 5), [1, 3]),
         ((7, 33), None), ((4, 1, 6), [1]), ((1000,), [0])]


@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize(("shape", "axes"), CASES)
@pytest.mark.parametrize("op", OPS)
def test_reduce_matches_numpy_and_onnxruntime(op, shape, axes, keepdims):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    _check(_model(op, shape, axes, keepdims=keepdims), x)


@pytest.mark.parametrize("op", OPS)
def test_axes_as_the_attribute_of_old_opsets(op):
    x = np.random.default_rng(1).standard_normal((3, 4, 5)).astype(np.float32)
    _check(_model(op, x.shape, [1], as_input=False), x)
    _check(_model(op, x.shape, None, as_input=False, keepdims=0), x)


@pytest.mark.parametrize("op", OPS)
def test_noop_with_empty_axes_gives_x(op):
    x = np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32)
    got = _check(_model(op, x.shape, [], noop_with_empty_axes=1), x)
    np.testing.assert_array_equal(got, x)


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin", "ReduceSum"])
@pytest.mark.parametrize(("shape", "axes", "at"), [((2, 40), [1], (1, 37)), ((2, 40), [1], (0, 3)),
                                                   ((6, 3), [0], (4, 1))])
def test_nan_propagates(op, shape, axes, at):
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    x[at] = np.nan
    got = run_one_node(_model(op, shape, axes), {"x": x}, "C")["y"]
    want = run_one_node(_model(op, shape, axes), {"x": x}, "numpy")["y"]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got).sum() == 1


def test_empty_inputs():
    x = np.zeros((0, 4), np.float32)
    got = run_one_node(_model("ReduceSum", x.shape, [0]), {"x": x}, "C")["y"]
    np.testing.assert_array_equal(got, np.zeros((1, 4), np.float32))
    got = run_one_node(_model("ReduceMax", x.shape, [1]), {"x": x}, "C")["y"]
    assert got.shape == (0, 1)


def test_nodes_the_c_reduce_takes():
    assert chosen_language(_model("ReduceSum", (3, 4, 5), [1])) == "C"
    assert chosen_language(_model("ReduceMean", (3, 4, 5), [1], as_input=False)) == "C"
    assert chosen_language(_model("ReduceSum", (3, 4, 5), [0, 2])) == "numpy"           # not one run
    assert chosen_language(_model("ReduceSum", (3, 1, 5), [0, 2])) == "C"               # one run once the 1 is set aside
    assert chosen_language(_model("ReduceSum", (3, 4), [1], dtype=TensorProto.INT64)) == "C"   # arith_reduce.c
    assert chosen_language(_model("ReduceMax", (3, 4), [1], dtype=TensorProto.INT64)) == "numpy"
    assert chosen_language(_model("ReduceSum", (3, 4), [1], dtype=TensorProto.DOUBLE)) == "numpy"
    runtime_axes = _model("ReduceSum", (3, 4, 5), None)
    runtime_axes.graph.node[0].input.append("axes")
    runtime_axes.graph.input.append(helper.make_tensor_value_info("axes", TensorProto.INT64, [1]))
    assert chosen_language(runtime_axes) == "numpy"
