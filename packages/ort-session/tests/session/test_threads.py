"""`intra_op_num_threads`: while a run lasts the CPU kernels and BLAS use the requested threads (0: the
physical cores); after it, also after a failed run, BLAS has its limits from before."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import threadpoolctl
from onnx import TensorProto, helper

import ort_cpu_ep
from ort_cpu_ep._provider import NumpyKernel
from ort_session import InferenceSession, KernelRunError


def _blas_threads() -> int:
    blas = [lib for lib in threadpoolctl.threadpool_info() if lib["user_api"] == "blas"]
    if not blas:
        pytest.skip("threadpoolctl finds no BLAS library in this numpy")
    return blas[0]["num_threads"]


def _matmul_model() -> onnx.ModelProto:
    g = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["c"], name="mm"),
                           helper.make_node("Relu", ["c"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, [4, 8]),
                           helper.make_tensor_value_info("b", TensorProto.FLOAT, [8, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


FEEDS = {"a": np.ones((4, 8), np.float32), "b": np.ones((8, 4), np.float32)}


@pytest.fixture
def seen(monkeypatch):
    """What every CPU kernel sees while it computes: (BLAS threads, ort_cpu_ep.intra_op_threads())."""
    record: list[tuple[int, int]] = []
    real = NumpyKernel.compute

    def spy(self, ctx):
        record.append((_blas_threads(), ort_cpu_ep.intra_op_threads()))
        return real(self, ctx)

    monkeypatch.setattr(NumpyKernel, "compute", spy)
    return record


@pytest.mark.parametrize("providers", [None, ["SimulatedGPUExecutionProvider"]])
@pytest.mark.parametrize("threads", [1, 2, 0])
def test_a_run_uses_the_requested_threads_and_restores_blas_after(seen, threads, providers):
    _blas_threads()
    want = threads or ort_cpu_ep.physical_cores()
    sess = InferenceSession(_matmul_model(), {"intra_op_num_threads": threads}, providers=providers)
    with threadpoolctl.threadpool_limits(3, user_api="blas"):  # a count no run asks for
        (y,) = sess.run(None, FEEDS)
        assert _blas_threads() == 3
    np.testing.assert_array_equal(y, np.full((4, 4), 8, np.float32))
    assert seen == [(want, want), (want, want)]  # MatMul and Relu


def test_a_failed_run_restores_blas(monkeypatch):
    _blas_threads()

    def fail(self, ctx):
        raise RuntimeError("kernel failed")

    monkeypatch.setattr(NumpyKernel, "compute", fail)
    sess = InferenceSession(_matmul_model(), {"intra_op_num_threads": 1})
    with threadpoolctl.threadpool_limits(3, user_api="blas"):
        with pytest.raises(KernelRunError, match="kernel failed"):
            sess.run(None, FEEDS)
        assert _blas_threads() == 3


def test_the_providers_get_the_option():
    sess = InferenceSession(_matmul_model(), {"intra_op_num_threads": 1}, providers=["SimulatedGPUExecutionProvider"])
    assert [(p.name, p.threads) for p in sess.providers] == [("SimulatedGPUExecutionProvider", 1),
                                                             ("CPUExecutionProvider", 1)]
