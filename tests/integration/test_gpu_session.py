"""The decoder demo split across CUDA and CPU (issue 8's GPU criterion): outputs match the CPU-only run.
Runs only where a CUDA device is present; packages/ort-cuda-ep/gpu_check.py runs it on a GPU machine."""

import warnings

import numpy as np
import pytest

import ort_partition
from ort_graph import zoo
from ort_session import InferenceSession

pytestmark = pytest.mark.gpu
DIMS = {"batch": 1, "sequence": 16, "past_sequence": 0}


def _cuda_or_skip():
    ort_cuda_ep = pytest.importorskip("ort_cuda_ep", reason="ort-cuda-ep is not installed")
    ep = ort_cuda_ep.CudaExecutionProvider()
    if not ep.can_run:
        pytest.skip(f"no CUDA driver/device: {ep.unavailable_reason}")


@pytest.mark.parametrize("budget", ["cuda:12MiB", "cuda:1GiB"])
def test_demo_decoder_split_across_cuda_and_cpu_matches_cpu_only(budget):
    _cuda_or_skip()
    feeds = zoo.decoder_inputs(zoo.DEMO_CONFIG, 1, 16, 0)
    cpu = InferenceSession(zoo.demo_decoder(), {"free_dimension_overrides": DIMS})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        split = InferenceSession(zoo.demo_decoder(), {"free_dimension_overrides": DIMS, "budgets": budget,
                                                      "session.pre_allocate_execution_buffers": "1"},
                                 providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    on_cuda = [n for n in split.model.graph.nodes if n.ep == "CUDAExecutionProvider"]
    assert on_cuda, split.plan.to_table()
    for _ in range(2):
        for a, b in zip(split.run(None, feeds), cpu.run(None, feeds)):
            np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-3)
        assert split.last_run_stats.allocations == 0  # values, weights and workspace stay in device memory
    use = split.device_memory()["cuda:0"]
    assert use["peak"] <= use["capacity"] == ort_partition.parse_bytes(budget.split(":", 1)[1])
    split.close()


def test_cuda_graph_capture_replays_equal_cpu_runs_on_the_device():
    """session.enable_graph_capture on a real device: cuStreamBeginCapture .. cuGraphLaunch through cuda-python."""
    _cuda_or_skip()
    import importlib.util
    import pathlib

    spec = importlib.util.spec_from_file_location("_capture_models", pathlib.Path(__file__).with_name(
        "test_cuda_graph_capture.py"))
    models = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(models)  # the same model and options the emulated test captures
    CAPTURE, mlp = models.CAPTURE, models.mlp

    sess, cpu = InferenceSession(mlp(), CAPTURE, providers=["CUDAExecutionProvider", "CPUExecutionProvider"]), \
        InferenceSession(mlp())
    rng = np.random.default_rng(2)
    graphs = []
    for _ in range(3):
        x = rng.standard_normal((2, 16)).astype(np.float32)
        np.testing.assert_allclose(sess.run(None, {"X": x})[0], cpu.run(None, {"X": x})[0], rtol=1e-4, atol=1e-5)
        graphs.append(sess.last_run_stats.graph)
    assert graphs == ["captured", "replayed", "replayed"]
    sess.close()


def test_mapped_memory_is_read_by_a_kernel_and_seen_in_place_on_the_device():
    _cuda_or_skip()
    import ort_abi
    from ort_cuda_ep import CudaExecutionProvider
    from ort_cuda_ep._launch import ScratchOnly, compute
    from ort_cuda_ep._ops import find_spec

    ep = CudaExecutionProvider()
    rt, mapped = ep.runtime, ep.mapped_allocator
    x = ort_abi.DeviceTensor(mapped.alloc(16), (4,), np.float32)
    y = ort_abi.DeviceTensor(mapped.alloc(16), (4,), np.float32)
    x.buffer.numpy().view(np.float32)[:] = [-1, 2, -3, 4]
    compute(rt, find_spec("Relu", "", 17), "relu", [x], {}, ScratchOnly(rt), 1, out=lambda i, s, d: y)
    rt.synchronize()
    assert y.buffer.numpy().view(np.float32).tolist() == [0, 2, 0, 4]
    mapped.free(x.buffer)
    mapped.free(y.buffer)
    ep.close()
