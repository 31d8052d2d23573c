"""A session runs an inference Dropout whose mask no one reads as an Identity (ort_graph's
inference_dropout_as_identity, the CPU provider's pass), with onnxruntime's result."""

from __future__ import annotations

import warnings

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from ort_session import InferenceSession


def test_a_session_runs_an_inference_dropout_whose_mask_is_unread_as_identity():
    nodes = [helper.make_node("Dropout", ["x"], ["d", "mask"]), helper.make_node("Relu", ["d"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    x = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert [n.op_type for n in sess.model.graph.nodes] == ["Identity", "Relu"]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], want[0])
