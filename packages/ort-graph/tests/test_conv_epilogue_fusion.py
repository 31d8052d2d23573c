"""The Conv epilogue fusions: a constant Mul / Add after a Conv folded into its weights and bias (fuse_conv_mul,
fuse_conv_add: per-channel or scalar, with or without a bias), and the activation after a Conv fused into
com.microsoft FusedConv (fuse_conv_activation, HardSwish also written out as exporters write it). The fused
graphs, run by onnxruntime, equal the unfused ones; patterns they must leave alone stay."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_graph

F = TensorProto.FLOAT


def _model(tail, *, bias=True, consts=None, seed=0, extra_outputs=()):
    """Conv (4 -> 6 channels, 3x3, pads 1) named stem/Conv writing C, then the `tail` nodes; Y is the output."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.standard_normal((6, 4, 3, 3)).astype(np.float32), "W")]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(6).astype(np.float32), "b"))
    inits += [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in (consts or {}).items()]
    nodes = [helper.make_node("Conv", ["X", "W"] + (["b"] if bias else []), ["C"], name="stem/Conv", pads=[1, 1, 1, 1]),
             *tail]
    outputs = [helper.make_tensor_value_info(n, F, [1, 6, 8, 8]) for n in ("Y", *extra_outputs)]
    proto = helper.make_model(helper.make_graph(nodes, "g", [helper.make_tensor_value_info("X", F, [1, 4, 8, 8])],
                                                outputs, initializer=inits),
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                              ir_version=8)
    model = ort_graph.from_proto(proto)
    ort_graph.resolve_shapes(model, {})
    return proto, model


X = np.random.default_rng(7).standard_normal((1, 4, 8, 8)).astype(np.float32) * 2


def _run(proto):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {"X": X})


def _same_as_unfused(proto, model):
    ort_graph.remove_unused_initializers(model.graph)
    want, got = _run(proto), _run(ort_graph.to_proto(model))
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(), (1,), (1, 6, 1, 1), (6, 1, 1), (1, 1, 1, 1)])
@pytest.mark.parametrize("op", ["Mul", "Add"])
def test_a_constant_mul_or_add_after_a_conv_folds_into_it(op, shape, bias):
    value = np.random.default_rng(3).uniform(0.5, 2, shape).astype(np.float32)
    proto, model = _model([helper.make_node(op, ["C", "S"], ["Y"], name="stem/" + op)], bias=bias, consts={"S": value})
    fuse = ort_graph.fuse_conv_mul if op == "Mul" else ort_graph.fuse_conv_add
    records = fuse(model.graph)
    assert [(r.fusion, r.replaced, r.created) for r in records] == [
        (f"Conv{op}Fusion", ("stem/Conv", "stem/" + op), (f"stem/Conv/Conv{op}Fusion",))]
    (node,) = model.graph.nodes
    assert node.op_type == "Conv" and node.outputs == ["Y"]
    assert len(node.inputs) == (3 if bias or op == "Add" else 2)
    _same_as_unfused(proto, model)


def test_mul_then_add_fold_one_after_the_other():
    tail = [helper.make_node("Mul", ["S", "C"], ["M"], name="lab/Mul"), helper.make_node("Add", ["M", "T"], ["Y"], name="lab/Add")]
    proto, model = _model(tail, consts={"S": [1.5], "T": [-0.25]})
    assert len(ort_graph.fuse_conv_mul(model.graph)) == 1 and len(ort_graph.fuse_conv_add(model.graph)) == 1
    assert [n.op_type for n in model.graph.nodes] == ["Conv"]
    _same_as_unfused(proto, model)


@pytest.mark.parametrize(("tail", "consts", "outputs"), [
    ([helper.make_node("Mul", ["C", "S"], ["Y"])], {"S": np.ones((1, 6, 8, 8))}, ()),     # not per channel
    ([helper.make_node("Mul", ["C", "C"], ["Y"])], {}, ()),                                # not a constant
    ([helper.make_node("Mul", ["C", "S"], ["Y"])], {"S": np.ones((1, 1, 1, 1, 1))}, ()),   # broadcasts to rank 5
    ([helper.make_node("Mul", ["C", "S"], ["Y"])], {"S": [2.0]}, ("C",)),                  # C is read elsewhere
])
@pytest.mark.filterwarnings("ignore:value .Y.. the file declares shape")
def test_a_mul_that_is_not_a_per_channel_constant_stays(tail, consts, outputs):
    _, model = _model(tail, consts=consts, extra_outputs=outputs)
    assert ort_graph.fuse_conv_mul(model.graph) == []


