"""inference_dropout_as_identity: an inference Dropout whose mask no one reads becomes Identity (same name); any
other Dropout stays."""

from __future__ import annotations

import pytest
from onnx import TensorProto, helper

import ort_graph

F = TensorProto.FLOAT


def _model(dropout, extra=(), outputs=("z",), inputs=("x",)):
    nodes = [dropout, helper.make_node("Relu", ["y"], ["z"]), *extra]
    vis = [helper.make_tensor_value_info(n, TensorProto.BOOL if n == "mask" else F, None) for n in outputs]
    ins = [helper.make_tensor_value_info("x", F, [2, 3])]
    if "t" in inputs:
        ins.append(helper.make_tensor_value_info("t", TensorProto.BOOL, []))
    g = helper.make_graph(nodes, "g", ins, vis)
    return ort_graph.from_proto(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]))


@pytest.mark.parametrize("outputs", [["y"], ["y", ""], ["y", "mask"]])
def test_an_inference_dropout_with_an_unread_mask_becomes_identity(outputs):
    m = _model(helper.make_node("Dropout", ["x"], outputs, name="drop"))
    records = ort_graph.inference_dropout_as_identity(m.graph)
    assert [(r.replaced, r.created) for r in records] == [(("drop",), ("drop",))]
    node = next(n for n in m.graph.nodes if n.name == "drop")
    assert node.op_type == "Identity" and list(node.inputs) == ["x"] and list(node.outputs) == ["y"]
    assert not node.attributes


@pytest.mark.parametrize("case", ["mask read", "mask an output", "training_mode", "is_test 0"])
def test_other_dropouts_stay(case):
    if case == "mask read":
        m = _model(helper.make_node("Dropout", ["x"], ["y", "mask"]), extra=[helper.make_node("Not", ["mask"], ["nm"])],
                   outputs=("z", "nm"))
    elif case == "mask an output":
        m = _model(helper.make_node("Dropout", ["x"], ["y", "mask"]), outputs=("z", "mask"))
    elif case == "training_mode":
        m = _model(helper.make_node("Dropout", ["x", "", "t"], ["y"]), inputs=("x", "t"))
    else:
        m = _model(helper.make_node("Dropout", ["x"], ["y"], is_test=0))
    assert ort_graph.inference_dropout_as_identity(m.graph) == []
    assert [n.op_type for n in m.graph.nodes].count("Dropout") == 1


def test_only_the_nodes_given_are_rewritten():
    m = _model(helper.make_node("Dropout", ["x"], ["y"], name="drop"))
    assert ort_graph.inference_dropout_as_identity(m.graph, nodes=[]) == []
    assert m.graph.nodes[0].op_type == "Dropout"
