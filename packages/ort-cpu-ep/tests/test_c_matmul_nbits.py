"""The C MatMulNBits (csrc/, loaded through ort_abi.load_kernel_library) against the numpy kernel and onnxruntime.

The library is built in place when missing (`_cbuild`); without a compiler these tests skip and the provider
uses the numpy kernel (test_provider_falls_back_without_the_library checks that path)."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import ort_abi
import ort_graph
from ort_cpu_ep import CpuExecutionProvider, _cbuild, c_kernels, intra_op_thread_scope
from ort_cpu_ep.ops.ops_extra_quant import dequantize_weight, fake_quantize_a

MS = "com.microsoft"


@pytest.fixture(scope="module")
def entry() -> ort_abi.KernelEntry:
    if not c_kernels.library_path().is_file():
        try:
            _cbuild.compiler()
        except _cbuild.BuildFailed as e:  # the one real reason: no compiler on this machine
            pytest.skip(f"C kernels cannot be built here: {e}")
        _cbuild.build()  # with a compiler present, a build failure is a test failure
        c_kernels._load.cache_clear()
    registry = c_kernels.c_registry()
    assert registry is not None, c_kernels.status()
    found = registry.find("MatMulNBits", MS, 1, "CPUExecutionProvider", input_types=[1, 2, 1, 0, 0, 0])
    assert found is not None and found.has_estimate
    return found


def _weights(rng, K, N, bits, bs, zp_kind):
    kb = (K + bs - 1) // bs
    b = rng.integers(0, 256, (N, kb, bs * bits // 8), dtype=np.uint8)
    scales = (rng.random((N, kb)) * 0.1 + 0.01).astype(np.float32)
    zp = None
    if zp_kind == "packed":
        zp = rng.integers(0, 256, (N, (kb * bits + 7) // 8), dtype=np.uint8)
    elif zp_kind == "float":
        zp = (rng.random((N, kb)) * 2**bits).astype(np.float32)
    return b, scales, zp


def _run_c(entry, a, b, scales, zp, bias, **attrs):
    info = ort_abi.KernelInfo("/t/MatMulNBits", "MatMulNBits", input_count=6, output_types=(TensorProto.FLOAT,),
                              attributes=attrs)
    kernel = entry.create_kernel(info)
    ctx = ort_abi.KernelContext([a, b, scales, zp, None, bias], output_types=[TensorProto.FLOAT])
    kernel.compute(ctx)
    kernel.release()
    return ctx.outputs[0]


def _reference(a, b, scales, zp, bias, *, K, N, bits, block_size, accuracy_level):
    w = dequantize_weight(b, scales, zp, K=K, N=N, bits=bits, block_size=block_size).astype(np.float64)
    a2 = a.reshape(-1, K)
    if accuracy_level == 4 and (zp is None or zp.dtype == np.uint8):
        a2 = fake_quantize_a(a2, block_size)  # the numpy kernel's model of onnxruntime's int8 activations
    y = a2.astype(np.float64) @ w.T + (0 if bias is None else bias)
    return y.reshape(*a.shape[:-1], N)


@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("bs", [16, 32, 64, 128, 256])
@pytest.mark.parametrize("zp_kind", ["none", "packed", "float"])
@pytest.mark.parametrize("accuracy_level", [0, 4])
@pytest.mark.parametrize("M", [1, 3, 9])
def test_c_kernel_matches_the_numpy_reference(entry, bits, bs, zp_kind, accuracy_level, M):
    rng = np.random.default_rng(bits * 1000 + bs + M)
    K, N = (bs * 2 + 7, 37) if bs < 256 else (300, 19)  # a ragged last block, N not a multiple of the panel
    b, scales, zp = _weights(rng, K, N, bits, bs, zp_kind)
    a = rng.standard_normal((M, K)).astype(np.float32)
    bias = rng.standard_normal(N).astype(np.float32) if M == 3 else None
    attrs = dict(K=K, N=N, bits=bits, block_size=bs, accuracy_level=accuracy_level)
    got = _run_c(entry, a, b, scales, zp, bias, **attrs)
    ref = _reference(a, b, scales, zp, bias, **attrs)
    assert got.shape == (M, N) and got.dtype == np.float32
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


@pytest.fixture(params=[0, 1, 2, 3], ids=["portable", "avx2", "vnni256", "avx512vnni"])
def isa_cap(request, entry):
    """Each instruction-set path of the library (those this CPU lacks fall back to the next narrower one)."""
    lib = ctypes.CDLL(str(c_kernels.library_path()))
    before = lib.ort_cpu_ep_isa_cap()
    assert before == 3  # the default: every path the CPU has
    lib.ort_cpu_ep_set_isa_cap(request.param)
    yield request.param
    lib.ort_cpu_ep_set_isa_cap(before)


@pytest.mark.parametrize("zp_kind", ["none", "packed"])
@pytest.mark.parametrize("accuracy_level", [0, 4])
@pytest.mark.parametrize("M", [1, 2, 6, 9])
def test_every_instruction_set_path_matches_the_reference(entry, isa_cap, zp_kind, accuracy_level, M):
    rng = np.random.default_rng(M * 7 + accuracy_level)
    K, N = 200, 37  # blocks of 32 (the SIMD paths), a ragged last one
    b, scales, zp = _weights(rng, K, N, 4, 32, zp_kind)
    a = rng.standard_normal((M, K)).astype(np.float32)
    bias = rng.standard_normal(N).astype(np.float32)
    attrs = dict(K=K, N=N, bits=4, block_size=32, accuracy_level=accuracy_level)
    got = _run_c(entry, a, b, scales, zp, bias, **attrs)
    ref = _reference(a, b, scales, zp, bias, **attrs)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


def _cpu_flags() -> set[str]:
    try:
        text = open("/proc/cpuinfo").read()
    except OSError:
        return set()
    return set(next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), []))


@pytest.mark.parametrize("accuracy_level,M", [(0, 1), (0, 3), (0, 9), (4, 1), (4, 9)])
def test_avx512_paths_run_where_the_cpu_has_them(entry, accuracy_level, M):
    """At the default cap the AVX-512 kernels compute: the VNNI int8 kernel and the fp32 GEMV sum in another order
    than the 256-bit ones (cap 2), so bit-identical outputs would mean they never ran; the fp32 GEMM's AVX-512 panel
    (M > 4) dequantizes exactly as the scalar one and feeds the same micro-kernel, so there the outputs are equal."""
    need = {"avx512f", "avx512bw", "avx512vl"} | ({"avx512_vnni"} if accuracy_level == 4 else set())
    if not need <= _cpu_flags():
        pytest.skip(f"this CPU lacks {sorted(need - _cpu_flags())}")
    lib = ctypes.CDLL(str(c_kernels.library_path()))
    rng = np.random.default_rng(5)
    K, N = 1024 + 7, 67
    b, scales, zp = _weights(rng, K, N, 4, 32, "packed")
    a = rng.standard_normal((M, K)).astype(np.float32)
    attrs = dict(K=K, N=N, bits=4, block_size=32, accuracy_level=accuracy_level)
    wide = _run_c(entry, a, b, scales, zp, None, **attrs)
    lib.ort_cpu_ep_set_isa_cap(2)
    try:
        narrow = _run_c(entry, a, b, scales, zp, None, **attrs)
    finally:
        lib.ort_cpu_ep_set_isa_cap(3)
    if accuracy_level == 0 and M > 4:
        np.testing.assert_array_equal(wide, narrow)
    else:
        assert not np.array_equal(wide, narrow)
    ref = _reference(a, b, scales, zp, None, **attrs)
    np.testing.assert_allclose(wide, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


def test_int8_path_is_not_the_fp32_path(entry):
    """accuracy_level 4 must quantize A (otherwise the comparison above could not tell the paths apart)."""
    rng = np.random.default_rng(1)
    K, N = 128, 32
    b, scales, _ = _weights(rng, K, N, 4, 32, "none")
    a = rng.standard_normal((1, K)).astype(np.float32)
    y0 = _run_c(entry, a, b, scales, None, None, K=K, N=N, bits=4, block_size=32, accuracy_level=0)
    y4 = _run_c(entry, a, b, scales, None, None, K=K, N=N, bits=4, block_size=32, accuracy_level=4)
    assert np.abs(y0 - y4).max() > 1e-5


def _model(M, K, N, bits, bs, zp_kind, accuracy_level, rng, b_initializer=True):
    b, scales, zp = _weights(rng, K, N, bits, bs, zp_kind)
    inits = [numpy_helper.from_array(scales.reshape(-1), "S")]
    inputs = [helper.make_tensor_value_info("A", TensorProto.FLOAT, [M, K])]
    feeds = {"A": rng.standard_normal((M, K)).astype(np.float32)}
    if b_initializer:
        inits.append(numpy_helper.from_array(b, "B"))
    else:
        inputs.append(helper.make_tensor_value_info("B", TensorProto.UINT8, list(b.shape)))
        feeds["B"] = b
    names = ["A", "B", "S"]
    if zp is not None:
        inits.append(numpy_helper.from_array(zp.reshape(-1) if zp.dtype == np.uint8 else zp, "Z"))
        names.append("Z")
    node = helper.make_node("MatMulNBits", names, ["Y"], domain=MS, K=K, N=N, bits=bits, block_size=bs,
                            accuracy_level=accuracy_level)
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [M, N])],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)])
    return model, feeds


def _run_provider(model, feeds):
    """The model's one node through the CPU provider as a session runs it: claim, create, compute."""
    m = ort_graph.from_proto(model)
    ep = CpuExecutionProvider(m.graph, m.opset_imports)
    (node,) = m.graph.nodes
    assert ep.claim(node).__class__.__name__ == "Supported", ep.claim(node)
    assert c_kernels.kernel_language(ep.entry(node)) == "C"
    values = {name: t.numpy() for name, t in m.graph.initializers.items()} | feeds
    kernel = ep.create_kernel(node)
    ctx = ort_abi.KernelContext([values[n] if n else None for n in node.inputs], output_types=[TensorProto.FLOAT])
    with ep.run_scope():
        kernel.compute(ctx)
    kernel.release()
    return ctx.outputs[0]


