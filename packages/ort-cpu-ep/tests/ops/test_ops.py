"""Focused CPU kernel tests: hot ops against onnxruntime on one-node models, and honest declines."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper

import ort_graph
from ort_cpu_ep.conformance import claim
from ort_cpu_ep.ops import find, run_graph

ort = pytest.importorskip("onnxruntime")


def _model(op: str, inputs: dict[str, np.ndarray], n_out: int = 1, opset: int = 21, **attrs) -> onnx.ModelProto:
    node = helper.make_node(op, list(inputs), [f"y{i}" for i in range(n_out)], **attrs)
    g = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info(f"y{i}", 0, None) for i in range(n_out)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return onnx.shape_inference.infer_shapes(m)


def _both(m: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> tuple[list, list]:
    model = ort_graph.from_proto(m)
    assert claim(model) == []
    ours = run_graph(model.graph, feeds, opsets=model.opset_imports)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    theirs = sess.run(None, feeds)
    return [ours[o] for o in model.graph.outputs], theirs


rng = np.random.default_rng(0)
f32 = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731


@pytest.mark.parametrize("op,inputs,attrs", [
    ("MatMul", {"a": f32(2, 3, 8, 16), "b": f32(16, 5)}, {}),
    ("Gemm", {"a": f32(6, 4), "b": f32(5, 6), "c": f32(5)}, {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0}),
    ("Conv", {"x": f32(2, 4, 9, 7), "w": f32(6, 2, 3, 3), "b": f32(6)},
     {"group": 2, "strides": [2, 1], "pads": [1, 0, 2, 1], "dilations": [1, 2]}),
    ("Conv", {"x": f32(1, 3, 10), "w": f32(4, 3, 3)}, {"auto_pad": "SAME_LOWER", "strides": [3]}),
    ("ConvTranspose", {"x": f32(1, 2, 5, 4), "w": f32(2, 3, 3, 2)}, {"strides": [2, 3], "output_padding": [1, 0]}),
    ("Softmax", {"x": f32(3, 4, 33)}, {"axis": 1}),
    ("LayerNormalization", {"x": f32(2, 5, 16), "s": f32(16), "b": f32(16)}, {"epsilon": 1e-3}),
    ("MaxPool", {"x": f32(1, 2, 9, 9)}, {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ("AveragePool", {"x": f32(1, 2, 8, 8)}, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 0}),
    ("Resize", {"x": f32(1, 2, 4, 5), "roi": np.zeros(0, np.float32), "scales": np.array([1, 1, 1.5, 0.6], np.float32)},
     {"mode": "linear"}),
    ("Where", {"c": rng.random((3, 1)) > 0.5, "a": f32(3, 4), "b": f32(4)}, {}),
    ("ReduceSum", {"x": f32(3, 4, 5), "axes": np.array([0, 2], np.int64)}, {"keepdims": 0}),
    ("Resize", {"x": f32(1, 1, 1, 6), "roi": np.zeros(0, np.float32), "scales": np.array([1, 1, 1, 0.6], np.float32)},
     {"mode": "nearest", "nearest_mode": "floor"}),  # float32 coordinates: (1 + 0.5) / 0.6 - 0.5 == 2
    ("Pad", {"x": f32(5, 6), "p": np.array([-1, 2, 1, -2], np.int64)}, {"mode": "reflect"}),
    ("Slice", {"x": f32(5, 6, 7), "s": np.array([4, -1]), "e": np.array([0, -100]), "a": np.array([2, 0]),
               "st": np.array([-2, -1])}, {}),
    ("ScatterElements", {"x": f32(4, 3), "i": np.array([[1, 0, 2], [1, 3, 0]]), "u": f32(2, 3)},
     {"axis": 0, "reduction": "mul"}),
    ("TopK", {"x": np.array([[1, 3, 3, 2, 3, 1]], np.float32), "k": np.array([4])}, {}),
    ("Unique", {"x": np.array([3, 1, 3, 0, 1, 5], np.int64)}, {"sorted": 0}),
    ("Div", {"a": np.array([-7, 7, -7, 7], np.int32), "b": np.array([2, -2, -2, 2], np.int32)}, {}),
    ("Mod", {"a": np.array([-7, 7, -7, 7], np.int32), "b": np.array([3, -3, -3, 3], np.int32)}, {}),
    ("GatherND", {"x": f32(2, 3, 4), "i": np.array([[[1], [0]], [[2], [1]]])}, {"batch_dims": 1}),
    ("Conv", {"x": np.zeros((0, 3, 5, 5), np.float32), "w": f32(4, 3, 3, 3)}, {}),  # zero-size batch
    ("MaxPool", {"x": np.zeros((0, 3, 5, 5), np.float32)}, {"kernel_shape": [2, 2]}),
    ("MatMul", {"a": np.zeros((0, 2, 4), np.float32), "b": f32(4, 3)}, {}),
    ("NonMaxSuppression", {"b": np.abs(f32(1, 6, 4)), "s": np.abs(f32(1, 2, 6)), "m": np.array([3]),
                           "i": np.array([0.3], np.float32), "t": np.array([0.1], np.float32)}, {}),
])
def test_op_matches_onnxruntime(op, inputs, attrs):
    n_out = {"TopK": 2, "Unique": 4}.get(op, 1)
    ours, theirs = _both(_model(op, inputs, n_out=n_out, **attrs), inputs)
    for a, b in zip(ours, theirs):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_attention_gqa_causal_matches_onnxruntime():
    q, k, v = f32(2, 8, 6, 16), f32(2, 2, 6, 16), f32(2, 2, 6, 16)
    pk, pv = f32(2, 2, 3, 16), f32(2, 2, 3, 16)
    feeds = {"q": q, "k": k, "v": v, "m": np.zeros((6, 9), np.float32), "pk": pk, "pv": pv}
    ours, theirs = _both(_model("Attention", feeds, n_out=3, opset=23, is_causal=1), feeds)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def _decline(op, inputs, opset=21, **attrs):
    m = ort_graph.from_proto(_model(op, inputs, opset=opset, **attrs))
    return claim(m)


@pytest.mark.parametrize("op,inputs,opset,attrs,needle", [
    ("Mod", {"a": f32(3), "b": f32(3)}, 13, {"fmod": 0}, "fmod=0"),
    ("Pad", {"x": f32(3, 3), "p": np.array([1, 1, 1, 1], np.int64)}, 18, {"mode": "wrap"}, "wrap"),
    ("Add", {"a": np.array(["x"], object), "b": np.array(["y"], object)}, 21, {}, "STRING"),
    ("Relu", {"x": np.zeros(3, np.uint32)}, 21, {}, "UINT32"),
    ("BitShift", {"a": np.zeros(3, np.int32), "b": np.zeros(3, np.int32)}, 21, {"direction": "LEFT"}, "INT32"),
])
def test_unsupported_nodes_decline_with_reason(op, inputs, opset, attrs, needle):
    reasons = _decline(op, inputs, opset, **attrs)
    assert reasons and needle in reasons[0]


def test_find_picks_implementation_by_opset():
    assert find("Attention", "", 22) is None  # Attention starts at opset 23
    assert type(find("Attention", "ai.onnx", 24)).__name__ == "Attention"
    assert find("Scatter", "", 11) is None and find("Scatter", "", 9) is not None  # Scatter ends at opset 10
    assert find("NoSuchOp", "", 21) is None


def test_decoder_zoo_model_matches_onnxruntime():
    from ort_graph import zoo

    cfg = zoo.DecoderConfig(batch=1, sequence=8, past_sequence=0)
    proto = zoo.decoder_proto(cfg)
    model = ort_graph.from_proto(proto)
    assert claim(model) == []
    feeds = zoo.decoder_inputs(cfg, batch=1, sequence=8, past=0)
    ours = run_graph(model.graph, feeds, opsets=model.opset_imports)
    theirs = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for name, ref in zip(model.graph.outputs, theirs):
        np.testing.assert_allclose(ours[name], ref, rtol=1e-4, atol=1e-5)


def test_loop_and_if_subgraphs_see_outer_scope():
    # Loop body adds the outer value `w` to the carried value; If picks a branch that reads `w` too.
    body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "w"], ["acc_out"]), helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Identity", ["acc_out"], ["scan"])],
        "body",
        [helper.make_tensor_value_info("i", T.INT64, []), helper.make_tensor_value_info("cond_in", T.BOOL, []),
         helper.make_tensor_value_info("acc_in", T.FLOAT, [2])],
        [helper.make_tensor_value_info("cond_out", T.BOOL, []), helper.make_tensor_value_info("acc_out", T.FLOAT, [2]),
         helper.make_tensor_value_info("scan", T.FLOAT, [2])])
    then_g = helper.make_graph([helper.make_node("Mul", ["acc", "w"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", T.FLOAT, [2])])
    else_g = helper.make_graph([helper.make_node("Sub", ["acc", "w"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", T.FLOAT, [2])])
    g = helper.make_graph(
        [helper.make_node("Loop", ["n", "", "x"], ["acc", "scans"], body=body),
         helper.make_node("If", ["flag"], ["y"], then_branch=then_g, else_branch=else_g)],
        "g",
        [helper.make_tensor_value_info("n", T.INT64, []), helper.make_tensor_value_info("x", T.FLOAT, [2]),
         helper.make_tensor_value_info("w", T.FLOAT, [2]), helper.make_tensor_value_info("flag", T.BOOL, [])],
        [helper.make_tensor_value_info("y", T.FLOAT, [2]), helper.make_tensor_value_info("scans", T.FLOAT, None)])
    proto = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    model = ort_graph.from_proto(proto)
    x, w = np.array([1.0, 2.0], np.float32), np.array([0.5, -1.0], np.float32)
    for flag in (True, False):
        out = run_graph(model.graph, {"n": np.array(3), "x": x, "w": w, "flag": np.array(flag)},
                        opsets=model.opset_imports)
        acc = x + 3 * w
        np.testing.assert_allclose(out["y"], acc * w if flag else acc - w)
        np.testing.assert_allclose(out["scans"], np.stack([x + w, x + 2 * w, x + 3 * w]))


def test_conv_uses_declared_workspace_for_im2col():
    from ort_cpu_ep.ops._registry import workspace_scope

    x, w = f32(2, 4, 9, 7), f32(6, 2, 3, 3)
    proto = _model("Conv", {"x": x, "w": w}, group=2, pads=[1, 1, 1, 1])
    model = ort_graph.from_proto(proto)
    node = model.graph.nodes[0]
    impl = find("Conv", "", 21)
    [(slot, nbytes)] = impl.workspace_bytes(node, [x.shape, w.shape])
    assert slot == 0 and nbytes == 2 * 4 * 9 * 7 * 9 * 4
    calls = []
    buf = np.empty(nbytes, dtype=np.uint8)

    def provider(slot_id, n):
        calls.append((slot_id, n))
        return buf

    with workspace_scope(provider):
        [y] = impl.compute(node, [x, w])
    assert calls == [(0, nbytes)]
    ref = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x, "w": w})
    np.testing.assert_allclose(y, ref[0], rtol=1e-4, atol=1e-5)


def test_attention_score_buffer_is_the_declared_workspace():
    from ort_cpu_ep.ops._registry import workspace_scope

    feeds = {"q": f32(1, 6, 4 * 8), "k": f32(1, 6, 2 * 8), "v": f32(1, 6, 2 * 8)}
    proto = _model("Attention", feeds, opset=23, q_num_heads=4, kv_num_heads=2, is_causal=1)
    node = ort_graph.from_proto(proto).graph.nodes[0]
    impl = find("Attention", "", 23)
    [(slot, nbytes)] = impl.workspace_bytes(node, [v.shape for v in feeds.values()])
    assert (slot, nbytes) == (0, 1 * 4 * 6 * 6 * 4)
    calls = []
    with workspace_scope(lambda s, n: calls.append((s, n)) or np.empty(n, np.uint8)):
        y = impl.compute(node, list(feeds.values()))[0]
    assert calls == [(0, nbytes)]
    ref = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)


def _run_old(op: str, opset: int, feeds: dict[str, np.ndarray], **attrs) -> np.ndarray:
    node = helper.make_node(op, list(feeds), ["y"], **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype),
                                                                      v.shape) for k, v in feeds.items()],
                          [helper.make_tensor_value_info("y", 0, None)])
    model = ort_graph.from_proto(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]))
    assert claim(model) == []
    return run_graph(model.graph, feeds, opsets=model.opset_imports)["y"]


def test_opset_1_to_6_forms():
    a, b = f32(2, 3, 4), f32(3)
    np.testing.assert_allclose(_run_old("Add", 6, {"a": a, "b": b}, broadcast=1, axis=1), a + b[:, None])
    x = f32(2, 3)
    np.testing.assert_array_equal(_run_old("Tile", 1, {"x": x, "t": np.array(3), "ax": np.array(1)}), np.tile(x, (1, 3)))
    np.testing.assert_array_equal(_run_old("Pad", 1, {"x": x}, paddings=[0, 1, 1, 0], mode="edge"),
                                  np.pad(x, [(0, 1), (1, 0)], mode="edge"))
    np.testing.assert_array_equal(_run_old("Reshape", 1, {"x": x}, shape=[3, 2]), x.reshape(3, 2))
    np.testing.assert_array_equal(_run_old("Cast", 1, {"x": x}, to="INT32"), x.astype(np.int32))
    np.testing.assert_array_equal(_run_old("Concat", 1, {"a": x, "b": x}), np.concatenate([x, x], axis=1))
    img = f32(1, 2, 2, 3)
    np.testing.assert_array_equal(_run_old("Upsample", 1, {"x": img}, height_scale=2.0, width_scale=3.0),
                                  img.repeat(2, axis=2).repeat(3, axis=3))
    np.testing.assert_allclose(_run_old("PRelu", 6, {"x": a, "s": b}), np.where(a < 0, a * b[:, None], a))


@pytest.mark.parametrize("axis", [-3, 2, 5])
def test_concat_refuses_an_axis_outside_the_inputs_rank(axis):
    """axis -3 on rank-2 inputs used to wrap to the last axis (-3 + 2 = -1) and join there."""
    x = f32(2, 3)
    with pytest.raises(np.exceptions.AxisError, match=rf"Concat axis {axis} is out of range for inputs of rank 2; "
                                                      r"use an axis in \[-2, 1\]"):
        _run_old("Concat", 13, {"a": x, "b": x}, axis=axis)


@pytest.mark.parametrize("axis", [-2, -1, 0, 1])
def test_concat_takes_every_axis_inside_the_rank(axis):
    x = f32(2, 3)
    np.testing.assert_array_equal(_run_old("Concat", 13, {"a": x, "b": x}, axis=axis), np.concatenate([x, x], axis=axis))


@pytest.mark.parametrize("op, domain", [("Relu", ""), ("Gelu", ""), ("Sigmoid", ""), ("NoSuchOp", ""),
                                        ("Relu", "com.microsoft")])
def test_first_version_is_the_earliest_schema(op: str, domain: str) -> None:
    import onnx.defs

    from ort_cpu_ep.ops._util import first_version

    versions = [s.since_version for s in onnx.defs.get_all_schemas_with_history() if s.name == op and s.domain == domain]
    assert first_version(op, domain) == min(versions, default=1)


def test_tile_with_a_negative_repeat_is_refused_naming_the_repeats():
    """onnxruntime refuses it; numpy's own message ('negative dimensions are not allowed') named neither."""
    from ort_cpu_ep.ops import CpuOpError

    feeds = {"x": f32(2, 3), "r": np.array([-1, 2], np.int64)}
    m = _model("Tile", feeds)
    with pytest.raises(Exception, match="(?i)repeat|negative"):
        ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    model = ort_graph.from_proto(m)
    with pytest.raises(CpuOpError, match=r"Tile: repeats \[-1, 2\] has a negative entry"):
        run_graph(model.graph, feeds, opsets=model.opset_imports)