ACTIVATIONS = [  # (tail after C, constants, activation, params)
    ([helper.make_node("Relu", ["C"], ["Y"])], {}, "Relu", []),
    ([helper.make_node("Sigmoid", ["C"], ["Y"])], {}, "Sigmoid", []),
    ([helper.make_node("Tanh", ["C"], ["Y"])], {}, "Tanh", []),
    ([helper.make_node("LeakyRelu", ["C"], ["Y"], alpha=0.2)], {}, "LeakyRelu", [0.2]),
    ([helper.make_node("HardSigmoid", ["C"], ["Y"], alpha=0.25, beta=0.4)], {}, "HardSigmoid", [0.25, 0.4]),
    ([helper.make_node("Clip", ["C", "lo", "hi"], ["Y"])], {"lo": 0.0, "hi": 6.0}, "Clip", [0.0, 6.0]),
    ([helper.make_node("Clip", ["C", "", "hi"], ["Y"])], {"hi": 1.5}, "Clip", [-3.4028234663852886e38, 1.5]),
]


@pytest.mark.parametrize(("tail", "consts", "activation", "params"), ACTIVATIONS)
def test_a_conv_and_its_activation_fuse_into_fused_conv(tail, consts, activation, params):
    proto, model = _model(tail, consts=consts)
    records = ort_graph.fuse_conv_activation(model.graph)
    assert [(r.fusion, r.created) for r in records] == [("ConvActivationFusion", ("stem/Conv/ConvActivationFusion",))]
    (node,) = model.graph.nodes
    assert (node.op_type, node.domain, node.attr("activation")) == ("FusedConv", "com.microsoft", activation)
    assert list(node.attr("activation_params") or []) == pytest.approx(params)
    assert node.attr("pads") == [1, 1, 1, 1] and node.outputs == ["Y"]
    _same_as_unfused(proto, model)  # onnxruntime runs com.microsoft FusedConv


WRITTEN_HARD_SWISH = [
    ([helper.make_node("Add", ["C", "three"], ["a"]), helper.make_node("Clip", ["a", "zero", "six"], ["c"]),
      helper.make_node("Mul", ["C", "c"], ["m"]), helper.make_node("Div", ["m", "six"], ["Y"])],
     {"three": 3.0, "zero": 0.0, "six": 6.0}),
    ([helper.make_node("HardSigmoid", ["C"], ["h"], alpha=1 / 6, beta=0.5), helper.make_node("Mul", ["h", "C"], ["Y"])], {}),
]


@pytest.mark.parametrize(("tail", "consts"), WRITTEN_HARD_SWISH)
def test_hard_swish_written_out_fuses_as_hard_swish(tail, consts):
    _, model = _model(tail, consts=consts)
    (record,) = ort_graph.fuse_conv_activation(model.graph)
    assert len(record.replaced) == len(tail) + 1
    (node,) = model.graph.nodes
    assert node.attr("activation") == "HardSwish" and not node.attr("activation_params") and node.outputs == ["Y"]
    shapes = ort_graph.resolve_shapes(model, {})
    assert model.graph.values["Y"].shape == (1, 6, 8, 8) and shapes is not None  # FusedConv's shape function


@pytest.mark.parametrize(("tail", "consts", "outputs"), [
    ([helper.make_node("Add", ["C", "three"], ["a"]), helper.make_node("Clip", ["a", "zero", "six"], ["c"]),
      helper.make_node("Mul", ["C", "c"], ["m"]), helper.make_node("Div", ["m", "five"], ["Y"])],
     {"three": 3.0, "zero": 0.0, "six": 6.0, "five": 5.0}, ()),                               # not / 6
    ([helper.make_node("HardSigmoid", ["C"], ["h"]), helper.make_node("Mul", ["h", "C"], ["Y"])], {}, ()),  # 0.2
    ([helper.make_node("Relu", ["C"], ["Y"])], {}, ("C",)),                                   # C read elsewhere
    ([helper.make_node("Clip", ["C", "lo", "hi"], ["Y"])], {"lo": np.zeros(6), "hi": np.ones(6)}, ()),  # not scalar
    ([helper.make_node("Softplus", ["C"], ["Y"])], {}, ()),
])
def test_what_is_not_a_fusable_activation_stays(tail, consts, outputs):
    _, model = _model(tail, consts=consts, extra_outputs=outputs)
    assert ort_graph.fuse_conv_activation(model.graph) == []


