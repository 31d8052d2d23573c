"""Input element types against the op schemas (`check_input_types`, run by `resolve_shapes`): what onnxruntime
refuses at load is refused here, naming the node and the inputs; what it accepts passes."""

import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import ort_graph

F, I32, I64 = TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64


def _model(nodes, inputs, outputs, inits=(), opset=17, functions=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("local", 1)],
                             ir_version=8, functions=list(functions))


def _resolve(proto):
    m = ort_graph.from_proto(proto)
    ort_graph.resolve_shapes(m)
    return m


def _ort_refuses(proto) -> bool:
    so = ort.SessionOptions()
    so.log_severity_level = 4
    try:
        ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - any refusal at load
        return True
    return False


def _add(w_type):
    w = helper.make_tensor("w", w_type, [4], [1, 2, 3, 4])
    return _model([helper.make_node("Add", ["x", "w"], ["y"], name="the_add")],
                  [helper.make_tensor_value_info("x", F, [4])], [helper.make_tensor_value_info("y", F, [4])], [w])


@pytest.mark.parametrize("w_type", [I32, I64, TensorProto.DOUBLE])
def test_one_type_parameter_bound_to_two_types_is_refused(w_type):
    proto = _add(w_type)
    with pytest.raises(ort_graph.InputTypeError, match=r"'the_add' \(Add\).*'x' \(tensor\(float\)\).*'w'.*Cast"):
        _resolve(proto)
    assert _ort_refuses(proto)


def test_the_same_types_pass():
    _resolve(_add(F))


def test_a_type_the_parameter_does_not_allow_is_refused():
    shape = helper.make_tensor("s", I32, [2], [2, 2])  # Reshape's shape is tensor(int64)
    proto = _model([helper.make_node("Reshape", ["x", "s"], ["y"], name="r")],
                   [helper.make_tensor_value_info("x", F, [4])], [helper.make_tensor_value_info("y", F, [2, 2])],
                   [shape])
    with pytest.raises(ort_graph.InputTypeError, match=r"input 1 's' is tensor\(int32\).*allowed: tensor\(int64\)"):
        _resolve(proto)
    assert _ort_refuses(proto)


def test_a_homogeneous_variadic_is_checked_and_a_heterogeneous_one_is_not():
    concat = _model([helper.make_node("Concat", ["a", "b"], ["y"], axis=0, name="cat")],
                    [helper.make_tensor_value_info("a", F, [2]), helper.make_tensor_value_info("b", I64, [2])],
                    [helper.make_tensor_value_info("y", F, [4])])
    with pytest.raises(ort_graph.InputTypeError, match="'cat' \\(Concat\\)"):
        _resolve(concat)
    assert _ort_refuses(concat)
    # Loop's carried values (V) are heterogeneous: a float and an int64 state are fine
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]), helper.make_node("Identity", ["f_in"], ["f_out"]),
         helper.make_node("Identity", ["n_in"], ["n_out"])], "body",
        [helper.make_tensor_value_info("i", I64, []), helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("f_in", F, [2]), helper.make_tensor_value_info("n_in", I64, [2])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []), helper.make_tensor_value_info("f_out", F, [2]),
         helper.make_tensor_value_info("n_out", I64, [2])])
    trip = helper.make_tensor("trip", I64, [], [2])
    loop = _model([helper.make_node("Loop", ["trip", "", "f", "n"], ["f2", "n2"], body=body)],
                  [helper.make_tensor_value_info("f", F, [2]), helper.make_tensor_value_info("n", I64, [2])],
                  [helper.make_tensor_value_info("f2", F, [2]), helper.make_tensor_value_info("n2", I64, [2])],
                  [trip])
    _resolve(loop)
    assert not _ort_refuses(loop)


def test_subgraph_nodes_are_checked():
    def branch(name, w_type):
        w = helper.make_tensor(f"{name}_w", w_type, [2], [1, 2])
        return helper.make_graph([helper.make_node("Mul", ["x", f"{name}_w"], [f"{name}_y"], name=f"{name}_mul")],
                                 name, [], [helper.make_tensor_value_info(f"{name}_y", F, [2])], [w])
    proto = _model([helper.make_node("If", ["c"], ["y"], then_branch=branch("t", F), else_branch=branch("e", I32))],
                   [helper.make_tensor_value_info("c", TensorProto.BOOL, []), helper.make_tensor_value_info("x", F, [2])],
                   [helper.make_tensor_value_info("y", F, [2])])
    with pytest.raises(ort_graph.InputTypeError, match="'e_mul' \\(Mul\\)"):
        _resolve(proto)


def test_custom_domains_and_local_functions_are_not_checked():
    custom = _model([helper.make_node("Add", ["x", "w"], ["y"], domain="my.ops", name="custom_add")],
                    [helper.make_tensor_value_info("x", F, [4]), helper.make_tensor_value_info("w", I32, [4])],
                    [helper.make_tensor_value_info("y", F, [4])])
    custom.opset_import.append(helper.make_opsetid("my.ops", 1))
    m = ort_graph.from_proto(custom)
    ort_graph.check_input_types(m)  # no schema: the op's own kernel decides
    fn = helper.make_function("local", "Add", ["a", "b"], ["c"],
                              [helper.make_node("Cast", ["b"], ["bf"], to=F), helper.make_node("Add", ["a", "bf"], ["c"])],
                              [helper.make_opsetid("", 17)])
    local = _model([helper.make_node("Add", ["x", "w"], ["y"], domain="local", name="fn_add")],
                   [helper.make_tensor_value_info("x", F, [4]), helper.make_tensor_value_info("w", I32, [4])],
                   [helper.make_tensor_value_info("y", F, [4])], functions=[fn])
    ort_graph.check_input_types(ort_graph.from_proto(local))


def test_unknown_element_types_are_not_guessed():
    m = ort_graph.from_proto(_add(F))
    m.graph.values["w"].dtype = 0
    ort_graph.check_input_types(m)
    m.graph.values["w"].dtype = I64
    with pytest.raises(ort_graph.InputTypeError):
        ort_graph.check_input_types(m)
