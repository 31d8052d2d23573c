"""conv1d_as_conv2d: a float32 1-D Conv with constant weights -> Reshape / 2-D Conv (H = 1) / Reshape, equal to the
1-D one (run through onnxruntime both ways) for strides, dilations, pads, auto_pad, groups, a bias; the convolutions
it leaves alone (weights computed at run time, 2-D convolutions, a strided one-channel-per-group Conv, nodes outside
the given set)."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_graph

F = TensorProto.FLOAT


def conv1d_model(x_shape=(2, 4, 19), w_shape=(6, 4, 3), *, bias=True, const_w=True, seed=0, **attrs):
    rng = np.random.default_rng(seed)
    arrays = {"W": rng.standard_normal(w_shape).astype(np.float32), "b": rng.standard_normal(w_shape[0]).astype(np.float32)}
    inits = [numpy_helper.from_array(v, k) for k, v in arrays.items() if (bias or k != "b") and (const_w or k != "W")]
    inputs = [helper.make_tensor_value_info("X", F, list(x_shape))]
    if not const_w:
        inputs.append(helper.make_tensor_value_info("W", F, list(w_shape)))
    node = helper.make_node("Conv", ["X", "W"] + (["b"] if bias else []), ["C"], name="enc/Conv", **attrs)
    relu = helper.make_node("Relu", ["C"], ["Y"], name="enc/Relu")
    proto = helper.make_model(helper.make_graph([node, relu], "c1d", inputs, [helper.make_tensor_value_info("Y", F, None)],
                                                initializer=inits), opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    model = ort_graph.from_proto(proto)
    ort_graph.resolve_shapes(model, {})
    feeds = {"X": rng.standard_normal(x_shape).astype(np.float32)}
    if not const_w:
        feeds["W"] = arrays["W"]
    return proto, model, feeds


def _ort(proto, feeds):
    return ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


CASES = [
    ({}, {}),
    ({"bias": False}, {"strides": [2], "pads": [1, 2]}),
    ({}, {"dilations": [2], "pads": [2, 2], "kernel_shape": [3]}),
    ({"x_shape": (1, 6, 17), "w_shape": (9, 2, 5)}, {"group": 3, "strides": [3]}),
    ({}, {"auto_pad": "SAME_UPPER", "strides": [2]}),
    ({"w_shape": (6, 4, 4)}, {"auto_pad": "SAME_LOWER"}),
    ({"x_shape": (1, 1, 64), "w_shape": (5, 1, 8)}, {"pads": [4, 4]}),  # one channel, stride 1
    ({"x_shape": (1, 4, 10), "w_shape": (8, 1, 3)}, {"group": 4, "pads": [1, 1]}),  # depthwise, stride 1
    ({"x_shape": (1, 1, 512), "w_shape": (8, 1, 64)}, {"strides": [32]}),  # one channel, strided (an STFT): a GEMM
]


@pytest.mark.parametrize(("kw", "attrs"), CASES)
def test_1d_conv_becomes_a_2d_conv_between_reshapes(kw, attrs):
    proto, model, feeds = conv1d_model(**kw, **attrs)
    records = ort_graph.conv1d_as_conv2d(model.graph)
    assert len(records) == 1 and records[0].replaced == ("enc/Conv",)
    ops = [n.op_type for n in model.graph.nodes]
    assert ops == ["Reshape", "Conv", "Reshape", "Relu"]
    conv = model.graph.nodes[1]
    assert len(model.graph.initializers[conv.inputs[1]].dims) == 4 and model.graph.values[conv.inputs[0]].shape[2] == 1
    ort_graph.remove_unused_initializers(model.graph)
    assert "W" not in model.graph.initializers  # the 3-D weights went
    np.testing.assert_allclose(_ort(ort_graph.to_proto(model), feeds), _ort(proto, feeds), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("kw", "attrs"), [({"const_w": False}, {}),
                                           ({"x_shape": (1, 4, 512), "w_shape": (4, 1, 64)}, {"strides": [32], "group": 4}),
                                           ({"x_shape": (1, 4, 7, 7), "w_shape": (6, 4, 3, 3)}, {})],
                         ids=["runtime_weights", "strided_depthwise", "2d"])
def test_convolutions_left_alone(kw, attrs):
    _, model, _ = conv1d_model(**kw, **attrs)
    assert ort_graph.conv1d_as_conv2d(model.graph) == []
    assert [n.op_type for n in model.graph.nodes] == ["Conv", "Relu"]


def test_only_the_given_nodes_are_rewritten():
    _, model, _ = conv1d_model()
    relu = [n for n in model.graph.nodes if n.op_type == "Relu"]
    assert ort_graph.conv1d_as_conv2d(model.graph, relu) == []
