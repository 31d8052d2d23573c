"""A small CNN budgeted and run on the emulated CUDA device (ort_cuda_ep.testing.EmulatingDriver: the real
cubins' launches executed in numpy as the kernels compute): its Conv nodes (plain, depthwise with
auto_pad, strided, 1x1, with and without bias) are claimed and placed on the device with an exact
(zero) workspace, and the outputs match onnxruntime's CPU run of the same model."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from ort_session import InferenceSession

pytest.importorskip("ort_cuda_ep", reason="ort-cuda-ep is not installed")
from ort_cuda_ep.testing import EmulatingDriver, install_driver  # noqa: E402

CUDA = "CUDAExecutionProvider"


def small_cnn(seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)

    def init(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)

    inits = [init("w1", 8, 3, 3, 3), init("b1", 8), init("w2", 8, 1, 3, 3), init("w3", 16, 8, 3, 3), init("b3", 16),
             init("w4", 12, 16, 1, 1), init("fc_w", 10, 12), init("fc_b", 10)]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], name="dw", group=8, auto_pad="SAME_UPPER"),
        helper.make_node("Add", ["c2", "r1"], ["a2"], name="residual"),
        helper.make_node("Conv", ["a2", "w3", "b3"], ["c3"], name="down", strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c3"], ["r3"], name="relu3"),
        helper.make_node("Conv", ["r3", "w4"], ["c4"], name="pointwise"),
        helper.make_node("GlobalAveragePool", ["c4"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["logits"], name="fc", transB=1),
    ]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 12, 12])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.parametrize("budget", ["cuda:24KiB", "cuda:1GiB"])
def test_a_cnn_budgeted_on_the_emulated_device_matches_onnxruntime(monkeypatch, budget):
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the reference")
    driver = install_driver(monkeypatch, EmulatingDriver())
    model = small_cnn()
    x = np.random.default_rng(1).standard_normal((2, 3, 12, 12)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = InferenceSession(model, {"budgets": budget, "free_dimension_overrides": {"batch": 2},
                                        "session.pre_allocate_execution_buffers": "1"},
                                providers=[CUDA, "CPUExecutionProvider"])
    convs = [n for n in sess.model.graph.nodes if n.op_type == "Conv"]
    on_cuda = [n.name for n in convs if n.ep == CUDA]
    if budget == "cuda:1GiB":
        assert len(on_cuda) == 4, [(n.name, n.ep) for n in convs]
    else:  # a tight budget still places some convolutions on the device, and the rest run on the CPU
        assert 1 <= len(on_cuda) < 4, on_cuda
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    for _ in range(2):
        np.testing.assert_allclose(sess.run(None, {"x": x})[0], want, rtol=1e-4, atol=1e-4)
        assert sess.last_run_stats.allocations == 0
    use = sess.device_memory()["cuda:0"]
    assert use["peak"] <= use["capacity"]
    assert "conv2d_f32" in {c[1] for c in driver.calls if c[0] == "launch"}
    sess.close()
    assert driver.memory == {}
