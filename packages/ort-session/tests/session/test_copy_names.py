"""Copy nodes get names no model value or node uses, and one per reading device (names are the model's:
untrusted, and may already look like ours)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto
from onnx import helper as h

from ort_graph import from_proto
from ort_session import InferenceSession
from ort_session._boundaries import insert_copies


def _model(nodes, out="y"):
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                     [h.make_tensor_value_info(out, TensorProto.FLOAT, [4])])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


def test_model_value_named_like_a_copy_runs_as_onnxruntime():
    # `x` crosses to the simulated GPU, and the model already has a value called "x/MemcpyFromHost"
    m = _model([h.make_node("Relu", ["x"], ["x/MemcpyFromHost"], name="gpu_relu"),
                h.make_node("Neg", ["x"], ["x/MemcpyFromHost/MemcpyToHost"], name="x/MemcpyFromHost/MemcpyToHost"),
                h.make_node("Add", ["x/MemcpyFromHost", "x/MemcpyFromHost/MemcpyToHost"], ["y"], name="host_add")])
    feeds = {"x": np.array([-1, 2, -3, 4], np.float32)}
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    s = InferenceSession(m.SerializeToString(), {"session.name_based_layer_assignment": "gpu(gpu_relu)"},
                         providers=["SimulatedGPUExecutionProvider", "CPUExecutionProvider"])
    np.testing.assert_array_equal(s.run(None, feeds)[0], want[0])
    placed = {n.name: n.ep for n in s.model.graph.nodes}
    assert placed["gpu_relu"] == "SimulatedGPUExecutionProvider" and placed["host_add"] == "CPUExecutionProvider"


def test_two_devices_reading_one_host_value_get_two_copies():
    m = _model([h.make_node("Relu", ["x"], ["a"], name="on_a"), h.make_node("Neg", ["x"], ["b"], name="on_b"),
                h.make_node("Add", ["a", "b"], ["y"], name="host_add")])
    graph = from_proto(m).graph
    graph.node_by_name("on_a").ep, graph.node_by_name("on_b").ep = "A", "B"
    records = insert_copies(graph, {"A": "gpu0", "B": "gpu1", "CPU": "cpu"}, "CPU")
    into_devices = [r for r in records if r.value == "x"]
    assert sorted(r.dst for r in into_devices) == ["gpu0", "gpu1"]
    copies = [graph.node_by_name(r.node) for r in into_devices]
    assert len({c.outputs[0] for c in copies}) == 2 and len({c.name for c in copies}) == 2
    for node, device in (("on_a", "gpu0"), ("on_b", "gpu1")):
        read = graph.node_by_name(node).inputs[0]
        assert graph.values[read].producer.ep == {"gpu0": "A", "gpu1": "B"}[device]
