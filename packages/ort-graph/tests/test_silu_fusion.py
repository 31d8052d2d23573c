"""fuse_silu: Mul(x, Sigmoid(x)) in either operand order -> com.microsoft QuickGelu(alpha=1), named after
the Mul; pairs whose Sigmoid output is read elsewhere, or whose Mul multiplies another value, stay."""

import pytest
from onnx import TensorProto, helper

import ort_graph


def silu_model(mul_inputs=("X", "S"), extra_output=False):
    nodes = [helper.make_node("Sigmoid", ["X"], ["S"], name="mlp/act/Sigmoid"),
             helper.make_node("Mul", list(mul_inputs), ["Y"], name="mlp/act/Mul")]
    vi = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 6])  # noqa: E731
    outputs = [vi("Y")] + ([vi("S")] if extra_output else [])
    graph = helper.make_graph(nodes, "silu", [vi("X"), vi("Z")], outputs)
    model = ort_graph.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    ort_graph.resolve_shapes(model, {})
    return model


@pytest.mark.parametrize("order", [("X", "S"), ("S", "X")])
def test_either_operand_order_is_fused_into_quick_gelu(order):
    model = silu_model(order)
    records = ort_graph.fuse_silu(model.graph)
    assert [(r.fusion, r.replaced, r.created) for r in records] == [
        ("SiLUFusion", ("mlp/act/Sigmoid", "mlp/act/Mul"), ("mlp/act/Mul/SiLUFusion",))]
    (node,) = model.graph.nodes
    assert (node.op_type, node.domain, node.inputs, node.outputs) == ("QuickGelu", "com.microsoft", ["X"], ["Y"])
    assert node.attr("alpha") == 1.0


@pytest.mark.parametrize("kwargs", [{"mul_inputs": ("Z", "S")}, {"extra_output": True}])
def test_a_sigmoid_read_elsewhere_or_a_mul_of_another_value_is_left_alone(kwargs):
    model = silu_model(**kwargs)
    assert ort_graph.fuse_silu(model.graph) == []
    assert [n.op_type for n in model.graph.nodes] == ["Sigmoid", "Mul"]


def test_only_pairs_among_the_given_nodes_are_fused():
    model = silu_model()
    sigmoid = model.graph.node_by_name("mlp/act/Sigmoid")
    assert ort_graph.fuse_silu(model.graph, [sigmoid]) == []
    assert ort_graph.fuse_silu(model.graph, list(model.graph.nodes)) != []
