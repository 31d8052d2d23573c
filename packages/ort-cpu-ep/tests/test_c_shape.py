"""The C Shape (csrc/shape_kernel.c) against the numpy kernel and onnxruntime: every rank, start / end (opset 15)
in and out of range, element types, and which nodes it takes."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from ort_cpu_ep.testing import chosen_language, one_node_model, onnxruntime_outputs, run_one_node


def _model(shape, dtype=TensorProto.FLOAT, opset=15, **attrs):
    model = one_node_model(helper.make_node("Shape", ["x"], ["y"], **attrs),
                           [helper.make_tensor_value_info("x", dtype, list(shape))],
                           [helper.make_tensor_value_info("y", TensorProto.INT64, None)])
    model.opset_import[0].version = opset
    return model


@pytest.mark.parametrize("attrs", [{}, {"start": 1}, {"end": -1}, {"start": -2, "end": 3}, {"start": 5},
                                   {"start": -9, "end": 9}, {"start": 2, "end": 1}])
@pytest.mark.parametrize("shape", [(), (4,), (2, 0, 3), (1, 2, 3, 4, 5)])
def test_shape_matches_numpy_and_onnxruntime(shape, attrs):
    model = _model(shape, **attrs)
    x = np.zeros(shape, np.float32)
    got = run_one_node(model, {"x": x}, "C")["y"]
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, run_one_node(model, {"x": x}, "numpy")["y"])
    want = onnxruntime_outputs(model, {"x": x})[0]
    np.testing.assert_array_equal(got, want)


def test_nodes_the_c_shape_takes():
    assert chosen_language(_model((2, 3), TensorProto.INT64)) == "C"
    assert chosen_language(_model((2, 3), TensorProto.BOOL, opset=11)) == "C"
    assert chosen_language(_model((2, 3), TensorProto.STRING)) == "numpy"
