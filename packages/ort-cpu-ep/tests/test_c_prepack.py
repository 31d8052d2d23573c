"""Constant-weight pre-packing of the C float32 GEMM kernels (csrc/sgemm_prepack.c): MatMul, FusedMatMul and Gemm
with a constant B packed once (as a session does at initialization) give the same bits as packing B per call, on
every instruction-set path, at odd K (several K blocks) and N (ragged panels), transposed B, 1 and 2 threads; and
what they declare: the whole packed B where the product packs it, nothing for a few rows (B streamed) or a batched B."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_abi
import ort_graph
from ort_cpu_ep import CpuExecutionProvider
from ort_cpu_ep.testing import one_node_model, run_one_node

F = TensorProto.FLOAT


def _model(op, a_shape, b, *, domain="", c=None, **attrs):
    inits = [numpy_helper.from_array(b, "b")] + ([numpy_helper.from_array(c, "c")] if c is not None else [])
    node = helper.make_node(op, ["a", "b"] + (["c"] if c is not None else []), ["y"], domain=domain, **attrs)
    return one_node_model(node, [helper.make_tensor_value_info("a", F, list(a_shape))],
                          [helper.make_tensor_value_info("y", F, None)], inits)


def _same_bits(model, a, threads):
    feeds = {"a": a}
    packed = run_one_node(model, feeds, "C", threads=threads, prepack=True)["y"]
    per_call = run_one_node(model, feeds, "C", threads=threads)["y"]
    np.testing.assert_array_equal(packed, per_call)
    return packed


@pytest.mark.parametrize(("M", "K", "N"), [(7, 300, 77), (128, 576, 577), (29, 513, 130), (13, 1, 7), (160, 64, 1536)])
@pytest.mark.parametrize("threads", [1, 2])
def test_matmul_with_b_packed_once_gives_the_same_bits(isa_cap, M, K, N, threads):
    rng = np.random.default_rng(M + K + N)
    a, b = rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal((K, N)).astype(np.float32)
    got = _same_bits(_model("MatMul", a.shape, b), a, threads)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(got, ref, rtol=0, atol=2e-6 * np.sqrt(K) * max(1.0, np.abs(ref).max()))


@pytest.mark.parametrize(("M", "K", "N"), [(9, 301, 70), (64, 600, 33)])
def test_fused_matmul_transposed_b_packed_once_gives_the_same_bits(isa_cap, M, K, N):
    rng = np.random.default_rng(M * K)
    a, bt = rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal((N, K)).astype(np.float32)
    model = _model("FusedMatMul", a.shape, bt, domain="com.microsoft", transB=1, alpha=0.5)
    got = _same_bits(model, a, 2)
    np.testing.assert_allclose(got, 0.5 * (a @ bt.T), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize(("m", "k", "n"), [(64, 130, 90), (7, 257, 65)])
def test_gemm_with_b_packed_once_gives_the_same_bits(isa_cap, trans_b, m, k, n):
    rng = np.random.default_rng(m + trans_b)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    c = rng.standard_normal((n,)).astype(np.float32)
    a = rng.standard_normal((m, k)).astype(np.float32)
    got = _same_bits(_model("Gemm", a.shape, b, c=c, transB=trans_b, alpha=0.75, beta=0.5), a, 2)
    np.testing.assert_allclose(got, 0.75 * (a @ (b.T if trans_b else b)) + 0.5 * c, rtol=1e-5, atol=1e-4)


def _declared(model):
    m = ort_graph.from_proto(model)
    ep = CpuExecutionProvider(m.graph, m.opset_imports)
    (node,) = m.graph.nodes
    kernel = ep.entry(node).create_kernel(ort_abi.KernelInfo.from_node(node, ep))
    try:
        shapes = ort_abi.workspace_input_shapes(node)
        return [ort_abi.declare_prepacked(kernel, shapes, i) for i in range(len(node.inputs))]
    finally:
        kernel.release()


def test_the_declaration_is_the_whole_packed_b_where_the_product_packs_it(library):
    nr = _declared(_model("MatMul", (7, 300), np.ones((300, 1), np.float32)))[1] // (300 * 4)  # one panel
    assert nr in (8, 16, 64)  # the micro-kernel's tile width: portable, AVX2, AVX-512
    b = np.ones((300, 77), np.float32)
    padded = 300 * ((77 + nr - 1) // nr * nr) * 4
    assert _declared(_model("MatMul", (7, 300), b)) == [0, padded]
    assert _declared(_model("MatMul", ("rows", 300), b)) == [0, padded]  # rows unknown: packed
    assert _declared(_model("MatMul", (6, 300), b)) == [0, 0]  # a few rows stream B: nothing packed
    assert _declared(_model("MatMul", (300,), b)) == [0, 0]  # one row
    assert _declared(_model("MatMul", (2, 7, 300), np.ones((2, 300, 77), np.float32))) == [0, 0]  # batched B
    assert _declared(_model("Gemm", (7, 300), b.T.copy(), transB=1)) == [0, padded]


@pytest.mark.parametrize(("declared_at", "packed_at", "run_at"), [(2, 2, 0), (0, 0, 2), (0, 2, 2)],
                         ids=["packed-wide-run-portable", "packed-portable-run-wide", "declared-narrow-packed-wide"])
def test_a_panel_width_changed_after_declaring_or_packing_falls_back_to_packing_per_call(library, declared_at,
                                                                                         packed_at, run_at):
    """The instruction-set cap (tests lower it) sets the panel width: panels packed at another width are not
    read, and a declaration too small for the width at packing time packs nothing; the result stays right."""
    import ctypes

    from ort_cpu_ep import c_kernels, intra_op_thread_scope

    lib = ctypes.CDLL(str(c_kernels.library_path()))
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((29, 300)).astype(np.float32), rng.standard_normal((300, 77)).astype(np.float32)
    m = ort_graph.from_proto(_model("MatMul", a.shape, b))
    ep = CpuExecutionProvider(m.graph, m.opset_imports)
    (node,) = m.graph.nodes
    before = lib.ort_cpu_ep_isa_cap()
    kernel = ep.entry(node).create_kernel(ort_abi.KernelInfo.from_node(node, ep))
    try:
        lib.ort_cpu_ep_set_isa_cap(declared_at)
        nbytes = ort_abi.declare_prepacked(kernel, ort_abi.workspace_input_shapes(node), 1)
        lib.ort_cpu_ep_set_isa_cap(packed_at)
        ort_abi.prepack_weight(kernel, 1, b, nbytes)
        lib.ort_cpu_ep_set_isa_cap(run_at)
        ctx = ort_abi.KernelContext([a, b], output_count=1, output_types=[F])
        with intra_op_thread_scope(2):
            kernel.compute(ctx)
    finally:
        lib.ort_cpu_ep_set_isa_cap(before)
        kernel.release()
    np.testing.assert_allclose(ctx.outputs[0], a.astype(np.float64) @ b, rtol=1e-5, atol=1e-4)


def _kernel(model):
    m = ort_graph.from_proto(model)
    ep = CpuExecutionProvider(m.graph, m.opset_imports)
    (node,) = m.graph.nodes
    return node, ep.entry(node).create_kernel(ort_abi.KernelInfo.from_node(node, ep))


@pytest.mark.parametrize("op", ["MatMul", "Gemm"])
def test_a_b_declared_packed_takes_no_packing_workspace(library, op):
    """The host asks DeclarePrePackedBytes before DeclareWorkspaceRequirements: a kernel whose B is packed reads its
    panels and declares no per-call packing block; one whose B is not (fed at run time) declares it."""
    b = np.ones((300, 77), np.float32)
    for packs in (False, True):
        node, kernel = _kernel(_model(op, (64, 300), b))
        try:
            shapes = ort_abi.workspace_input_shapes(node)
            assert kernel.releases_packed
            if packs:
                assert ort_abi.declare_prepacked(kernel, shapes, 1) > 0
            slots = ort_abi.declare_workspace(kernel, shapes, node=node.name) or []
            assert (sum(s.size_bytes for s in slots) == 0) == packs, slots
        finally:
            kernel.release()


@pytest.mark.parametrize(("op", "attrs", "rows"), [("MatMul", {}, 64), ("MatMul", {}, 1), ("MatMul", {}, 5),
                                                   ("Gemm", {"transB": 1, "alpha": 0.5}, 3), ("Gemm", {}, 40),
                                                   ("FusedMatMul", {"transB": 1}, 2)])
def test_a_released_b_is_read_from_its_panels_alone(isa_cap, op, attrs, rows):
    """Once packed, B may be NULL in Compute (ORT_KERNEL_FLAG_RELEASES_PACKED_INPUTS: the host released it): the
    product reads the panels, a few rows too (which stream the original while it is there); K 300 is two K blocks."""
    from ort_cpu_ep import intra_op_thread_scope

    rng = np.random.default_rng(rows)
    trans = attrs.get("transB", 0)
    b = rng.standard_normal((77, 300) if trans else (300, 77)).astype(np.float32)
    a = rng.standard_normal((rows, 300)).astype(np.float32)
    node, kernel = _kernel(_model(op, ("rows", 300), b, domain="com.microsoft" if op == "FusedMatMul" else "",
                                  **attrs))
    try:
        nbytes = ort_abi.declare_prepacked(kernel, ort_abi.workspace_input_shapes(node), 1)
        assert ort_abi.prepack_weight(kernel, 1, b, nbytes)
        ctx = ort_abi.KernelContext([a, None], output_count=1, output_types=[F])
        with intra_op_thread_scope(2):
            kernel.compute(ctx)
    finally:
        kernel.release()
    ref = attrs.get("alpha", 1.0) * (a.astype(np.float64) @ (b.T if trans else b))
    np.testing.assert_allclose(ctx.outputs[0], ref, rtol=0, atol=2e-6 * np.sqrt(300) * max(1.0, np.abs(ref).max()))


def test_a_missing_b_that_was_never_packed_is_an_error_naming_it(library):
    node, kernel = _kernel(_model("MatMul", (64, 300), np.ones((300, 77), np.float32)))
    try:
        ctx = ort_abi.KernelContext([np.ones((64, 300), np.float32), None], output_count=1, output_types=[F])
        with pytest.raises(ort_abi.KernelError, match="MatMul: input B is missing; B is required"):
            kernel.compute(ctx)
    finally:
        kernel.release()
