"""Constant nodes become initializers at load, as in ONNX Runtime."""

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from ort_graph import constants_to_initializers, from_proto


def _model(extra_nodes=(), outputs=("y",)):
    nodes = [helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "v")),
             helper.make_node("Constant", [], ["k"], value_ints=[1, 2]),
             helper.make_node("Add", ["x", "c"], ["y"]), *extra_nodes]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs])
    return from_proto(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def test_constants_become_initializers_with_their_values():
    model = _model()
    made = constants_to_initializers(model.graph)
    assert made == ["c", "k"] and [n.op_type for n in model.graph.nodes] == ["Add"]
    np.testing.assert_array_equal(model.graph.initializers["c"].numpy(), np.arange(6, dtype=np.float32).reshape(2, 3))
    np.testing.assert_array_equal(model.graph.initializers["k"].numpy(), [1, 2])
    assert model.graph.values["c"].shape == (2, 3) and model.graph.values["c"].producer is None
    assert model.graph.node_by_name(model.graph.nodes[0].name).inputs == ["x", "c"]


def test_a_constant_that_is_a_graph_output_stays_a_node():
    model = _model([helper.make_node("Constant", [], ["z"], value_float=2.0)], outputs=("y", "z"))
    assert constants_to_initializers(model.graph) == ["c", "k"]
    assert [n.op_type for n in model.graph.nodes] == ["Add", "Constant"]


def test_rename_outer_reference_reaches_nested_subgraphs_but_not_shadowed_names():
    from onnx import TensorProto, helper

    inner = helper.make_graph([helper.make_node("Identity", ["v"], ["w"])], "inner", [],
                              [helper.make_tensor_value_info("w", TensorProto.FLOAT, None)])
    # a subgraph initializer may shadow an outer name (a node output may not: onnx.checker's SSA rule)
    shadow = helper.make_graph([helper.make_node("Identity", ["v"], ["w2"])], "shadow", [],
                               [helper.make_tensor_value_info("w2", TensorProto.FLOAT, None)],
                               [helper.make_tensor("v", TensorProto.FLOAT, [], [1.0])])
    body = helper.make_graph([helper.make_node("If", ["c"], ["z"], then_branch=inner, else_branch=shadow)], "body", [],
                             [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)])
    outer = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=body, else_branch=body)], "g",
                              [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                               helper.make_tensor_value_info("v", TensorProto.FLOAT, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = from_proto(helper.make_model(outer, opset_imports=[helper.make_opsetid("", 17)]))
    node = model.graph.nodes[0]
    assert "v" in node.implicit_inputs()
    for g in node.subgraphs:
        g.rename_outer_reference("v", "v/copy")
    assert "v/copy" in node.implicit_inputs() and "v" not in node.implicit_inputs()
    then_if = node.attributes["then_branch"].value.nodes[0]
    assert then_if.attributes["then_branch"].value.nodes[0].inputs == ["v/copy"]  # nested: renamed
    assert then_if.attributes["else_branch"].value.nodes[0].inputs == ["v"]  # defined in that subgraph: untouched


def _fill_model(shape, value=None, shape_dtype=np.int64, out_is_output=False):
    from onnx import TensorProto as T

    attrs = {} if value is None else {"value": numpy_helper.from_array(np.array([value]), "v")}
    nodes = [helper.make_node("ConstantOfShape", ["s"], ["w"], name="fill", **attrs),
             helper.make_node("Add", ["x", "w"], ["y"], name="add")]
    outs = [helper.make_tensor_value_info("y", T.FLOAT, None)] + (
        [helper.make_tensor_value_info("w", T.FLOAT, None)] if out_is_output else [])
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [2, 3])], outs,
                          [numpy_helper.from_array(np.array(shape, shape_dtype), "s")])
    return from_proto(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def test_a_fill_of_a_constant_shape_becomes_an_initializer_as_onnxruntime_folds_it():
    from ort_graph import fold_constant_of_shape

    model = _fill_model([2, 3], np.float32(1.5))
    assert fold_constant_of_shape(model.graph) == ["w"]
    assert [n.op_type for n in model.graph.nodes] == ["Add"]
    w = model.graph.initializers["w"]
    assert w.dtype == TensorProto.FLOAT and w.dims == (2, 3) and model.graph.values["w"].shape == (2, 3)
    np.testing.assert_array_equal(w.numpy(), np.full((2, 3), 1.5, np.float32))
    np.testing.assert_array_equal(numpy_helper.to_array(w.to_proto()), w.numpy())  # saves like any initializer
    default = _fill_model([4])  # no value attribute: float32 zeros
    fold_constant_of_shape(default.graph)
    np.testing.assert_array_equal(default.graph.initializers["w"].numpy(), np.zeros(4, np.float32))


def test_fills_that_cannot_or_should_not_fold_stay_nodes():
    from ort_graph import fold_constant_of_shape

    for model in (_fill_model([2, -3], np.float32(1)), _fill_model([2, 3], np.float32(1), shape_dtype=np.int32),
                  _fill_model([2, 3], np.float32(1), out_is_output=True)):
        assert fold_constant_of_shape(model.graph) == []
        assert "ConstantOfShape" in [n.op_type for n in model.graph.nodes]
    big = _fill_model([1 << 20, 1 << 20], np.float32(1))  # 4 TiB: never materialised, left to the plan to refuse
    assert fold_constant_of_shape(big.graph) == [] and "w" not in big.graph.initializers
