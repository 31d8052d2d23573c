"""The C float32 MatMul and FusedMatMul (csrc/sgemm_kernel.c, csrc/sgemm_math.c) against a float64 reference,
the numpy kernels and onnxruntime, one node at a time through the CPU provider: every A rank, batched and
broadcast B, transposed B and alpha, ragged tile edges in M, K and N, the few-row (streamed) and packed paths,
each instruction-set path, threads, and which nodes it takes."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import ort_graph
from ort_cpu_ep import CpuExecutionProvider, c_kernels, intra_op_thread_scope
from ort_cpu_ep.testing import one_node_model as _model
from ort_cpu_ep.testing import run_one_node as _run

F = TensorProto.FLOAT




def _matmul(a_shape, b_shape, *, constant_b=True, seed=0, dtype=F):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    out = list(np.matmul(np.zeros(a_shape, np.float32), np.zeros(b_shape, np.float32)).shape)
    node = helper.make_node("MatMul", ["a", "b"], ["y"])
    inputs = [helper.make_tensor_value_info("a", dtype, list(a_shape))]
    inits = [numpy_helper.from_array(b, "b")] if constant_b else []
    if not constant_b:
        inputs.append(helper.make_tensor_value_info("b", dtype, list(b_shape)))
    model = _model(node, inputs, [helper.make_tensor_value_info("y", dtype, out)], inits)
    feeds = {"a": a} if constant_b else {"a": a, "b": b}
    return model, feeds, a, b


def _check(got, a, b):
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    assert got.shape == ref.shape and got.dtype == np.float32
    scale = np.sqrt(a.shape[-1]) * max(1.0, float(np.abs(ref).max(initial=0.0)))
    np.testing.assert_allclose(got, ref, rtol=0, atol=2e-6 * scale)


@pytest.mark.parametrize("a_shape,K,N", [
    ((5,), 5, 3),            # A of rank 1: one row, Y of rank 1
    ((1, 64), 64, 64), ((3, 300), 300, 33), ((6, 257), 257, 130),  # few rows: B streamed once
    ((7, 256), 256, 64), ((13, 1), 1, 7), ((12, 513), 513, 65),    # packed: ragged tiles in M, K and N
    ((2, 65, 40), 40, 1030), ((2, 3, 5, 96), 96, 17),              # leading dimensions are rows
    ((130, 600), 600, 515),                                         # several K blocks, a ragged column block
])
def test_c_matmul_matches_a_float64_reference_and_the_numpy_kernel(library, a_shape, K, N):
    model, feeds, a, b = _matmul(a_shape, (K, N), seed=K * 31 + N)
    got = _run(model, feeds, "C")["y"]
    _check(got, a, b)
    np.testing.assert_allclose(got, _run(model, feeds, "numpy")["y"], rtol=1e-5, atol=1e-5 * np.sqrt(K))


def test_empty_sums_and_empty_outputs(library):
    model, feeds, a, b = _matmul((4, 0), (0, 5))
    np.testing.assert_array_equal(_run(model, feeds, "C")["y"], np.zeros((4, 5), np.float32))
    model, feeds, a, b = _matmul((0, 3), (3, 5))
    assert _run(model, feeds, "C")["y"].shape == (0, 5)


@pytest.mark.parametrize("M", [1, 6, 7, 29])
def test_every_instruction_set_path_matches_the_reference(isa_cap, M):
    model, feeds, a, b = _matmul((M, 300), (300, 77), seed=M)
    _check(_run(model, feeds, "C")["y"], a, b)


@pytest.mark.parametrize("M", [1, 2, 7, 128, 160])
@pytest.mark.parametrize("K,N", [(576, 577), (77, 131)])
@pytest.mark.parametrize("threads", [1, 2])
def test_prefill_and_decode_rows_match_the_reference_and_onnxruntime(library, M, K, N, threads):
    """The streamed (few rows) and packed paths at decode and prefill row counts, odd K and N, 1 and 2 threads
    (16-column items streamed, row blocks packed), against float64 and onnxruntime (MLAS: the same k order within
    blocks of 256)."""
    import onnxruntime as ort
    model, feeds, a, b = _matmul((M, K), (K, N), seed=M + K)
    got = _run(model, feeds, "C", threads=threads)["y"]
    _check(got, a, b)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    ref = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.sqrt(K) * np.abs(ref).max())


@pytest.mark.parametrize("a_shape,b_shape", [((2, 512), (512, 1000)), ((50, 512), (512, 1000)),
                                             ((3, 40, 64), (3, 64, 300)),
                                             ((128, 576), (576, 576)),   # shares end inside 64-column panels
                                             ((96, 100), (100, 40)),     # 3 items for 3 threads: rows split too
                                             ((160, 64), (64, 1536))])   # 96 items: even chunks of 32
def test_threads_give_the_same_bits(library, a_shape, b_shape):
    """Threads split Y's (batch, row block, column) items; each element's sums run in the same order whatever
    thread computes it."""
    lib = ctypes.CDLL(str(c_kernels.library_path()))
    model, feeds, a, b = _matmul(a_shape, b_shape, seed=a_shape[0])
    results = []
    for n in (1, 3):
        with intra_op_thread_scope(n):
            assert lib.ort_cpu_ep_threads() == n
            results.append(_run(model, feeds, "C", threads=n)["y"])
    np.testing.assert_array_equal(results[0], results[1])
    _check(results[0], a, b)


def test_a_b_fed_at_run_time_is_taken_too(library):
    model, feeds, a, b = _matmul((9, 40), (40, 20), constant_b=False)
    _check(_run(model, feeds, "C")["y"], a, b)


@pytest.mark.parametrize("a_shape,b_shape", [
    ((2, 4, 8), (2, 8, 3)), ((1, 4, 8), (1, 8, 3)),          # batched, one batch
    ((3, 1, 7, 20), (1, 5, 20, 70)), ((7, 20), (4, 20, 9)),   # broadcast batch axes; A shared by every batch
    ((2, 3, 9, 300), (3, 300, 130)),                          # A with more batch axes than B; packed tiles
])
def test_batched_b_matches_the_reference(library, a_shape, b_shape):
    model, feeds, a, b = _matmul(a_shape, b_shape, constant_b=False, seed=sum(a_shape))
    got = _run(model, feeds, "C")["y"]
    _check(got, a, b)
    np.testing.assert_allclose(got, _run(model, feeds, "numpy")["y"], rtol=1e-5, atol=1e-5 * np.sqrt(b_shape[-2]))


def _fused(a, b, **attrs):
    node = helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain="com.microsoft", **attrs)
    bt = np.swapaxes(b, -1, -2) if attrs.get("transB") else b
    out = list(np.matmul(np.zeros(a.shape, np.float32), np.zeros(bt.shape, np.float32)).shape)
    return _model(node, [helper.make_tensor_value_info("a", F, list(a.shape)), helper.make_tensor_value_info("b", F, list(b.shape))],
                  [helper.make_tensor_value_info("y", F, out)]), bt


@pytest.mark.parametrize(("M", "K", "N"), [(1, 300, 77), (6, 301, 9), (2, 15, 5), (1, 9216, 33)])
@pytest.mark.parametrize("threads", [1, 2])
def test_a_transposed_b_of_a_few_rows_streams_on_every_instruction_set_path(isa_cap, M, K, N, threads):
    """A few rows with B transposed (Gemm transB, FusedMatMul transB) take dot products of B's rows, each read once
    (they packed all of B per run: 151 MB for alexnet's first Gemm, 2.4x onnxruntime's time): ragged K and N."""
    rng = np.random.default_rng(M * K + N)
    a, b = rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal((K, N)).astype(np.float32)
    model, bt = _fused(a, np.ascontiguousarray(b.T), transB=1, alpha=0.5)
    got = _run(model, {"a": a, "b": np.ascontiguousarray(b.T)}, "C", threads=threads)["y"]
    _check(got, a * 0.5, b)


@pytest.mark.parametrize("a_shape,b_shape,trans_b,alpha", [
    ((1, 4, 64, 64), (1, 4, 300, 64), 1, 0.125),   # the attention's scores: Q @ K^T / sqrt(d)
    ((1, 4, 8, 64), (1, 4, 513, 64), 1, 0.125),    # decode: 8 query rows (a group of 8 heads), packed from K's rows
    ((2, 5, 30), (2, 30, 40), 0, -1.5),
    ((6, 30), (40, 30), 1, 1.0),                   # a 2-D transposed B
])
def test_fused_matmul_matches_the_reference_and_onnxruntime(library, a_shape, b_shape, trans_b, alpha):
    rng = np.random.default_rng(len(a_shape) + trans_b)
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    model, bt = _fused(a, b, transB=trans_b, alpha=alpha)
    got = _run(model, {"a": a, "b": b}, "C")["y"]
    ref = alpha * np.matmul(a.astype(np.float64), bt.astype(np.float64))
    np.testing.assert_allclose(got, ref, rtol=0, atol=2e-6 * np.sqrt(a.shape[-1]) * max(1.0, np.abs(ref).max()))
    np.testing.assert_allclose(got, _run(model, {"a": a, "b": b}, "numpy")["y"], rtol=1e-5, atol=1e-5)
    import onnxruntime as ort
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"a": a, "b": b})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.sqrt(a.shape[-1]))


@pytest.mark.parametrize("attrs", [{"transA": 1}, {"transBatchA": 1}, {"transBatchB": 1}])
def test_fused_matmul_transposes_of_a_and_batches_go_to_numpy(library, attrs):
    a, b = np.ones((2, 4, 4), np.float32), np.ones((2, 4, 4), np.float32)
    model, _ = _fused(a, b, **attrs)
    m = ort_graph.from_proto(model)
    ep = CpuExecutionProvider(m.graph, m.opset_imports)
    assert c_kernels.kernel_language(ep.entry(m.graph.nodes[0])) == "numpy"


@pytest.mark.parametrize("a_shape,b_shape", [((4, 8), (8,)), ((8,), (2, 8, 3))])
def test_vector_operands_with_batches_go_to_numpy(library, a_shape, b_shape):
    model, _, _, _ = _matmul(a_shape, b_shape)
    m = ort_graph.from_proto(model)
    ep = CpuExecutionProvider(m.graph, m.opset_imports)
    assert c_kernels.kernel_language(ep.entry(m.graph.nodes[0])) == "numpy"


def test_float16_goes_to_numpy(library):
    model, _, _, _ = _matmul((4, 8), (8, 3), constant_b=False, dtype=TensorProto.FLOAT16)
    m = ort_graph.from_proto(model)
    ep = CpuExecutionProvider(m.graph, m.opset_imports)
    assert c_kernels.kernel_language(ep.entry(m.graph.nodes[0])) == "numpy"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(m=st.integers(1, 40), k=st.integers(0, 300), n=st.integers(1, 150), batch=st.sampled_from(
    [(), (2,), (1, 3), (2, 1)]), b_batch=st.sampled_from([None, (), (1,), (2,)]), trans_b=st.booleans(),
    alpha=st.sampled_from([1.0, 0.5, -2.0]))
def test_any_shape_matches_a_float64_reference(library, m, k, n, batch, b_batch, trans_b, alpha):
    """MatMul (alpha 1, no transB) or FusedMatMul over random sizes, batch axes and broadcasting."""
    b_shape = (*(batch if b_batch is None else b_batch), *((n, k) if trans_b else (k, n)))
    a_shape = (*batch, m, k)
    try:
        np.broadcast_shapes(a_shape[:-2], b_shape[:-2])
    except ValueError:
        assume(False)  # batch axes that do not broadcast: not a valid model
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    fused = trans_b or alpha != 1.0
    if fused:
        model, bt = _fused(a, b, transB=int(trans_b), alpha=alpha)
    else:
        model, feeds, _, _ = _matmul(a_shape, b_shape, constant_b=False)
        bt = b
    got = _run(model, {"a": a, "b": b}, "C")["y"]
    ref = alpha * np.matmul(a.astype(np.float64), bt.astype(np.float64))
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=0, atol=2e-6 * np.sqrt(max(k, 1)) * max(1.0, np.abs(ref).max(initial=0)))


def test_inputs_that_do_not_multiply_are_a_clear_error(library):
    """Shapes the model declared but the feeds break (a model file is untrusted input): the kernel's error, not
    a crash or a wrong result."""
    import ort_abi

    model, feeds, a, b = _matmul((4, 6), (6, 3), constant_b=False)
    with pytest.raises(ort_abi.KernelError, match=r"MatMul: A's last dimension 5 does not match B's K dimension 6"):
        _run(model, {"a": np.ones((4, 5), np.float32), "b": b}, "C")
