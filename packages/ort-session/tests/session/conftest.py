"""Models without decoder-layer names (no `layers.N` / `h.N` / `blocks.N`), built in the tests: an MLP
named `fc1/...`, a small CNN named `features.N/...` and an encoder named `encoder/stage_N/...`."""

import types

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def _init(name, shape, rng):
    return numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32), name)


def _model(nodes, inits, inp, out, name):
    graph = helper.make_graph(nodes, name, [inp], [out], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def mlp(widths=(32, 64, 64, 48, 16)):
    """fc1..fcN: MatMul + Add (+ Relu), input [batch, widths[0]]."""
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i, (a, b) in enumerate(zip(widths, widths[1:]), start=1):
        inits += [_init(f"fc{i}.weight", (a, b), rng), _init(f"fc{i}.bias", (b,), rng)]
        nodes += [helper.make_node("MatMul", [x, f"fc{i}.weight"], [f"fc{i}/mm"], name=f"fc{i}/MatMul"),
                  helper.make_node("Add", [f"fc{i}/mm", f"fc{i}.bias"], [f"fc{i}/out"], name=f"fc{i}/Add")]
        x = f"fc{i}/out"
        if i < len(widths) - 1:
            nodes.append(helper.make_node("Relu", [x], [f"fc{i}/relu"], name=f"fc{i}/Relu"))
            x = f"fc{i}/relu"
    nodes.append(helper.make_node("Identity", [x], ["y"], name="head/Identity"))
    return _model(nodes, inits, helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", widths[0]]),
                  helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", widths[-1]]), "mlp")


def cnn(channels=(3, 8, 16, 16), size=16, classes=10):
    """features.N/Conv + Relu (a MaxPool after the second), global pooling, classifier/Gemm."""
    rng = np.random.default_rng(1)
    nodes, inits, x = [], [], "image"
    for i, (a, b) in enumerate(zip(channels, channels[1:])):
        inits += [_init(f"features.{i}.weight", (b, a, 3, 3), rng), _init(f"features.{i}.bias", (b,), rng)]
        nodes += [helper.make_node("Conv", [x, f"features.{i}.weight", f"features.{i}.bias"], [f"features.{i}/conv"],
                                   name=f"features.{i}/Conv", pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", [f"features.{i}/conv"], [f"features.{i}/relu"], name=f"features.{i}/Relu")]
        x = f"features.{i}/relu"
        if i == 1:
            nodes.append(helper.make_node("MaxPool", [x], [f"features.{i}/pool"], name=f"features.{i}/MaxPool",
                                          kernel_shape=[2, 2], strides=[2, 2]))
            x = f"features.{i}/pool"
    inits += [_init("classifier.weight", (classes, channels[-1]), rng), _init("classifier.bias", (classes,), rng)]
    nodes += [helper.make_node("GlobalAveragePool", [x], ["pool/out"], name="pool/GlobalAveragePool"),
              helper.make_node("Flatten", ["pool/out"], ["pool/flat"], name="pool/Flatten"),
              helper.make_node("Gemm", ["pool/flat", "classifier.weight", "classifier.bias"], ["logits"],
                               name="classifier/Gemm", transB=1)]
    return _model(nodes, inits, helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", channels[0], size, size]),
                  helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", classes]), "cnn")


def encoder(stages=3, hidden=32, tokens="tokens"):
    """encoder/stage_N: self-attention (single head) and a feed-forward, each with a residual and LayerNorm."""
    rng = np.random.default_rng(2)
    nodes, inits, x = [], [], "x"

    def node(op, ins, out, name, **attrs):
        nodes.append(helper.make_node(op, ins, [out], name=name, **attrs))
        return out

    for s in range(stages):
        p = f"encoder/stage_{s}"
        for w in ("q", "k", "v", "o", "ff1", "ff2"):
            inits.append(_init(f"{p}.{w}", (hidden, hidden), rng))
        inits += [numpy_helper.from_array(np.ones(hidden, np.float32), f"{p}.ln1.g"),
                  numpy_helper.from_array(np.ones(hidden, np.float32), f"{p}.ln2.g"),
                  numpy_helper.from_array(np.array(1 / np.sqrt(hidden), np.float32), f"{p}.scale")]
        q = node("MatMul", [x, f"{p}.q"], f"{p}/q", f"{p}/attention/q/MatMul")
        k = node("MatMul", [x, f"{p}.k"], f"{p}/k", f"{p}/attention/k/MatMul")
        v = node("MatMul", [x, f"{p}.v"], f"{p}/v", f"{p}/attention/v/MatMul")
        kt = node("Transpose", [k], f"{p}/kt", f"{p}/attention/Transpose", perm=[0, 2, 1])
        sc = node("MatMul", [q, kt], f"{p}/scores", f"{p}/attention/scores/MatMul")
        sc = node("Mul", [sc, f"{p}.scale"], f"{p}/scaled", f"{p}/attention/Mul")
        pr = node("Softmax", [sc], f"{p}/probs", f"{p}/attention/Softmax", axis=-1)
        ctx = node("MatMul", [pr, v], f"{p}/ctx", f"{p}/attention/ctx/MatMul")
        o = node("MatMul", [ctx, f"{p}.o"], f"{p}/o", f"{p}/attention/o/MatMul")
        r = node("Add", [x, o], f"{p}/res1", f"{p}/attention/Add")
        n1 = node("LayerNormalization", [r, f"{p}.ln1.g"], f"{p}/ln1", f"{p}/norm1/LayerNormalization", axis=-1)
        f = node("MatMul", [n1, f"{p}.ff1"], f"{p}/ff1", f"{p}/ffn/up/MatMul")
        f = node("Relu", [f], f"{p}/ff1r", f"{p}/ffn/Relu")
        f = node("MatMul", [f, f"{p}.ff2"], f"{p}/ff2", f"{p}/ffn/down/MatMul")
        r = node("Add", [n1, f], f"{p}/res2", f"{p}/ffn/Add")
        x = node("LayerNormalization", [r, f"{p}.ln2.g"], f"{p}/out", f"{p}/norm2/LayerNormalization", axis=-1)
    node("Identity", [x], "hidden_states", "encoder/output/Identity")
    return _model(nodes, inits, helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", tokens, hidden]),
                  helper.make_tensor_value_info("hidden_states", TensorProto.FLOAT, ["batch", tokens, hidden]),
                  "encoder")


def inputs(name, seed=0):
    rng = np.random.default_rng(seed)
    shapes = {"mlp": {"x": (2, 32)}, "cnn": {"image": (1, 3, 16, 16)}, "encoder": {"x": (1, 8, 32)}}[name]
    return {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}


DIMS = {"mlp": {"batch": 2}, "cnn": {"batch": 1}, "encoder": {"batch": 1, "tokens": 8}}
BUILDERS = {"mlp": mlp, "cnn": cnn, "encoder": encoder}


@pytest.fixture(scope="session")
def layerless():
    """The builders (`layerless.build[name]()` -> ModelProto), their feeds and free dimensions."""
    return types.SimpleNamespace(build=BUILDERS, inputs=inputs, dims=DIMS)


@pytest.fixture
def matches_onnxruntime():
    """check(proto, feeds, got, rtol, atol): `got` (our outputs) equals onnxruntime's CPU provider's run of the
    same model on the same feeds, output by output."""
    import onnxruntime as ort  # a test dependency: its absence is an error, as the tests' own imports were

    def check(proto, feeds, got, rtol=1e-4, atol=1e-5):
        want = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)

    return check
