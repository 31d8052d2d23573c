"""Device graph capture on the simulated GPU (session.enable_graph_capture): the first pre-allocated run
captures the device region (its staged kernel calls), later runs replay them; replayed runs equal normal
runs, and a capture that cannot hold is refused with the reason (at initialization where knowable)."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from ort_session import InferenceSession
from ort_session._errors import CaptureRefusedError

SIM = ["SimulatedGPUExecutionProvider", "CPUExecutionProvider"]
PRE = {"session.pre_allocate_execution_buffers": "1"}
CAPTURE = {**PRE, "session.enable_graph_capture": "1"}


def chain(shape=(2, 16)):
    nodes = [helper.make_node("Relu", ["X"], ["A"], name="relu"), helper.make_node("Neg", ["A"], ["B"], name="neg"),
             helper.make_node("Mul", ["B", "X"], ["C"], name="mul"), helper.make_node("Add", ["C", "X"], ["Y"], name="add")]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("X", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, list(shape))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def session(options, rule="gpu(relu, neg, mul, add)", shape=(2, 16)):
    return InferenceSession(chain(shape), {**options, "session.name_based_layer_assignment": rule}, providers=SIM)


def test_replayed_runs_equal_normal_runs():
    captured, normal = session(CAPTURE), session(PRE)
    rng = np.random.default_rng(0)
    graphs = []
    for _ in range(4):
        x = rng.standard_normal((2, 16)).astype(np.float32)
        got, = captured.run(None, {"X": x})
        want, = normal.run(None, {"X": x})
        np.testing.assert_array_equal(got, want)
        graphs.append(captured.last_run_stats.graph)
        assert captured.last_run_stats.allocations == 0
    assert graphs == ["captured", "replayed", "replayed", "replayed"]
    assert captured.last_run_stats.nodes_run == 2  # only the boundary copies run; the 4 device nodes replay
    assert normal.last_run_stats.graph == "" and normal.last_run_stats.nodes_run == 6
    captured.close()
    normal.close()


def test_without_pre_allocated_buffers_capture_is_refused_at_initialization():
    with pytest.raises(CaptureRefusedError, match="no pre-allocated execution buffers.*pre_allocate_execution_buffers=1") \
            as info:
        session({"session.enable_graph_capture": "1"})
    assert info.value.reason == "no pre-allocated buffers"


def test_a_host_copy_inside_the_region_is_refused_at_initialization_naming_the_node():
    with pytest.raises(CaptureRefusedError, match=r"node 'A/MemcpyToHost' \(MemcpyToHost\) copies between the "
                                                  r"host and the device inside the captured region") as info:
        session(CAPTURE, rule="gpu(relu, mul, add); cpu(neg)")
    assert (info.value.reason, info.value.node) == ("a host copy", "A/MemcpyToHost")


def test_no_device_node_is_refused():
    with pytest.raises(CaptureRefusedError, match="no node runs on a device"):
        InferenceSession(chain(), CAPTURE, providers=["CPUExecutionProvider"])


def test_a_changed_input_shape_is_refused_at_the_run_and_the_captured_shape_still_replays():
    sess = session({**CAPTURE, "free_dimension_overrides": {"n": 2}}, shape=("n", 16))
    x = np.ones((2, 16), np.float32)
    sess.run(None, {"X": x})
    with pytest.raises(CaptureRefusedError, match=r"input 'X' has shape \(1, 16\), but the graph was captured for "
                                                  r"\(2, 16\)") as info:
        sess.run(None, {"X": x[:1]})  # smaller feeds fit the pre-allocated plan, not the captured graph
    assert info.value.reason == "a changed input shape"
    np.testing.assert_array_equal(sess.run(None, {"X": -x})[0], (-x) * 0 + (-x))
    assert sess.last_run_stats.graph == "replayed"
    sess.close()
