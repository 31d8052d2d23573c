"""CUDA graphs through a whole session on ort_cuda_ep.testing.EmulatingDriver: the first pre-allocated run
captures the CUDA region (cuStreamBeginCapture .. cuStreamEndCapture, cuGraphInstantiate, one cuGraphLaunch),
later runs launch the graph only (no per-node launch call from the host); replayed runs equal CPU runs, and a
kernel that does host work inside the region fails the capture at the first run, naming the node."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from ort_session import InferenceSession
from ort_session._errors import CaptureRefusedError

pytest.importorskip("ort_cuda_ep", reason="ort-cuda-ep is not installed")
from ort_cuda_ep.testing import EmulatingDriver, install_driver  # noqa: E402

CUDA = ["CUDAExecutionProvider", "CPUExecutionProvider"]
CAPTURE = {"session.pre_allocate_execution_buffers": "1", "session.enable_graph_capture": "1", "enable_fusions": False}


def mlp():
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "W"),
             numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "B")]
    nodes = [helper.make_node("MatMul", ["X", "W"], ["M"], name="mm"), helper.make_node("Add", ["M", "B"], ["A"], name="add"),
             helper.make_node("Relu", ["A"], ["R"], name="relu"), helper.make_node("Softmax", ["R"], ["Y"], name="sm", axis=-1)]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 16])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def driver(monkeypatch):
    return install_driver(monkeypatch, EmulatingDriver())


def test_replayed_runs_equal_cpu_runs_and_launch_only_the_graph(driver):
    sess, cpu = InferenceSession(mlp(), CAPTURE, providers=CUDA), InferenceSession(mlp())
    assert all(n.ep == "CUDAExecutionProvider" for n in sess.order if n.op_type not in ("MemcpyToHost",))
    rng = np.random.default_rng(1)
    for k in range(3):
        x = rng.standard_normal((2, 16)).astype(np.float32)
        driver.calls.clear()
        got, = sess.run(None, {"X": x})
        np.testing.assert_allclose(got, cpu.run(None, {"X": x})[0], rtol=1e-5, atol=1e-6)
        kinds = [c[0] for c in driver.calls]
        if k == 0:
            assert sess.last_run_stats.graph == "captured"
            assert kinds == ["HtoD", "stream_create", "begin_capture", *["capture"] * 4, "end_capture", "graph_launch",
                             *["launch"] * 4, "DtoH"]
        else:  # the input copy, one graph launch (the driver replays its 4 recorded kernels), the output copy
            assert sess.last_run_stats.graph == "replayed"
            assert kinds == ["HtoD", "graph_launch", *["launch"] * 4, "DtoH"]
    sess.close()
    assert ("graph_destroy",) in driver.calls and driver.memory == {}


def test_host_work_inside_the_region_fails_the_capture_naming_the_node(driver, monkeypatch):
    from ort_cuda_ep import _kernel

    compute = _kernel.CudaKernel.compute

    def reads_back(self, ctx):  # like a kernel that reads a device value on the host (GQA's seqlens)
        if self.node_name == "relu":
            self.ep.runtime.to_host(ctx.inputs[0])
        compute(self, ctx)

    monkeypatch.setattr(_kernel.CudaKernel, "compute", reads_back)
    sess = InferenceSession(mlp(), CAPTURE, providers=CUDA)
    with pytest.raises(CaptureRefusedError, match=r"node 'relu' \(Relu\) on CUDAExecutionProvider: a 64-byte "
                                                  r"device-to-host copy inside the captured region") as info:
        sess.run(None, {"X": np.ones((2, 16), np.float32)})
    assert (info.value.reason, info.value.node) == ("a 64-byte device-to-host copy", "relu")
    assert driver.capturing is None  # aborted: the stream is no longer capturing
    monkeypatch.setattr(_kernel.CudaKernel, "compute", compute)
    sess.run(None, {"X": np.ones((2, 16), np.float32)})  # the next run captures again
    assert sess.last_run_stats.graph == "captured"
    sess.close()
