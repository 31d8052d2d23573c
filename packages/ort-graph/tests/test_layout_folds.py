"""`fold_constant_layouts`: Unsqueeze / Squeeze / Reshape / Flatten / Identity of initializers become initializers
(views of the data), as onnxruntime's constant folding does; invalid, overridable or output values stay nodes."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from ort_graph import fold_constant_layouts, from_proto

W = np.arange(24, dtype=np.float32).reshape(2, 3, 4)


def _graph(node, extra_inits=(), *, opset=13, as_input=False, out_is_output=False, ir=10):
    inits = [numpy_helper.from_array(W, "w"), *extra_inits]
    nodes = [node] if out_is_output else [node, helper.make_node("Identity", ["c"], ["y"], name="/out")]
    inputs = [helper.make_tensor_value_info("w", TensorProto.FLOAT, list(W.shape))] if as_input else []
    g = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("c" if out_is_output else "y",
                                                                             TensorProto.FLOAT, None)], inits)
    return from_proto(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir)).graph


def _i64(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


@pytest.mark.parametrize(("node", "inits", "opset", "want"), [
    (helper.make_node("Unsqueeze", ["w", "a"], ["c"]), [_i64("a", [0, -1])], 13, W[None, ..., None]),
    (helper.make_node("Unsqueeze", ["w"], ["c"], axes=[1]), [], 11, W[:, None]),
    (helper.make_node("Reshape", ["w", "s"], ["c"]), [_i64("s", [0, -1])], 13, W.reshape(2, 12)),
    (helper.make_node("Flatten", ["w"], ["c"], axis=-1), [], 13, W.reshape(6, 4)),
    (helper.make_node("Flatten", ["w"], ["c"], axis=0), [], 13, W.reshape(1, 24)),
    (helper.make_node("Identity", ["w"], ["c"]), [], 13, W),
])
def test_a_layout_op_of_an_initializer_becomes_an_initializer(node, inits, opset, want):
    g = _graph(node, inits, opset=opset)
    assert fold_constant_layouts(g) == ["c"]
    assert [n.op_type for n in g.nodes] == ["Identity"] and g.nodes[0].inputs == ["c"]
    np.testing.assert_array_equal(g.initializers["c"].numpy(), want)
    assert g.values["c"].shape == want.shape and g.initializers["c"].dtype == TensorProto.FLOAT


def test_a_chain_folds_in_one_pass_squeeze_without_axes_dropping_unit_dims():
    nodes = [helper.make_node("Unsqueeze", ["w", "a"], ["u"]), helper.make_node("Squeeze", ["u"], ["c"]),
             helper.make_node("Identity", ["c"], ["y"])]
    g = helper.make_graph(nodes, "g", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(W[:, :1], "w"), _i64("a", [0])])
    graph = from_proto(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])).graph
    assert fold_constant_layouts(graph) == ["u", "c"]
    np.testing.assert_array_equal(graph.initializers["c"].numpy(), W[:, 0])
    assert [n.op_type for n in graph.nodes] == ["Identity"]


@pytest.mark.parametrize(("node", "inits"), [
    (helper.make_node("Unsqueeze", ["w", "a"], ["c"]), [_i64("a", [0, 0])]),     # repeated axis
    (helper.make_node("Unsqueeze", ["w", "a"], ["c"]), [_i64("a", [5])]),        # out of range
    (helper.make_node("Reshape", ["w", "s"], ["c"]), [_i64("s", [5, -1])]),      # does not divide
    (helper.make_node("Reshape", ["w", "s"], ["c"]), [_i64("s", [-1, -1])]),
    (helper.make_node("Reshape", ["w", "s"], ["c"]), [_i64("s", [2, 3, 4, 0])]),  # copies a missing dim
    (helper.make_node("Squeeze", ["w", "a"], ["c"]), [_i64("a", [1])]),          # not a unit dimension
    (helper.make_node("Flatten", ["w"], ["c"], axis=4), []),
])
def test_an_invalid_layout_stays_a_node_for_its_kernel_to_name(node, inits):
    g = _graph(node, inits)
    assert fold_constant_layouts(g) == []
    assert [n.op_type for n in g.nodes] == [node.op_type, "Identity"]


def test_overridable_initializers_and_outputs_stay_nodes():
    node = helper.make_node("Identity", ["w"], ["c"])
    g = _graph(node, as_input=True)
    assert fold_constant_layouts(g) == []  # "w" may be fed (IR >= 4)
    assert fold_constant_layouts(_graph(node, as_input=True, ir=3)) == ["c"]  # before IR 4 no initializer can be fed
    assert fold_constant_layouts(_graph(helper.make_node("Identity", ["w"], ["c"]), out_is_output=True)) == []


def test_a_value_over_the_limit_stays_a_node():
    g = _graph(helper.make_node("Identity", ["w"], ["c"]))
    assert fold_constant_layouts(g, max_bytes=W.nbytes - 1) == []
    assert fold_constant_layouts(g, max_bytes=W.nbytes) == ["c"]
