"""A 1-D Conv in a CPU session runs as the C 2-D Conv kernel (the CPU provider's Conv1dAs2d pass: Reshape / Conv /
Reshape, all C steps), equal to onnxruntime, with no allocation under pre-allocated buffers; without fusions it stays
one 1-D Conv (numpy)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from ort_session import InferenceSession

F = TensorProto.FLOAT


def _model():
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((16, 8, 3)) * 0.3).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1], strides=[2]), helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "c1d", [helper.make_tensor_value_info("x", F, [1, 8, 40])],
                              [helper.make_tensor_value_info("y", F, [1, 16, 20])], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("fusions", [True, False])
def test_conv1d_runs_as_the_c_2d_conv(fusions):
    model = _model()
    x = np.random.default_rng(1).standard_normal((1, 8, 40)).astype(np.float32)
    sess = InferenceSession(model, {"session.pre_allocate_execution_buffers": "1", "enable_fusions": fusions})
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    for _ in range(2):
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=0, atol=1e-5)
    stats = sess.last_run_stats
    assert stats.allocations == 0 and stats.scratch_fallbacks == 0
    # fused: Reshape, Conv, Reshape, Relu all C steps; else the numpy 1-D Conv and the C Relu
    assert (stats.nodes_run, stats.c_steps) == ((4, 4) if fusions else (2, 1))
