"""fuse_conv_batchnorm: Conv + inference BatchNormalization with constant per-channel inputs -> one Conv with folded
weights and bias (ONNX Runtime's ConvBNFusion), equal to the unfused pair within float32 rounding; pairs it must
leave alone (training mode, a BatchNormalization input computed at run time, the Conv's output read elsewhere,
weights computed at run time, nodes outside the given set)."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_graph


def conv_bn_model(*, bias=True, group=1, training=0, runtime_mean=False, extra_output=False, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    c, m = 4, 6
    t = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    arrays = {"W": rng.standard_normal((m, c // group, 3, 3)), "b": rng.standard_normal(m),
              "scale": rng.standard_normal(m), "shift": rng.standard_normal(m), "mean": rng.standard_normal(m),
              "var": rng.uniform(0.1, 2.0, m)}
    inits = [numpy_helper.from_array(v.astype(dtype), k) for k, v in arrays.items()
             if (bias or k != "b") and not (runtime_mean and k == "mean")]
    nodes = [helper.make_node("Conv", ["X", "W"] + (["b"] if bias else []), ["C"], name="stem/Conv", group=group,
                              pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["C", "scale", "shift", "mean", "var"], ["Y"], name="stem/BN",
                              epsilon=1e-3, **({"training_mode": training} if training else {}))]
    vi = lambda n, s: helper.make_tensor_value_info(n, t, s)  # noqa: E731
    inputs = [vi("X", [1, c, 8, 8])] + ([vi("mean", [m])] if runtime_mean else [])
    outputs = [vi("Y", [1, m, 8, 8])] + ([vi("C", [1, m, 8, 8])] if extra_output else [])
    proto = helper.make_model(helper.make_graph(nodes, "convbn", inputs, outputs, initializer=inits),
                              opset_imports=[helper.make_opsetid("", 15)], ir_version=8)
    model = ort_graph.from_proto(proto)
    ort_graph.resolve_shapes(model, {})
    return proto, model, arrays


@pytest.mark.parametrize(("bias", "group", "dtype"), [(True, 1, np.float32), (False, 1, np.float32),
                                                      (True, 2, np.float32), (False, 4, np.float64)])
def test_conv_and_batchnorm_fold_into_one_conv(bias, group, dtype):
    proto, model, _ = conv_bn_model(bias=bias, group=group, dtype=dtype)
    records = ort_graph.fuse_conv_batchnorm(model.graph)
    assert [(r.fusion, r.replaced, r.created) for r in records] == [
        ("ConvBNFusion", ("stem/Conv", "stem/BN"), ("stem/Conv/ConvBNFusion",))]
    (node,) = model.graph.nodes
    assert node.op_type == "Conv" and node.outputs == ["Y"] and node.attr("group") == group
    w, b = (model.graph.initializers[n].numpy() for n in node.inputs[1:])
    assert w.dtype == dtype and b.dtype == dtype and b.shape == (6,)
    ort_graph.remove_unused_initializers(model.graph)
    assert sorted(model.graph.initializers) == sorted(node.inputs[1:])  # the unfolded constants are gone
    a = conv_bn_model(bias=bias, group=group, dtype=dtype)[2]
    s = a["scale"] / np.sqrt(a["var"] + 1e-3)
    np.testing.assert_allclose(w, a["W"] * s[:, None, None, None], rtol=1e-6)
    np.testing.assert_allclose(b, ((a["b"] if bias else 0.0) - a["mean"]) * s + a["shift"], rtol=1e-6, atol=1e-6)
    if dtype != np.float32:
        return  # onnxruntime has no float64 Conv
    x = np.random.default_rng(1).standard_normal((1, 4, 8, 8)).astype(dtype)
    want = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
    got = ort.InferenceSession(ort_graph.to_proto(model).SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kwargs", [{"training": 1}, {"runtime_mean": True}, {"extra_output": True}])
def test_pairs_that_cannot_fold_are_left_alone(kwargs):
    _, model, _ = conv_bn_model(**kwargs)
    assert ort_graph.fuse_conv_batchnorm(model.graph) == []
    assert [n.op_type for n in model.graph.nodes] == ["Conv", "BatchNormalization"]


def test_only_pairs_among_the_given_nodes_are_fused():
    _, model, _ = conv_bn_model()
    conv = model.graph.node_by_name("stem/Conv")
    assert ort_graph.fuse_conv_batchnorm(model.graph, [conv]) == []
    assert ort_graph.fuse_conv_batchnorm(model.graph, list(model.graph.nodes)) != []


def convtranspose_add_bn_model(*, group=1, add=True, bias=False, seed=0):
    """ConvTranspose (stride 2) [+ per-channel Add, paddle2onnx's bias] + BatchNormalization, every constant an
    initializer (ppocrv4_det's upsampling head)."""
    rng = np.random.default_rng(seed)
    c, m = 4, 6
    arrays = {"W": rng.standard_normal((c, m // group, 2, 2)), "b": rng.standard_normal(m),
              "add": rng.standard_normal((1, m, 1, 1)), "scale": rng.standard_normal(m),
              "shift": rng.standard_normal(m), "mean": rng.standard_normal(m), "var": rng.uniform(0.1, 2.0, m)}
    inits = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in arrays.items()
             if (bias or k != "b") and (add or k != "add")]
    nodes = [helper.make_node("ConvTranspose", ["X", "W"] + (["b"] if bias else []), ["C"], name="up/ConvT",
                              group=group, strides=[2, 2])]
    if add:
        nodes.append(helper.make_node("Add", ["C", "add"], ["A"], name="up/Add"))
    nodes.append(helper.make_node("BatchNormalization", ["A" if add else "C", "scale", "shift", "mean", "var"], ["Y"],
                                  name="up/BN", epsilon=1e-5))
    vi = lambda n, s: helper.make_tensor_value_info(n, TensorProto.FLOAT, s)  # noqa: E731
    proto = helper.make_model(helper.make_graph(nodes, "ctbn", [vi("X", [1, c, 5, 7])], [vi("Y", [1, m, 10, 14])],
                                                initializer=inits),
                              opset_imports=[helper.make_opsetid("", 15)], ir_version=8)
    model = ort_graph.from_proto(proto)
    ort_graph.resolve_shapes(model, {})
    return proto, model


@pytest.mark.parametrize(("group", "add", "bias"), [(1, True, False), (2, True, False), (1, False, True),
                                                    (2, False, False)])
def test_convtranspose_add_and_batchnorm_fold_into_one_convtranspose(group, add, bias):
    proto, model = convtranspose_add_bn_model(group=group, add=add, bias=bias)
    records = ort_graph.fuse_convtranspose_add(model.graph) + ort_graph.fuse_conv_batchnorm(model.graph)
    assert [r.fusion for r in records] == (["ConvAddFusion"] if add else []) + ["ConvBNFusion"]
    (node,) = model.graph.nodes
    assert node.op_type == "ConvTranspose" and node.outputs == ["Y"] and node.attr("group") == group
    assert model.graph.initializers[node.inputs[2]].numpy().shape == (6,)
    x = np.random.default_rng(1).standard_normal((1, 4, 5, 7)).astype(np.float32)
    want = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
    got = ort.InferenceSession(ort_graph.to_proto(model).SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_conv_add_fusion_leaves_convtranspose_to_its_own_pass():
    _, model = convtranspose_add_bn_model()
    assert ort_graph.fuse_conv_add(model.graph) == []
    assert [n.op_type for n in model.graph.nodes] == ["ConvTranspose", "Add", "BatchNormalization"]
