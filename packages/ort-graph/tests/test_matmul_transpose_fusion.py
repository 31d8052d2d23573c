"""fuse_matmul_transpose: MatMul reading a Transpose that swaps the last two axes -> com.microsoft
FusedMatMul(transA/transB=1), named after the MatMul, placed where the MatMul was (the other operand may be made
after the Transpose); Transposes read elsewhere, other permutations and nodes outside the set stay."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import ort_graph


def model_of(nodes, inputs, output_shape, extra_outputs=()):
    vi = lambda n, s: helper.make_tensor_value_info(n, TensorProto.FLOAT, s)  # noqa: E731
    graph = helper.make_graph(nodes, "g", [vi(n, s) for n, s in inputs],
                              [vi("Y", output_shape), *(vi(n, None) for n in extra_outputs)])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model = ort_graph.from_proto(proto)
    ort_graph.resolve_shapes(model, {})
    return proto, model


def attention_scores(perm=(0, 1, 3, 2), extra_output=False):
    # K's Transpose comes before Q's producer: the fused node must not move before Q is made
    nodes = [helper.make_node("Transpose", ["K"], ["KT"], perm=list(perm), name="attn/Transpose"),
             helper.make_node("Relu", ["Q0"], ["Q"], name="attn/q"),
             helper.make_node("MatMul", ["Q", "KT"], ["Y"], name="attn/MatMul")]
    out = [1, 2, 3, 5]
    return model_of(nodes, [("Q0", [1, 2, 3, 4]), ("K", [1, 2, 5, 4] if perm == (0, 1, 3, 2) else [1, 4, 2, 5])],
                    out, ["KT"] if extra_output else ())


def run_both(proto, model, feeds):
    want = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    fused = ort_graph.to_proto(model).SerializeToString()
    got = ort.InferenceSession(fused, providers=["CPUExecutionProvider"]).run(None, feeds)
    return got, want


def test_the_key_transpose_is_fused_into_transb_in_topological_order():
    proto, model = attention_scores()
    records = ort_graph.fuse_matmul_transpose(model.graph)
    assert [(r.fusion, r.replaced, r.created) for r in records] == [
        ("MatMulTransposeFusion", ("attn/Transpose", "attn/MatMul"), ("attn/MatMul/MatMulTransposeFusion",))]
    assert [n.op_type for n in model.graph.nodes] == ["Relu", "FusedMatMul"]
    fused = model.graph.nodes[1]
    assert (fused.domain, fused.inputs, fused.attr("transB"), fused.attr("transA")) == ("com.microsoft", ["Q", "K"], 1, None)
    assert ort_graph.topological_order(model.graph) is not None
    rng = np.random.default_rng(0)
    feeds = {"Q0": rng.standard_normal((1, 2, 3, 4), np.float32), "K": rng.standard_normal((1, 2, 5, 4), np.float32)}
    got, want = run_both(proto, model, feeds)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=1e-6)


def test_both_operands_transposed():
    nodes = [helper.make_node("Transpose", ["A"], ["AT"], perm=[1, 0], name="ta"),
             helper.make_node("Transpose", ["B"], ["BT"], perm=[1, 0], name="tb"),
             helper.make_node("MatMul", ["AT", "BT"], ["Y"], name="mm")]
    proto, model = model_of(nodes, [("A", [4, 3]), ("B", [5, 4])], [3, 5])
    (record,) = ort_graph.fuse_matmul_transpose(model.graph)
    (node,) = model.graph.nodes
    assert (node.attr("transA"), node.attr("transB"), node.inputs) == (1, 1, ["A", "B"])
    rng = np.random.default_rng(1)
    feeds = {"A": rng.standard_normal((4, 3), np.float32), "B": rng.standard_normal((5, 4), np.float32)}
    got, want = run_both(proto, model, feeds)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kwargs", [{"perm": (0, 2, 1, 3)}, {"extra_output": True}])
def test_other_permutations_and_transposes_read_elsewhere_stay(kwargs):
    _, model = attention_scores(**kwargs)
    assert ort_graph.fuse_matmul_transpose(model.graph) == []
    assert [n.op_type for n in model.graph.nodes] == ["Transpose", "Relu", "MatMul"]


def test_only_nodes_in_the_given_set_take_part():
    _, model = attention_scores()
    matmul_only = [n for n in model.graph.nodes if n.op_type == "MatMul"]
    assert ort_graph.fuse_matmul_transpose(model.graph, matmul_only) == []
    assert ort_graph.fuse_matmul_transpose(model.graph, list(model.graph.nodes))


def test_detached_nodes_leave_the_list_in_one_pass_and_replacements_take_their_place():
    _, model = attention_scores()
    graph = model.graph
    transpose, relu, matmul = graph.nodes
    graph.detach_node(transpose)
    graph.detach_node(matmul)
    assert graph.nodes == [transpose, relu, matmul]  # still listed until compact()
    assert graph.values["KT"].producer is None and matmul not in graph.values["Q"].consumers
    new = graph.add_node("Identity", ["Q"], ["Y2"], name="new")
    graph.compact({id(matmul): [new]})
    assert graph.nodes == [relu, new]
    graph.compact()  # nothing detached: unchanged
    assert graph.nodes == [relu, new]


def test_trans_a_false_fuses_only_the_b_transpose():
    """A provider whose MatMul kernel takes transB only (the CPU's C kernel) keeps A's Transpose as it is."""
    vi = lambda n, s: helper.make_tensor_value_info(n, TensorProto.FLOAT, s)  # noqa: E731
    nodes = [helper.make_node("Transpose", ["A"], ["At"], name="ta", perm=[0, 2, 1]),
             helper.make_node("Transpose", ["B"], ["Bt"], name="tb", perm=[0, 2, 1]),
             helper.make_node("MatMul", ["At", "Bt"], ["Y"], name="mm")]
    proto = helper.make_model(helper.make_graph(nodes, "g", [vi("A", [2, 5, 3]), vi("B", [2, 4, 5])], [vi("Y", [2, 3, 4])]),
                              opset_imports=[helper.make_opsetid("", 17)])
    model = ort_graph.from_proto(proto)
    ort_graph.resolve_shapes(model, {})
    (record,) = ort_graph.fuse_matmul_transpose(model.graph, trans_a=False)
    assert record.replaced == ("tb", "mm")
    ops = {n.name: n for n in model.graph.nodes}
    fused = ops["mm/MatMulTransposeFusion"]
    assert "ta" in ops and fused.inputs == ["At", "B"] and fused.attr("transB") == 1 and fused.attr("transA") is None
