"""`intra_op_num_threads`: while a run lasts the CPU kernels and BLAS use the requested threads (0: the
physical cores); after it, also after a failed run, BLAS has its limits from before."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
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


def _matmul_model(gelu: bool = False) -> onnx.ModelProto:
    """A matrix-vector MatMul (a 1-D B: BLAS through numpy, not the C MatMul) and a Floor (numpy); `gelu`: a QuickGelu (a C
    kernel) in front."""
    nodes = [helper.make_node("MatMul", ["x" if gelu else "a", "b"], ["c"], name="mm"),
             helper.make_node("Floor", ["c"], ["y"], name="floor")]  # Floor: a numpy kernel (Relu, Abs are C)
    if gelu:
        nodes.insert(0, helper.make_node("QuickGelu", ["a"], ["x"], domain="com.microsoft", name="gelu", alpha=1.0))
    g = helper.make_graph(nodes, "g",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, [4, 8]),
                           helper.make_tensor_value_info("b", TensorProto.FLOAT, [8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])


FEEDS = {"a": np.ones((4, 8), np.float32), "b": np.ones(8, np.float32)}


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
    np.testing.assert_array_equal(y, np.full(4, 8, np.float32))
    assert seen == [(want, want), (want, want)]  # MatMul and Floor


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


# -- one thread pool at a time: BLAS or the C kernels ---------------------------------------------------------------
def _c_library():
    import ctypes

    from ort_cpu_ep import c_kernels

    if c_kernels.c_registry() is None:
        pytest.skip(f"the C kernels are not in use: {c_kernels.status().reason}")
    return ctypes.CDLL(str(c_kernels.library_path()))


def test_a_scope_can_give_blas_and_the_c_kernels_different_counts():
    lib, outer = _c_library(), _blas_threads()
    with ort_cpu_ep.intra_op_thread_scope(4, blas=1) as n:
        assert (n, ort_cpu_ep.intra_op_threads(), _blas_threads(), lib.ort_cpu_ep_threads()) == (4, 4, 1, 4)
        with ort_cpu_ep.intra_op_thread_scope(3, native=1):
            assert (_blas_threads(), lib.ort_cpu_ep_threads()) == (3, 1)
        assert (_blas_threads(), lib.ort_cpu_ep_threads()) == (1, 4)
    assert _blas_threads() == outer


def _pools(proto, threads):
    from ort_session import CpuExecutionProvider

    sess = InferenceSession(proto, {"intra_op_num_threads": threads}, providers=["CPUExecutionProvider"])
    (cpu,) = [p for p in sess.providers if isinstance(p, CpuExecutionProvider)]
    return cpu._thread_pools(), sess


def _int4_model() -> onnx.ModelProto:
    """a [2, 32] @ 4-bit B [32, 8] (MatMulNBits, block 32), then a matrix-vector float MatMul (BLAS) and a Relu."""
    rng = np.random.default_rng(0)
    inits = [onnx.numpy_helper.from_array(rng.integers(0, 255, (8, 1, 16), dtype=np.uint8), "B"),
             onnx.numpy_helper.from_array(rng.random(8).astype(np.float32), "scales"),
             onnx.numpy_helper.from_array(rng.random(8).astype(np.float32), "W")]
    nodes = [helper.make_node("MatMulNBits", ["a", "B", "scales"], ["q"], domain="com.microsoft", name="mnb",
                              K=32, N=8, bits=4, block_size=32),
             helper.make_node("MatMul", ["q", "W"], ["c"], name="mm"), helper.make_node("Floor", ["c"], ["y"], name="floor")]  # Floor: a numpy kernel (Relu, Abs are C)
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])


def test_int4_models_give_the_threads_to_the_c_kernels_and_fp32_ones_to_blas(seen):
    from ort_graph import zoo

    _c_library()
    int4 = _int4_model()
    assert _pools(int4, 2)[0] == (1, None)  # MatMulNBits in C: BLAS (attention scores only) on one thread
    fp32 = zoo.decoder_proto(zoo.DecoderConfig(batch=1, sequence=4, past_sequence=0))
    assert _pools(fp32, 2)[0] == (1, None)  # the weights' matmuls (MatMul) in C too
    assert _pools(_matmul_model(gelu=True), 2)[0] == (None, 1)  # BLAS has the matmul; the C QuickGelu one thread
    w = onnx.numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    cnn = helper.make_model(helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w]), opset_imports=[helper.make_opsetid("", 17)])
    assert _pools(cnn, 2)[0] == (1, None)  # a CNN: its C Convs take the threads (no numpy matmul needs BLAS's)
    assert _pools(int4, 1)[0] == (None, None)
    assert _pools(_matmul_model(), 2)[0] == (None, None)  # no C kernel: both pools as asked
    _, sess = _pools(int4, 2)
    seen.clear()
    (y,) = sess.run(None, {"a": np.ones((2, 32), np.float32)})
    want = ort.InferenceSession(int4.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"a": np.ones((2, 32), np.float32)})[0]
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    assert seen == [(1, 2), (1, 2)]  # the numpy MatMul and Floor saw BLAS at 1, intra-op threads 2