@pytest.mark.parametrize("bits,zp_kind", [(4, "none"), (4, "packed"), (8, "none"), (8, "packed"), (4, "float")])
@pytest.mark.parametrize("accuracy_level", [0, 4])
@pytest.mark.parametrize("M,K,N,bs", [(1, 256, 96, 32), (1, 200, 41, 16), (8, 128, 64, 64), (64, 256, 48, 128),
                                      (160, 512, 64, 32)])
def test_c_kernel_in_a_session_matches_onnxruntime(entry, bits, zp_kind, accuracy_level, M, K, N, bs):
    """Through the provider (claim, the C entry chosen, compute) against onnxruntime. accuracy_level 4 with uint8 or
    no zero points is onnxruntime's int8 path (A quantized per block): the same quantized values, int32 block
    sums, so only float summation order differs, as at accuracy_level 0 (rtol 1e-5 of the largest output), at
    M >= 128 too (onnxruntime's prefill GEMM route: the ~1e-3 relative differences seen there before were A
    quantized with another reciprocal, see test_int8_activations_round_as_onnxruntime_on_half_steps)."""
    import onnxruntime as ort
    model, feeds = _model(M, K, N, bits, bs, zp_kind, accuracy_level, np.random.default_rng(M + K + N))
    so = ort.SessionOptions()
    so.log_severity_level = 3
    ref = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = _run_provider(model, feeds)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=2e-5 * np.abs(ref).max())


