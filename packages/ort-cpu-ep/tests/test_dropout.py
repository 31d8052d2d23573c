"""Inference Dropout (ops/ops_misc.py): Y is X written into its output block, the mask all true and made only when
the node names that output; through the CPU provider, as a session runs it, against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from ort_cpu_ep.testing import one_node_model, run_one_node


@pytest.mark.parametrize("outputs", [["y"], ["y", "mask"], ["y", ""]])
def test_inference_dropout_is_identity_and_its_mask_all_true(outputs):
    node = helper.make_node("Dropout", ["x"], outputs)
    vis = [helper.make_tensor_value_info(o, TensorProto.BOOL if o == "mask" else TensorProto.FLOAT, None)
           for o in outputs if o]
    model = one_node_model(node, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 5])], vis)
    x = np.random.default_rng(0).standard_normal((2, 3, 5)).astype(np.float32)
    got = run_one_node(model, {"x": x}, "numpy")
    assert got["y"].tobytes() == x.tobytes() and not np.shares_memory(got["y"], x)
    if "mask" in outputs:
        assert got["mask"].dtype == np.bool_ and got["mask"].shape == x.shape and got["mask"].all()
    else:
        assert set(got) == {"y"}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_array_equal(got["y"], want[0])
