"""A C kernel whose constant-weight pre-packing (ABI v5 PrePackWeightInto) returns an error status stops the
session's initialization with a typed error naming the node, before any run."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_abi
from ort_session import InferenceSession

F = TensorProto.FLOAT


def test_a_kernel_whose_pre_packing_fails_stops_initialization_naming_the_node(misbehaving_lib):
    graph = helper.make_graph([helper.make_node("PrePackFails", ["x", "w"], ["y"], name="packer", domain="com.test")],
                              "g", [helper.make_tensor_value_info("x", F, [4])],
                              [helper.make_tensor_value_info("y", F, [4])],
                              [numpy_helper.from_array(np.ones(4, np.float32), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.test", 1)])
    with pytest.raises(ort_abi.PrePackError, match=r"PrePackWeightInto of node 'packer'.*cannot pack this weight"):
        InferenceSession(model.SerializeToString(), {"kernel_libraries": [str(misbehaving_lib)]},
                         providers=["CPUExecutionProvider"])