def _provider_entry(model):
    m = ort_graph.from_proto(model)
    ep = CpuExecutionProvider(m.graph, m.opset_imports)
    node = next(n for n in m.graph.nodes if n.op_type == "MatMulNBits")
    return ep, node, ep.entry(node)


def test_provider_picks_c_for_the_hot_path_and_numpy_elsewhere(entry):
    rng = np.random.default_rng(0)
    _, _, chosen = _provider_entry(_model(1, 64, 16, 4, 32, "packed", 4, rng)[0])
    assert c_kernels.kernel_language(chosen) == "C"
    # accuracy_level 4 with a B computed at run time: onnxruntime does not quantize A, the numpy kernel runs it
    _, _, chosen = _provider_entry(_model(1, 64, 16, 4, 32, "packed", 4, rng, b_initializer=False)[0])
    assert c_kernels.kernel_language(chosen) == "numpy"
    # block_size 512: beyond the C kernel's range
    _, _, chosen = _provider_entry(_model(1, 1024, 16, 4, 512, "none", 0, rng)[0])
    assert c_kernels.kernel_language(chosen) == "numpy"


def test_estimate_and_declaration(entry):
    rng = np.random.default_rng(0)
    model, _ = _model(5, 64, 16, 4, 32, "packed", 4, rng)
    ep, node, chosen = _provider_entry(model)
    estimate = ep.estimate(node)
    kernel = chosen.create_kernel(ort_abi.KernelInfo.from_node(node, ep))
    shapes = [ort_abi.WorkspaceInputShape.shaped((5, 64), TensorProto.FLOAT),
              ort_abi.WorkspaceInputShape.shaped((16, 2, 16), TensorProto.UINT8),
              ort_abi.WorkspaceInputShape.shaped((32,), TensorProto.FLOAT),
              ort_abi.WorkspaceInputShape.shaped((16,), TensorProto.UINT8)]
    slots = ort_abi.declare_workspace(kernel, shapes)
    kernel.release()
    by_id = {s.slot_id: s.size_bytes for s in slots}
    threads = ctypes.CDLL(str(c_kernels.library_path())).ort_cpu_ep_threads()
    assert by_id[0] == threads * (256 * 16 * 4 + 64)  # one panel buffer per thread
    # int8 A (rows padded to 128 values), its block scales, block sums and sums times scales
    assert by_id[1] == 5 * 128 + 5 * 2 * (4 + 4 + 4)
    assert estimate == sum(by_id.values())


