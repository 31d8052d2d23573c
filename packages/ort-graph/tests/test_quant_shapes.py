"""Shape rules of the contrib and quantized ops real exporters write, against the shapes onnxruntime's CPU
provider gives when it runs a one-node model (every output: dtype and shape)."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import ort_graph

ort = pytest.importorskip("onnxruntime")
r = np.random.default_rng(0)
F, U8, I8 = np.float32, np.uint8, np.int8


def f(*s):
    return r.standard_normal(s).astype(F)


def u8(*s):
    return r.integers(0, 255, s).astype(U8)


def i8(*s):
    return r.integers(-100, 100, s).astype(I8)


sc, z8 = np.array(0.05, F), np.array(128, U8)
H, N = 16, 2  # hidden, heads

CASES = {
    "GatherBlockQuantized-u4": ("GatherBlockQuantized", [u8(10, 32), np.array([[1, 2, 3]], np.int64), f(10, 2).__abs__(),
                                                         u8(10, 1)], dict(bits=4, block_size=32), 1),
    "GatherBlockQuantized-u8": ("GatherBlockQuantized", [u8(10, 64), np.array([4, 0], np.int64), f(10, 4).__abs__()],
                                dict(bits=8, block_size=16), 1),
    "DynamicQuantizeMatMul": ("DynamicQuantizeMatMul", [f(2, 3, 8), i8(8, 5), np.array([0.1] * 5, F)], {}, 1),
    "MatMulIntegerToFloat": ("MatMulIntegerToFloat", [u8(3, 8), i8(8, 5), sc, np.array([0.1] * 5, F), z8], {}, 1),
    "QGemm-float": ("QGemm", [u8(4, 8), sc, z8, i8(6, 8), sc, np.array(0, I8)], dict(transB=1), 1),
    "QGemm-quantized": ("QGemm", [u8(8, 4), sc, z8, i8(8, 6), sc, np.array(0, I8), None, sc, z8], dict(transA=1), 1),
    "QLinearAdd": ("QLinearAdd", [u8(2, 3, 4), sc, z8, u8(4), sc, z8, sc, z8], {}, 1),
    "QLinearMul": ("QLinearMul", [u8(3, 1), sc, z8, u8(1, 5), sc, z8, sc, z8], {}, 1),
    "QLinearSigmoid": ("QLinearSigmoid", [u8(2, 7), sc, z8, sc, z8], {}, 1),
    "QLinearLeakyRelu": ("QLinearLeakyRelu", [u8(2, 7), sc, z8, sc, z8], dict(alpha=0.1), 1),
    "QLinearSoftmax": ("QLinearSoftmax", [u8(2, 7), sc, z8, sc, z8], dict(axis=-1, opset=13), 1),
    "QLinearGlobalAveragePool": ("QLinearGlobalAveragePool", [u8(2, 3, 5, 5), sc, z8, sc, z8], {}, 1),
    "QLinearGlobalAveragePool-nhwc": ("QLinearGlobalAveragePool", [u8(2, 5, 5, 3), sc, z8, sc, z8],
                                      dict(channels_last=1), 1),
    "QLinearAveragePool": ("QLinearAveragePool", [u8(2, 3, 9, 8), sc, z8, sc, z8],
                           dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1]), 1),
    "QLinearAveragePool-ceil": ("QLinearAveragePool", [u8(1, 2, 10, 7), sc, z8, sc, z8],
                                dict(kernel_shape=[3, 3], strides=[2, 3], ceil_mode=1), 1),
    "QLinearAveragePool-nhwc-same": ("QLinearAveragePool", [u8(2, 9, 8, 3), sc, z8, sc, z8],
                                     dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER",
                                          channels_last=1), 1),
    "QLinearConcat": ("QLinearConcat", [sc, z8, u8(2, 3), sc, z8, u8(2, 4), sc, z8], dict(axis=1), 1),
    "QuantizeLinear": ("QuantizeLinear", [f(3, 4), sc, np.array(0, I8)], {}, 1),
    "DequantizeLinear": ("DequantizeLinear", [u8(3, 4), sc, z8], {}, 1),
    "QAttention": ("QAttention", [u8(2, 3, H), u8(H, 3 * H), f(3 * H), sc, sc, None, z8, z8], dict(num_heads=N), 2),
    "DynamicQuantizeLSTM": ("DynamicQuantizeLSTM", [f(5, 2, 4), i8(2, 4, 12), i8(2, 3, 12), f(2, 24), None, None, None,
                                                    None, np.array([0.1, 0.1], F), np.zeros(2, I8),
                                                    np.array([0.1, 0.1], F), np.zeros(2, I8)],
                            dict(hidden_size=3, direction="bidirectional"), 3),
    "Attention": ("Attention", [f(2, 3, H), f(H, 3 * H), f(3 * H), None, f(2, 2, N, 4, H // N)], dict(num_heads=N), 2),
    "MultiHeadAttention": ("MultiHeadAttention", [f(2, 3, H), f(2, 5, H), f(2, 5, H), None, None, None,
                                                  f(2, N, 4, H // N), f(2, N, 4, H // N)], dict(num_heads=N), 3),
    "MultiHeadAttention-bnsh": ("MultiHeadAttention", [f(2, 3, H), f(2, N, 5, H // N), f(2, N, 5, H // N)],
                                dict(num_heads=N), 3),
    "EmbedLayerNormalization": ("EmbedLayerNormalization", [np.array([[1, 2, 3]], np.int32), np.zeros((1, 3), np.int32),
                                                            f(10, H), f(8, H), f(2, H), f(H), f(H)], {}, 3),
    "Inverse": ("Inverse", [f(2, 3, 3)], {}, 1),
    "Trilu": ("Trilu", [f(4, 5)], {}, 1),
}


def _run(op, inputs, attrs, n_out):
    names, vis, inits, feeds = [], [], [], {}
    for i, a in enumerate(inputs):
        if a is None:
            names.append("")
            continue
        names.append(f"i{i}")
        if a.ndim == 0 or a.size <= 64 and a.dtype != F:
            inits.append(numpy_helper.from_array(a, f"i{i}"))
        else:
            feeds[f"i{i}"] = a
            vis.append(helper.make_tensor_value_info(f"i{i}", helper.np_dtype_to_tensor_dtype(a.dtype), a.shape))
    outs = [f"o{i}" for i in range(n_out)]
    node = helper.make_node(op, names, outs, name="n", domain="com.microsoft", **attrs)
    graph = helper.make_graph([node], "g", vis, [onnx.ValueInfoProto(name=o) for o in outs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)],
                              ir_version=10)
    try:
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - onnxruntime's error types share no base
        if "Could not find an implementation" not in str(e):
            raise  # a malformed test model is a failure, never a skip
        pytest.skip(f"onnxruntime's CPU provider has no kernel for {op}: {str(e)[:200]}")
    return model, sess.run(None, feeds)


@pytest.mark.parametrize("case", list(CASES))
def test_shape_rule_matches_onnxruntime(case):
    op, inputs, attrs, n_out = CASES[case]
    model, want = _run(op, inputs, attrs, n_out)
    m = ort_graph.from_proto(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ort_graph.ShapeResolutionWarning)
        ort_graph.resolve_shapes(m)
    for i, w in enumerate(want):
        v = m.graph.values[f"o{i}"]
        assert (v.shape, v.dtype) == (w.shape, helper.np_dtype_to_tensor_dtype(w.dtype)), f"{case} output {i}"


def test_an_op_without_a_rule_is_named_once_with_what_to_do():
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["b", 8])
    nodes = [helper.make_node("BiasSplitGelu", ["x", "bias"], ["t"], name="sd/BiasSplitGelu", domain="com.microsoft"),
             helper.make_node("Relu", ["t"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "g", [x], [onnx.ValueInfoProto(name="y")],
                              [numpy_helper.from_array(np.zeros(8, F), "bias")])
    m = ort_graph.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                                     helper.make_opsetid("com.microsoft", 1)]))
    with pytest.warns(ort_graph.ShapeResolutionWarning) as rec:
        report = ort_graph.resolve_shapes(m, {"b": 2})
    msgs = [str(w.message) for w in rec if issubclass(w.category, ort_graph.ShapeResolutionWarning)]
    assert len(msgs) == 1 and report.unresolved_node == "sd/BiasSplitGelu"
    assert "'sd/BiasSplitGelu' (com.microsoft::BiasSplitGelu) has no output-shape rule" in msgs[0]
    assert "--dim cannot fix that" in msgs[0] and "open an issue" in msgs[0]
