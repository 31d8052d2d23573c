"""The C LSTM / GRU kernels (ort-cpu-ep csrc/rnn_kernel.c) in a session with pre-allocated execution buffers: a
stateful two-layer cell (state in and out, as a streaming speech model carries it between calls) runs window after
window with no allocation and no scratch fallback, its workspace from the plan, equal to onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from ort_session import InferenceSession

F = TensorProto.FLOAT
H, IN, SEQ, BATCH = 16, 12, 3, 2


def _model(op, y_named):
    rng = np.random.default_rng(3)
    g = {"GRU": 3, "LSTM": 4}[op]
    inits, nodes, ins, outs = [], [], [helper.make_tensor_value_info("x", F, [SEQ, BATCH, IN])], []
    prev = "x"
    for layer, width in enumerate((IN, H)):
        w = (rng.standard_normal((1, g * H, width)) * 0.4).astype(np.float32)
        r = (rng.standard_normal((1, g * H, H)) * 0.4).astype(np.float32)
        b = (rng.standard_normal((1, 2 * g * H)) * 0.2).astype(np.float32)
        inits += [numpy_helper.from_array(a, f"{n}{layer}") for n, a in (("w", w), ("r", r), ("b", b))]
        states = [f"h{layer}"] + ([f"c{layer}"] if op == "LSTM" else [])
        ins += [helper.make_tensor_value_info(s, F, [1, BATCH, H]) for s in states]
        y = f"y{layer}" if y_named or layer == 0 else ""
        new = [f"{s}_out" for s in states]
        node_ins = [prev, f"w{layer}", f"r{layer}", f"b{layer}", "", states[0]] + states[1:]
        nodes.append(helper.make_node(op, node_ins, [y, *new], hidden_size=H))
        outs += [helper.make_tensor_value_info(s, F, [1, BATCH, H]) for s in new]
        if layer == 0:
            nodes.append(helper.make_node("Squeeze", [y, "axis1"], ["y0s"]))
            prev = "y0s"
    inits.append(numpy_helper.from_array(np.array([1], np.int64), "axis1"))
    nodes.append(helper.make_node("Sigmoid", [new[0]], ["prob"]))
    outs.insert(0, helper.make_tensor_value_info("prob", F, [1, BATCH, H]))
    graph = helper.make_graph(nodes, "cell", ins, outs, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("y_named", [True, False], ids=["y", "no_last_y"])  # no_last_y: the numpy kernel there
@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_c_recurrent_cell_runs_preallocated_with_no_allocation(op, y_named):
    model = _model(op, y_named)
    sess = InferenceSession(model, {"session.pre_allocate_execution_buffers": "1"})
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    ref = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    states = {i.name: np.zeros(i.shape, np.float32) for i in ref.get_inputs() if i.name != "x"}
    for _ in range(3):  # state carried between calls
        feeds = {"x": rng.standard_normal((SEQ, BATCH, IN)).astype(np.float32), **states}
        got, want = sess.run(None, feeds), ref.run(None, feeds)
        for g_, w_ in zip(got, want):
            np.testing.assert_allclose(g_, w_, rtol=0, atol=2e-5)
        stats = sess.last_run_stats
        assert stats.allocations == 0 and stats.scratch_fallbacks == 0 and stats.workspace_from_plan == (2 if y_named else 1)
        names = [o.name for o in ref.get_outputs()]
        states = {n[:-4]: v for n, v in zip(names, got) if n.endswith("_out")}


def test_default_activations_spelled_out_still_get_the_c_kernel():
    """tf2onnx writes activations=[Sigmoid, Tanh, Tanh]: the CPU provider's pass drops them, the C kernel runs."""
    model = _model("LSTM", True)
    for node in model.graph.node:
        if node.op_type == "LSTM":
            node.attribute.append(helper.make_attribute("activations", ["Sigmoid", "Tanh", "Tanh"]))
    sess = InferenceSession(model, {"session.pre_allocate_execution_buffers": "1"})
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {i.name: rng.standard_normal(i.shape).astype(np.float32) for i in ref.get_inputs()}
    for got, want in zip(sess.run(None, feeds), ref.run(None, feeds)):
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-5)
    assert sess.last_run_stats.workspace_from_plan == 2  # both LSTMs in C (the numpy kernel declares none)