def test_bad_weight_size_is_refused_naming_the_input(entry):
    rng = np.random.default_rng(0)
    b, scales, _ = _weights(rng, 64, 16, 4, 32, "none")
    a = rng.standard_normal((1, 64)).astype(np.float32)
    with pytest.raises(ort_abi.KernelError, match="input B has 496 elements, expected 512"):
        _run_c(entry, a, b.reshape(-1)[:496].copy(), scales, None, None, K=64, N=16, bits=4, block_size=32,
               accuracy_level=0)
    with pytest.raises(ort_abi.KernelError, match="last dimension 63"):
        _run_c(entry, a[:, :63].copy(), b, scales, None, None, K=64, N=16, bits=4, block_size=32, accuracy_level=0)


def test_threads_follow_the_intra_op_scope_and_give_the_same_result(entry):
    lib = ctypes.CDLL(str(c_kernels.library_path()))
    before = lib.ort_cpu_ep_threads()
    rng = np.random.default_rng(3)
    K, N = 512, 512
    b, scales, zp = _weights(rng, K, N, 4, 32, "packed")
    a = rng.standard_normal((6, K)).astype(np.float32)
    results = []
    for n in (1, 3):
        with intra_op_thread_scope(n):
            assert lib.ort_cpu_ep_threads() == n
            results.append(_run_c(entry, a, b, scales, zp, None, K=K, N=N, bits=4, block_size=32, accuracy_level=4))
        assert lib.ort_cpu_ep_threads() == before
    np.testing.assert_array_equal(results[0], results[1])  # columns split across threads: same arithmetic


def test_jobs_from_several_callers_at_once_each_give_the_one_thread_result(entry):
    """The thread pool (mnb_parallel.c) serves one caller at a time; a job that finds it busy runs alone in its
    caller, and a worker index no worker took is run by the caller: every caller gets the 1-thread result."""
    import threading

    rng = np.random.default_rng(4)
    K, N = 576, 1536
    b, scales, zp = _weights(rng, K, N, 4, 32, "packed")
    a = rng.standard_normal((1, K)).astype(np.float32)

    def run(threads):
        with intra_op_thread_scope(threads):
            return _run_c(entry, a, b, scales, zp, None, K=K, N=N, bits=4, block_size=32, accuracy_level=4)

    want = run(1)
    got, errors = [], []

    def caller():
        try:
            got.extend(run(3) for _ in range(20))
        except Exception as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=caller) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(got) == 60
    for g in got:
        np.testing.assert_array_equal(g, want)


