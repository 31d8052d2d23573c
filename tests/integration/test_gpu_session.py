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
