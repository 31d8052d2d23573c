"""The C float32 Gemm (csrc/gemm_kernel.c: the MatMul kernel's sgemm, then beta * C) against the numpy kernel and
onnxruntime, one node at a time through the CPU provider: transB, alpha, beta, every broadcast of C, no C, a few rows
(streamed B) and many (packed), thread counts, the workspace it declares, and which nodes it takes."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_abi
from ort_cpu_ep.testing import (
    c_kernel_workspace,
    chosen_language,
    one_node_model,
    onnxruntime_outputs,
    run_one_node,
)

F = TensorProto.FLOAT


def _gemm(m, k, n, c_shape=(), *, trans_b=0, seed=0, **attrs):
    rng = np.random.default_rng(seed)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    inits = [numpy_helper.from_array(b, "b")]
    inputs = ["a", "b"]
    if c_shape is not None:
        inits.append(numpy_helper.from_array(np.asarray(rng.standard_normal(c_shape)).astype(np.float32), "c"))
        inputs.append("c")
    model = one_node_model(helper.make_node("Gemm", inputs, ["y"], transB=trans_b, **attrs),
                           [helper.make_tensor_value_info("a", F, [m, k])],
                           [helper.make_tensor_value_info("y", F, None)], inits)
    return model, {"a": rng.standard_normal((m, k)).astype(np.float32)}




def _check(model, feeds, threads=None):
    got = run_one_node(model, feeds, "C", threads=threads)["y"]
    for want in (run_one_node(model, feeds, "numpy")["y"], onnxruntime_outputs(model, feeds)[0]):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    return got


@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize(("m", "k", "n", "c_shape"), [
    (1, 512, 214, (1, 214)), (1, 200, 2, (2,)), (3, 17, 9, ()), (7, 33, 70, (7, 1)), (64, 130, 90, (64, 90)),
    (5, 8, 6, None), (2, 0, 3, (3,)), (1, 1, 1, (1,))])
def test_gemm_matches_numpy_and_onnxruntime(m, k, n, c_shape, trans_b):
    _check(*_gemm(m, k, n, c_shape, trans_b=trans_b))


@pytest.mark.parametrize(("alpha", "beta"), [(0.5, 1.0), (1.0, 0.0), (2.0, -1.5)])
def test_gemm_alpha_beta(alpha, beta):
    _check(*_gemm(9, 20, 40, (40,), alpha=alpha, beta=beta))


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_gemm_same_result_at_every_thread_count(threads):
    model, feeds = _gemm(70, 300, 500, (500,))
    one = run_one_node(model, feeds, "C", threads=1)["y"]
    np.testing.assert_array_equal(_check(model, feeds, threads=threads), one)


def test_gemm_declares_its_packing_buffers():
    model, _ = _gemm(64, 130, 90, (90,))
    estimate, slots = c_kernel_workspace(model, [(64, 130), (130, 90), (90,)])
    (slot,) = slots
    assert slot.slot_id == 0 and slot.size_bytes > 0 and estimate == slot.size_bytes
    model, _ = _gemm(1, 130, 90, (90,))  # one row streams B: nothing to pack
    assert c_kernel_workspace(model, [(1, 130), (130, 90), (90,)]) == (0, [])


def test_gemm_shapes_that_do_not_multiply_are_an_error():
    model, feeds = _gemm(3, 4, 5, (5,))
    feeds["a"] = np.zeros((3, 6), np.float32)
    with pytest.raises(ort_abi.KernelError, match=r"A \[3, 6\] and B \[4, 5\] do not multiply"):
        run_one_node(model, feeds, "C")


def test_nodes_the_c_gemm_takes():
    assert chosen_language(_gemm(2, 3, 4)[0]) == "C"
    assert chosen_language(_gemm(2, 3, 4, transA=1)[0]) == "numpy"