def test_a_forked_child_runs_threaded_jobs_with_its_own_workers(entry):
    """After fork the child has none of the pool's workers: it starts its own (no lock or count of the parent's)."""
    import os

    rng = np.random.default_rng(6)
    K, N = 576, 1536
    b, scales, zp = _weights(rng, K, N, 4, 32, "packed")
    a = rng.standard_normal((1, K)).astype(np.float32)

    def run():
        with intra_op_thread_scope(3):
            return _run_c(entry, a, b, scales, zp, None, K=K, N=N, bits=4, block_size=32, accuracy_level=4)

    want = run()  # the parent's workers exist now
    pid = os.fork()
    if pid == 0:  # the child: exit status 0 only when its threaded jobs match the parent's result
        ok = all(np.array_equal(run(), want) for _ in range(5))
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_provider_falls_back_without_the_library(monkeypatch, entry):
    monkeypatch.setenv(c_kernels.DISABLE_ENV, "1")
    c_kernels._load.cache_clear()
    try:
        assert c_kernels.c_registry() is None and "disabled" in c_kernels.status().reason
        _, _, chosen = _provider_entry(_model(1, 64, 16, 4, 32, "none", 0, np.random.default_rng(0))[0])
        assert c_kernels.kernel_language(chosen) == "numpy"
    finally:
        monkeypatch.delenv(c_kernels.DISABLE_ENV)
        c_kernels._load.cache_clear()
    assert c_kernels.c_registry() is not None


def test_build_without_a_compiler_explains(monkeypatch, tmp_path):
    monkeypatch.setenv("CC", "/nonexistent/cc")
    monkeypatch.setattr(_cbuild.shutil, "which", lambda name: None)
    line = _cbuild.build_or_explain(tmp_path)
    assert "C kernels NOT built (no C compiler found" in line and "numpy kernels are used" in line
    assert not (tmp_path / _cbuild.LIBRARY_NAME).exists()


def _near_tie_activations(rng, M, K, bs):
    """A whose values sit on half steps of each block's int8 grid (max |a| / 127 * (j + 1/2)), with the block's
    max |a| present: the values where 127 / max|a| and 1 / (max|a| / 127), an ulp apart, round to different
    integers. Real activations hit such values now and then; here every one does."""
    a = np.empty((M, K), np.float32)
    for m in range(M):
        for k0 in range(0, K, bs):
            amax = np.float32(rng.random() * 4 + 0.25)
            step = np.float32(amax / np.float32(127))
            width = min(bs, K - k0)
            a[m, k0:k0 + width] = (rng.integers(-126, 126, width) + 0.5).astype(np.float32) * step
            a[m, k0] = amax
    return a


@pytest.mark.parametrize("zp_kind", ["none", "packed"])
@pytest.mark.parametrize("M,K,N,bs", [(1, 576, 64, 32), (4, 576, 48, 32), (2, 256, 40, 64), (3, 320, 33, 16)])
@pytest.mark.parametrize("kernel", ["C", "numpy"])
def test_int8_activations_round_as_onnxruntime_on_half_steps(entry, monkeypatch, zp_kind, M, K, N, bs, kernel):
    """accuracy_level 4 quantizes A exactly as onnxruntime does, half steps included: a value's integer is
    a * (127 / max|a|) rounded half to even, the reciprocal in one rounding. (With 1 / (max|a| / 127), the
    previous formula, these feeds differed from onnxruntime by up to 6e-2 where outputs are ~1: greedy tokens
    of a real int4 model changed.) Both kernels, through the provider."""
    import onnxruntime as ort
    rng = np.random.default_rng(K + N + M + bs)
    model, _ = _model(M, K, N, 4, bs, zp_kind, 4, rng)
    feeds = {"A": _near_tie_activations(rng, M, K, bs)}
    so = ort.SessionOptions()
    so.log_severity_level = 3
    ref = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    if kernel == "numpy":
        monkeypatch.setattr(c_kernels, "c_registry", lambda: None)
        m = ort_graph.from_proto(model)
        ep = CpuExecutionProvider(m.graph, m.opset_imports)
        (node,) = m.graph.nodes
        assert c_kernels.kernel_language(ep.entry(node)) != "C"
        values = {name: t.numpy() for name, t in m.graph.initializers.items()} | feeds
        k = ep.create_kernel(node)
        ctx = ort_abi.KernelContext([values[n] if n else None for n in node.inputs], output_types=[TensorProto.FLOAT])
        k.compute(ctx)
        got = ctx.outputs[0]
    else:
        got = _run_provider(model, feeds)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=2e-5 * np.abs(ref).max())