def test_accepts_filters_the_activations():
    _, model = _model([helper.make_node("LeakyRelu", ["C"], ["Y"], alpha=0.2)])
    seen = []
    assert ort_graph.fuse_conv_activation(model.graph, accepts=lambda kind, params: seen.append((kind, params))) == []
    assert seen == [("LeakyRelu", [pytest.approx(0.2)])]


WS = {"Ws": np.random.default_rng(3).standard_normal((6, 4, 1, 1))}  # the residual branch's weights


def _shortcut():
    """S: a second Conv of X (the residual branch), after stem/Conv in the node list."""
    return helper.make_node("Conv", ["X", "Ws"], ["S"], name="short/Conv")


@pytest.mark.parametrize("op", ["Add", "Sum"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("swap", [False, True])
def test_a_residual_add_and_its_activation_fold_into_fused_conv_with_z(op, bias, swap):
    add = helper.make_node(op, ["S", "C"] if swap else ["C", "S"], ["A"], name="block/add")
    proto, model = _model([_shortcut(), add, helper.make_node("Relu", ["A"], ["Y"], name="block/relu")], bias=bias,
                          consts=WS)
    records = ort_graph.fuse_conv_add_activation(model.graph)
    assert [(r.fusion, r.replaced) for r in records] == [
        ("ConvAddActivationFusion", ("stem/Conv", "block/add", "block/relu"))]
    fused = model.graph.node_by_name("stem/Conv/ConvAddActivationFusion")
    assert (fused.op_type, fused.domain, fused.attr("activation")) == ("FusedConv", "com.microsoft", "Relu")
    assert fused.inputs == ["X", "W", "b" if bias else "", "S"]
    _same_as_unfused(proto, model)


@pytest.mark.parametrize("case", ["broadcast_z", "conv_output_read_twice", "no_activation", "three_input_sum"])
def test_residual_patterns_left_alone(case):
    tail, consts, extra = [_shortcut()], dict(WS), ()
    if case == "broadcast_z":  # a per-channel tensor: ConvAddFusion's, not a residual
        consts["k"] = np.ones((1, 6, 1, 1))
        tail += [helper.make_node("Add", ["C", "k"], ["A"]), helper.make_node("Relu", ["A"], ["Y"])]
    elif case == "conv_output_read_twice":
        tail += [helper.make_node("Add", ["C", "S"], ["A"]), helper.make_node("Relu", ["A"], ["Y"])]
        extra = ("C",)
    elif case == "no_activation":
        tail += [helper.make_node("Add", ["C", "S"], ["Y"])]
    else:
        tail += [helper.make_node("Sum", ["C", "S", "S"], ["A"]), helper.make_node("Relu", ["A"], ["Y"])]
    _, model = _model(tail, consts=consts, extra_outputs=extra)
    records = ort_graph.fuse_conv_add_activation(model.graph)
    if case == "conv_output_read_twice":  # stem/Conv's C is also an output; the shortcut Conv's S is the residual
        assert [r.replaced[0] for r in records] == ["short/Conv"]
        assert model.graph.node_by_name("short/Conv/ConvAddActivationFusion").inputs[3] == "C"
    else:
        assert records == []


@pytest.mark.parametrize("w_dims, b_len", [((), 4), ((4,), 4), ((4, 3, 3, 3), 5)])
def test_a_conv_whose_weights_or_bias_are_not_a_convolutions_is_left_to_its_kernel(w_dims, b_len):
    # a model file is untrusted: a Conv with a scalar or 1-D weight, or a bias of the wrong length, followed by a
    # constant Mul once crashed the fusion (IndexError / ValueError); the pair stays for the kernel to refuse
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal(w_dims).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(b_len).astype(np.float32), "b")
    s = numpy_helper.from_array(rng.standard_normal((4, 1, 1)).astype(np.float32), "s")
    g = helper.make_graph([helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv"),
                           helper.make_node("Mul", ["c", "s"], ["y"], name="mul")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w, b, s])
    model = ort_graph.from_proto(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ort_graph.resolve_shapes(model)
    assert ort_graph.fuse_conv_mul(model.graph) == []
    assert [n.op_type for n in model.graph.nodes] == ["Conv", "Mul"]
