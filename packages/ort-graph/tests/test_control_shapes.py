"""Control-flow output shapes through the bodies (If merged, Loop with its trip count, Scan with its sequence
length), bodies resolved with the shapes the node feeds them, and the weights the bodies hold."""

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_graph
from ort_graph import zoo


def _resolved(proto, dims):
    m = ort_graph.from_proto(proto)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = ort_graph.resolve_shapes(m, dims)
    return m, report


@pytest.mark.parametrize(("make", "dims", "outputs"), [
    (zoo.if_weights_proto, {"batch": 3}, {"y": (3, 256)}),
    (zoo.loop_proto, {"batch": 3}, {"h": (3, 64), "ys": (5, 3, 64)}),
    (zoo.scan_proto, {"batch": 3, "sequence": 7}, {"s": (3, 32), "ys": (3, 7, 32)}),
    (zoo.nested_proto, {"batch": 3}, {"h": (3, 32), "ys": (3, 3, 32)}),
])
def test_outputs_and_every_body_value_are_static_when_the_inputs_are(make, dims, outputs):
    m, report = _resolved(make(), dims)
    assert {o: m.graph.values[o].shape for o in m.graph.outputs} == outputs
    assert report.unresolved_node is None
    for node in m.graph.walk():
        for body in node.subgraphs:  # declared with 'batch', resolved with the node's shapes
            assert all(ort_graph.is_static(v.shape) for v in body.values.values()), body.name


def test_without_dims_the_outputs_keep_the_inputs_symbols():
    m, _ = _resolved(zoo.loop_proto(), {})
    assert m.graph.values["ys"].shape == (5, "batch", 64)


def _if(then_shape, else_shape):
    def branch(name, shape):
        return helper.make_graph([helper.make_node("ConstantOfShape", [f"{name}_s"], [f"{name}_y"])], name, [],
                                 [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, None)],
                                 initializer=[numpy_helper.from_array(np.array(shape, np.int64), f"{name}_s")])
    g = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=branch("a", then_shape),
                                            else_branch=branch("b", else_shape), name="if")],
                          "g", [helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(("then_shape", "else_shape", "merged"), [
    ([2, 3], [2, 3], (2, 3)),
    ([2, 3], [2, 5], (2, "unk__if_o0_d1_data_dependent")),
    ([2, 3], [2, 3, 1], None),
])
def test_if_merges_its_branches_outputs(then_shape, else_shape, merged):
    m, report = _resolved(_if(then_shape, else_shape), {})
    assert m.graph.values["y"].shape == merged
    assert report.unresolved_node == (None if merged == (2, 3) else "if")


def test_branches_that_disagree_are_named_as_the_reason_no_static_plan_exists():
    m, _ = _resolved(_if([2, 3], [2, 5]), {})
    hint = ort_graph.unresolved_hint(m.graph.node_by_name("if"))
    assert "depends on the data" in hint and "session.allow_unplanned_shapes=1" in hint


def test_a_data_dependent_trip_count_stays_unknown_and_names_the_loop():
    m, report = _resolved(zoo.early_exit_loop_proto(), {"batch": 2})
    lead = m.graph.values["ys"].shape[0]
    assert isinstance(lead, str) and lead.startswith("unk__")  # the file's 'ys_dim_0' does not size it
    assert report.unresolved_node == "/Loop"
    hint = ort_graph.unresolved_hint(m.graph.node_by_name("/Loop"))
    assert "data-dependent trip count" in hint and "constant trip count M" in hint


def test_a_condition_input_that_is_not_constant_makes_the_trip_count_data_dependent():
    proto = zoo.loop_proto()
    loop = proto.graph.node[0]
    loop.input[1] = "keep_going"
    proto.graph.input.append(helper.make_tensor_value_info("keep_going", TensorProto.BOOL, []))
    m, report = _resolved(proto, {"batch": 2})
    assert not isinstance(m.graph.values["ys"].shape[0], int)
    assert m.graph.values["h"].shape == (2, 64)  # carried values stay sized
    assert report.unresolved_node == "/Loop"


def test_body_weights_are_initializers_and_constants_nested_bodies_included():
    m = ort_graph.from_proto(zoo.if_weights_proto(hidden=16))
    node = m.graph.node_by_name("/If")
    keys = {w.key: w.nbytes for w in ort_graph.body_weights(node)}
    assert keys == {"/If/then_branch//If/then/Constant": 16 * 16 * 4, "/If/else_branch/else_w": 16 * 16 * 4}
    assert ort_graph.body_weight_bytes(node) == 2 * 16 * 16 * 4
    nested = ort_graph.from_proto(zoo.nested_proto(hidden=8)).graph.node_by_name("/Loop")
    weights = ort_graph.body_weights(nested)
    assert sorted(w.key for w in weights) == ["/Loop/body//Loop/body/If/else_branch/else_w",
                                              "/Loop/body//Loop/body/If/then_branch/then_w"]
    assert all(w.numpy().shape == (8, 8) for w in weights)
    assert ort_graph.body_weights(m.graph.node_by_name("/ReduceSum")) == []