@pytest.mark.parametrize("zp_kind", ["none", "packed"])
@pytest.mark.parametrize("M", [1, 2, 7, 128, 160])
@pytest.mark.parametrize("K,N,bs", [(576, 61, 32), (200, 45, 16), (320, 33, 64), (1536, 18, 128)])
def test_int8_gemm_rows_match_onnxruntime(entry, zp_kind, M, K, N, bs):
    """accuracy_level 4 at prefill row counts (the AVX-512 VNNI GEMM past 4 rows: 6-row tiles and their
    remainders, column pairs and an odd last column, a ragged last K block) against onnxruntime, at the
    tolerance of test_c_kernel_in_a_session_matches_onnxruntime."""
    import onnxruntime as ort
    model, feeds = _model(M, K, N, 4, bs, zp_kind, 4, np.random.default_rng(M * 7 + K + N))
    so = ort.SessionOptions()
    so.log_severity_level = 3
    ref = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(_run_provider(model, feeds), ref, rtol=1e-5, atol=2e-5 * np.abs(ref).max())


@pytest.mark.parametrize("accuracy_level", [0, 4])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("K,N", [(576, 576), (576, 192), (576, 1536), (1536, 576), (576, 49152), (576, 1030)])
def test_decode_gemv_shapes_match_onnxruntime(entry, accuracy_level, threads, K, N):
    """One row (a decode step) at the thin decoder's projections and its LM head (576 x 49152), int4 block 32 with
    zero points, on 1 and 2 threads (the GEMV's four-column passes, the threads' split of N, an N that leaves
    two columns to the one-column tile) against onnxruntime."""
    import onnxruntime as ort
    model, feeds = _model(1, K, N, 4, 32, "packed", accuracy_level, np.random.default_rng(K + N + accuracy_level))
    so = ort.SessionOptions()
    so.log_severity_level = 3
    ref = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    with intra_op_thread_scope(threads):
        got = _run_provider(model, feeds)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=2e-5 * np.abs(ref).max())


@pytest.mark.parametrize("M,K,N,bs", [(7, 4800, 30, 16), (5, 33600, 3, 16), (128, 576, 100, 32)])
def test_int8_gemm_many_blocks_and_threads(entry, M, K, N, bs):
    """Many blocks per row: the GEMM's zero-point panel narrows to what the thread buffer holds (300 blocks: 12
    columns), or the kernel keeps the row-group path (2100 blocks: not two columns' worth); 1 and 2 threads give
    the same bits, and both match the numpy reference."""
    rng = np.random.default_rng(K + N)
    b, scales, zp = _weights(rng, K, N, 4, bs, "packed")
    a = rng.standard_normal((M, K)).astype(np.float32)
    attrs = dict(K=K, N=N, bits=4, block_size=bs, accuracy_level=4)
    results = []
    for n in (1, 2):
        with intra_op_thread_scope(n):
            results.append(_run_c(entry, a, b, scales, zp, None, **attrs))
    np.testing.assert_array_equal(results[0], results[1])
    ref = _reference(a, b, scales, zp, None, K=K, N=N, bits=4, block_size=bs, accuracy_level=4)
    np.testing.assert_allclose(results[0], ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(M=st.integers(1, 170), K=st.integers(1, 700), N=st.integers(1, 70), bs=st.sampled_from([16, 32, 64, 128]),
       zp_kind=st.sampled_from(["none", "packed"]), bias=st.booleans(), threads=st.sampled_from([1, 2]))
def test_int8_path_any_shape_matches_the_numpy_reference(entry, M, K, N, bs, zp_kind, bias, threads):
    """accuracy_level 4, 4 bits, random M / K / N (the GEMV and GEMM paths, odd column counts, ragged blocks and
    half chunks), with and without bias, 1 or 2 threads, against the numpy kernel's model of onnxruntime's int8
    activations."""
    rng = np.random.default_rng(M * 100003 + K * 101 + N)
    b, scales, zp = _weights(rng, K, N, 4, bs, zp_kind)
    a = rng.standard_normal((M, K)).astype(np.float32)
    y_bias = rng.standard_normal(N).astype(np.float32) if bias else None
    attrs = dict(K=K, N=N, bits=4, block_size=bs, accuracy_level=4)
    with intra_op_thread_scope(threads):
        got = _run_c(entry, a, b, scales, zp, y_bias, **attrs)
    ref = _reference(a, b, scales, zp, y_bias, **attrs)
    # the zero point enters as sum(q a) s - zp s sum(a): where those cancel (a tiny K, every q at the zero point)
    # float32 leaves a residue of the size of the terms, not of the result
    terms = np.abs(a).sum(axis=1).max() * 15 * scales.max()
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max() + 1e-6 * terms)
