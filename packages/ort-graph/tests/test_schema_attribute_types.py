"""Load-time refusals onnxruntime makes too: an input of element type UNDEFINED, a node without op_type, an
attribute whose type is not its schema's (standard operators: onnx.defs; contrib operators: onnxruntime's)."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import AttributeProto, TensorProto, helper

import ort_graph
from ort_graph._contrib_attrs import CONTRIB_ATTRIBUTE_TYPES

X = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
Y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
OPSETS = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]


def _model(node, inputs=(X,)):
    return helper.make_model(helper.make_graph([node], "g", list(inputs), [Y]), opset_imports=OPSETS)


def _with(node, name, value):
    node.attribute.append(helper.make_attribute(name, value))
    return node


def _gqa(**attrs):
    return helper.make_node("GroupQueryAttention", ["x", "x", "x"], ["y"], name="gqa", domain="com.microsoft", **attrs)


@pytest.mark.parametrize("model, says", [
    (_model(helper.make_node("Identity", ["x"], ["y"], name="id"), [helper.make_tensor_value_info("x", 0, [2])]),
     "input 'x' of graph 'g' (graph) declares element type UNDEFINED"),
    (_model(helper.make_node("", ["x"], ["y"], name="blank")), "node 'blank' () in graph 'g' (graph) has an empty op_type"),
    (_model(_with(helper.make_node("Transpose", ["x"], ["y"], name="tp"), "perm", "ab")),
     "attribute 'perm' of node 'tp' (Transpose) in graph 'g' (graph) is of type STRING (b'ab'), but Transpose (opset 13) "
     "declares it INTS"),
    (_model(helper.make_node("Transpose", ["x"], ["y"], name="tp", perm=[1.5, 0.0])), "is of type FLOATS ([1.5, 0.0])"),
    (_model(helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=1.5)), "Softmax (opset 13) declares it INT"),
    (_model(_with(helper.make_node("Gemm", ["x", "x"], ["y"], name="gm"), "alpha", "a")), "declares it FLOAT"),
    (_model(_gqa(num_heads=4.0, kv_num_heads=2)),
     "attribute 'num_heads' of node 'gqa' (GroupQueryAttention) in graph 'g' (graph) is of type FLOAT (4.0), but "
     "com.microsoft::GroupQueryAttention (onnxruntime's schema) declares it INT"),
    (_model(_with(_gqa(num_heads=4, kv_num_heads=2), "do_rotary", "yes")), "attribute 'do_rotary'"),
    (_model(_gqa(num_heads=4, kv_num_heads=2, softcap=[1.0])), "is of type FLOATS ([1.0])"),
])
def test_models_onnxruntime_refuses_are_a_model_load_error_naming_the_part(model, says):
    with pytest.raises(ort_graph.ModelLoadError) as info:
        ort_graph.load(model.SerializeToString())
    assert says in str(info.value)
    with pytest.raises(Exception):  # noqa: B017 - onnxruntime's error types share no useful base
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def test_attributes_of_the_schema_type_still_load():
    for node in (helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0]), helper.make_node("Softmax", ["x"], ["y"], axis=1),
                 _gqa(num_heads=4, kv_num_heads=2, scale=0.5, do_rotary=0)):
        ort_graph.load(_model(node).SerializeToString())


def test_the_contrib_table_is_onnxruntimes_schemas():
    from onnxruntime.capi.onnxruntime_pybind11_state import get_all_operator_schema

    names = {v: k for k, v in AttributeProto.AttributeType.items()}
    theirs = {(s.domain, s.name): {k: names[int(a.type)] for k, a in s.attributes.items()}
              for s in get_all_operator_schema() if (s.domain, s.name) in CONTRIB_ATTRIBUTE_TYPES}
    ours = {key: {k: names[v] for k, v in attrs.items()} for key, attrs in CONTRIB_ATTRIBUTE_TYPES.items()}
    assert ours == theirs


def test_a_zero_element_input_is_not_an_undefined_one():
    model = _model(helper.make_node("Identity", ["x"], ["y"]), [helper.make_tensor_value_info("x", TensorProto.FLOAT, [0])])
    loaded = ort_graph.load(model.SerializeToString())
    assert loaded.graph.values["x"].dtype == TensorProto.FLOAT and np.prod(loaded.graph.values["x"].shape) == 0
