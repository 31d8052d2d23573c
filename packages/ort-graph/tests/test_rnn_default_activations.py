"""drop_default_rnn_activations: an RNN / GRU / LSTM `activations` attribute that spells out the defaults goes (with
activation_alpha / activation_beta), the node otherwise the same and equal in onnxruntime; other activations, other
ops and nodes outside the given set are left alone."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_graph

F = TensorProto.FLOAT
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
GATES_ACTS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}


def rnn_model(op, activations, direction="forward", **extra):
    rng = np.random.default_rng(0)
    dirs, g, h = (2 if direction == "bidirectional" else 1), GATES[op], 5
    inits = [numpy_helper.from_array((rng.standard_normal((dirs, g * h, 3)) * 0.5).astype(np.float32), "w"),
             numpy_helper.from_array((rng.standard_normal((dirs, g * h, h)) * 0.5).astype(np.float32), "r")]
    node = helper.make_node(op, ["x", "w", "r"], ["y", "yh"], name="cell", hidden_size=h, direction=direction,
                            activations=activations, **extra)
    proto = helper.make_model(helper.make_graph([node], "rnn", [helper.make_tensor_value_info("x", F, [4, 2, 3])],
                                                [helper.make_tensor_value_info(n, F, None) for n in ("y", "yh")],
                                                initializer=inits), opset_imports=[helper.make_opsetid("", 17)])
    model = ort_graph.from_proto(proto)
    ort_graph.resolve_shapes(model, {})
    return proto, model


CASES = [("RNN", ["Tanh"], "forward"), ("GRU", ["sigmoid", "TANH"], "reverse"),
         ("LSTM", ["Sigmoid", "Tanh", "Tanh"], "forward"), ("LSTM", ["Sigmoid", "Tanh", "Tanh"] * 2, "bidirectional"),
         ("GRU", ["Sigmoid", "Tanh"], "bidirectional")]  # one direction's list for both: numpy takes it, onnxruntime not


@pytest.mark.parametrize(("op", "acts", "direction"), CASES)
def test_default_activations_spelled_out_are_dropped(op, acts, direction):
    proto, model = rnn_model(op, acts, direction, activation_alpha=[0.5])
    records = ort_graph.drop_default_rnn_activations(model.graph)
    assert [(r.fusion, r.replaced, r.created) for r in records] == [("RecurrentDefaultActivations", ("cell",), ("cell",))]
    (node,) = model.graph.nodes
    assert node.op_type == op and node.attr("activations") is None and node.attr("activation_alpha") is None
    assert node.attr("direction") == direction and node.attr("hidden_size") == 5
    if direction == "bidirectional" and len(acts) == len(GATES_ACTS[op]):
        return  # onnxruntime refuses the unrepeated list
    x = np.random.default_rng(1).standard_normal((4, 2, 3)).astype(np.float32)
    run = lambda p: ort.InferenceSession(p.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})  # noqa: E731
    for got, want in zip(run(ort_graph.to_proto(model)), run(proto)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(("op", "acts", "direction"), [("GRU", ["Tanh", "Sigmoid"], "forward"),
                                                       ("LSTM", ["Sigmoid", "Tanh", "Relu"], "forward"),
                                                       ("LSTM", ["Sigmoid", "Tanh", "Tanh"] * 2, "forward")])
def test_other_activations_are_kept(op, acts, direction):
    _, model = rnn_model(op, acts, direction)
    assert ort_graph.drop_default_rnn_activations(model.graph) == []
    assert model.graph.nodes[0].attr("activations") is not None


def test_only_the_given_nodes():
    _, model = rnn_model("RNN", ["Tanh"])
    assert ort_graph.drop_default_rnn_activations(model.graph, []) == []
