"""fuse_repeat_kv: grouped-query attention's Unsqueeze(KV, 2) -> Expand([1, 1, g, 1, 1]) -> Reshape([b, kvh*g, t, d])
read by MatMul / FusedMatMul as B -> the group folded into A's rows (Reshape, matmul on KV, Reshape back), named
after the matmul, in topological order, computing what onnxruntime computes on the original; repeats that do
more than repeat along the new axis, merge other axes, are read elsewhere, or come from shapes rather than
constants stay."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_graph

B, KVH, G, S, T, D = 1, 2, 3, 4, 5, 8
H = KVH * G
_ONNX_DTYPE = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE, np.float16: TensorProto.FLOAT16}


def _init(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


def gqa(*, scores=False, expand=(1, 1, G, 1, 1), merge=(0, H, -1, D), axes=(2,), allowzero=0, extra_output=None,
        dtype=np.float32, shape_from_constants=False, fused_attrs=None):
    """X [B, H, S, n] @ repeat_kv(KV [B, KVH, T, D]); scores: FusedMatMul(Q, Krep, transB=1) else MatMul(P, Vrep).
    X is made after the repeat (the fused node must stay after it)."""
    inits = [_init("axes", list(axes)), _init("merge", list(merge))]
    nodes = [helper.make_node("Unsqueeze", ["KV", "axes"], ["u"], name="attn/repeat_kv/Unsqueeze")]
    if shape_from_constants:  # as torch's TorchScript exporter writes it: Where(Equal(s, -1 * ones), ones, s)
        inits += [_init("rep_target", list(expand)), _init("ones_shape", [5]), _init("minus_one", [-1])]
        nodes += [helper.make_node("ConstantOfShape", ["ones_shape"], ["ones"], name="attn/ConstantOfShape",
                                   value=numpy_helper.from_array(np.array([1], np.int64))),
                  helper.make_node("Mul", ["ones", "minus_one"], ["neg"], name="attn/Mul"),
                  helper.make_node("Equal", ["rep_target", "neg"], ["eq"], name="attn/Equal"),
                  helper.make_node("Where", ["eq", "ones", "rep_target"], ["rep_shape"], name="attn/Where")]
    else:
        inits.append(_init("rep_shape", list(expand)))
    nodes += [helper.make_node("Expand", ["u", "rep_shape"], ["e"], name="attn/repeat_kv/Expand"),
              helper.make_node("Reshape", ["e", "merge"], ["rep"], name="attn/repeat_kv/Reshape", allowzero=allowzero),
              helper.make_node("Relu", ["X0"], ["X"], name="attn/x")]
    if scores:
        attrs = {"transB": 1, "alpha": 0.5, **(fused_attrs or {})}
        nodes.append(helper.make_node("FusedMatMul", ["X", "rep"], ["Y"], name="attn/MatMul", domain="com.microsoft", **attrs))
    else:
        nodes.append(helper.make_node("MatMul", ["X", "rep"], ["Y"], name="attn/MatMul"))
    n = D if scores else T
    elem = _ONNX_DTYPE[dtype]
    vi = lambda name, shape: helper.make_tensor_value_info(name, elem, shape)  # noqa: E731
    outputs = [vi("Y", [B, H, S, T if scores else D])] + ([vi(extra_output, None)] if extra_output else [])
    graph = helper.make_graph(nodes, "g", [vi("X0", [B, H, S, n]), vi("KV", [B, KVH, T, D])], outputs, inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model = ort_graph.from_proto(proto)
    ort_graph.resolve_shapes(model, {})
    rng = np.random.default_rng(0)
    feeds = {"X0": rng.standard_normal((B, H, S, n)).astype(dtype), "KV": rng.standard_normal((B, KVH, T, D)).astype(dtype)}
    return proto, model, feeds


def run_both(proto, model, feeds):
    want = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    rewritten = ort_graph.to_proto(model).SerializeToString()
    got = ort.InferenceSession(rewritten, providers=["CPUExecutionProvider"]).run(None, feeds)
    return got, want


@pytest.mark.parametrize("scores", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_the_repeat_is_folded_into_the_rows_in_topological_order(scores, dtype):
    proto, model, feeds = gqa(scores=scores, dtype=dtype)
    records = ort_graph.fuse_repeat_kv(model.graph)
    base = "attn/MatMul/RepeatKVFusion"
    assert [(r.fusion, r.replaced, r.created) for r in records] == [(
        "RepeatKVFusion", ("attn/repeat_kv/Unsqueeze", "attn/repeat_kv/Expand", "attn/repeat_kv/Reshape", "attn/MatMul"),
        (f"{base}/Reshape", base, f"{base}/Reshape_1"))]
    graph = model.graph
    assert [n.op_type for n in graph.nodes] == ["Relu", "Reshape", "FusedMatMul" if scores else "MatMul", "Reshape"]
    mm = graph.node_by_name(base)
    assert mm.inputs[1] == "KV" and graph.values[mm.inputs[0]].shape == (B, KVH, G * S, D if scores else T)
    if scores:
        assert (mm.domain, mm.attr("transB"), mm.attr("alpha")) == ("com.microsoft", 1, 0.5)
    assert graph.values[mm.outputs[0]].shape == (B, KVH, G * S, T if scores else D)
    assert ort_graph.topological_order(graph) is not None
    assert "rep_shape" not in {i for n in graph.nodes for i in n.inputs}
    got, want = run_both(proto, model, feeds)
    tol = 2e-3 if dtype == np.float16 else 1e-6
    np.testing.assert_allclose(got[0], want[0], rtol=tol, atol=tol)


def test_a_target_shape_computed_from_constants_is_folded_and_its_subgraph_removed():
    proto, model, feeds = gqa(shape_from_constants=True)
    (record,) = ort_graph.fuse_repeat_kv(model.graph)
    assert {"attn/Where", "attn/Equal", "attn/Mul", "attn/ConstantOfShape"} <= set(record.replaced)
    assert [n.op_type for n in model.graph.nodes] == ["Relu", "Reshape", "MatMul", "Reshape"]
    got, want = run_both(proto, model, feeds)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)


def test_a_full_static_target_and_a_static_merge_are_accepted():
    proto, model, feeds = gqa(expand=(B, KVH, G, T, D), merge=(B, H, T, D), allowzero=1)
    assert len(ort_graph.fuse_repeat_kv(model.graph)) == 1
    got, want = run_both(proto, model, feeds)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kwargs", [
    {"expand": (1, 1, G, 1, 2)},  # also broadcasts the head dimension: not a repeat of KV
    {"expand": (2, 1, G, 1, 1), "merge": (2, H, -1, D)},  # also broadcasts the batch
    {"expand": (1, 1, G, T + 1, 1)},  # an extent KV does not have
    {"axes": (1,), "expand": (1, G, 1, 1, 1), "merge": (0, H, -1, D)},  # the group on another axis
    {"merge": (0, H, 0, D)},  # 0 copies the group extent, not the sequence
    {"merge": (0, H, -1, D), "allowzero": 1, "expand": (1, 1, G, 1, 1)},  # allowzero: 0 is an empty axis
    {"extra_output": "e"},  # the expanded block is read elsewhere
    {"extra_output": "rep"},
    {"scores": True, "fused_attrs": {"transA": 1}},
    {"scores": True, "fused_attrs": {"transBatchB": 1}},
])
def test_what_is_not_exactly_a_kv_repeat_stays(kwargs):
    _, model, _ = gqa(**kwargs)
    ops = [n.op_type for n in model.graph.nodes]
    assert ort_graph.fuse_repeat_kv(model.graph) == []
    assert [n.op_type for n in model.graph.nodes] == ops


def test_a_target_shape_read_from_a_shape_node_stays():
    # a Shape node's value follows the run's shapes (which may differ from the resolved ones): not a proof
    _, model, _ = gqa()
    graph = model.graph
    expand = graph.node_by_name("attn/repeat_kv/Expand")
    graph.remove_node(expand)
    graph.add_node("Shape", ["u"], ["u_shape"], name="attn/Shape", position=1)
    graph.initializers["g_axis"] = ort_graph.Tensor.from_numpy("g_axis", np.array([1, 1, G, 1, 1], np.int64))
    graph.add_node("Mul", ["u_shape", "g_axis"], ["rep_shape2"], name="attn/shape_mul", position=2)
    graph.add_node("Expand", ["u", "rep_shape2"], ["e"], name="attn/repeat_kv/Expand", position=3)
    ort_graph.resolve_shapes(model, {})
    assert graph.values["e"].shape == (B, KVH, G, T, D)
    assert ort_graph.fuse_repeat_kv(graph) == []


def test_only_nodes_in_the_given_set_take_part():
    _, model, _ = gqa()
    without_expand = [n for n in model.graph.nodes if n.op_type != "Expand"]
    assert ort_graph.fuse_repeat_kv(model.graph, without_expand) == []
    assert ort_graph.fuse_repeat_kv(model.graph, list(model.graph.nodes))
