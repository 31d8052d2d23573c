"""`measure_host_allocations` counts numpy's data buffers exactly (the counting allocator, `_numpy_alloc`), per
node: a kernel's undeclared temporary is reported at its node, and pre-allocated runs of real exports allocate
within a tenth of their planned peak. The extension is built in place when missing; without a compiler the tests
that need it skip (the tracemalloc fallback is tested on its own)."""

from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper

import ort_abi
import ort_graph
import ort_session._session
from ort_cpu_ep import NumpyKernel
from ort_session import InferenceSession, _numpy_alloc_build, _traced, generate_inputs

CPU = ["CPUExecutionProvider"]
PRE = {"session.pre_allocate_execution_buffers": "1"}
DOMAIN = "test.traced"


@pytest.fixture(scope="module")
def alloc():
    if _traced.counting_allocator() is None:
        try:
            _numpy_alloc_build.compiler()
        except _numpy_alloc_build.BuildFailed as e:  # the one real reason: no compiler on this machine
            pytest.skip(f"the counting allocator cannot be built here: {e}")
        _numpy_alloc_build.build()  # with a compiler present, a build failure is a test failure
        _traced.counting_allocator.cache_clear()
    module = _traced.counting_allocator()
    assert module is not None
    return module


def test_counting_allocator_counts_this_contexts_data_buffers_exactly(alloc):
    counter, previous = alloc.install()
    try:
        a = np.empty(1000, np.float64)
        b = np.zeros((10, 10), np.float32)
        assert alloc.counts(counter) == (8000 + 400, 8400, 2)
        del a
        np.ones(250, np.int32)  # a temporary: freed at once, seen in the peak
        assert alloc.counts(counter)[:2] == (400, 8400)
        c = np.arange(10, dtype=np.int64)
        c.resize(3000, refcheck=False)  # realloc: counted at its new size
        assert alloc.counts(counter)[0] == 400 + 24000
        other = threading.Thread(target=lambda: np.empty(10**6))  # another thread: its own context
        other.start()
        other.join()
        assert alloc.counts(counter)[1] == 24400
    finally:
        alloc.restore(previous)
    np.empty(10**5)  # after restore: not counted
    assert alloc.counts(counter)[0] == 24400
    del b, c  # arrays allocated through the counter still return their bytes to it
    assert alloc.counts(counter)[0] == 0
    assert alloc.reset_peak(counter) == 24400 and alloc.counts(counter)[1] == 0
    with pytest.raises(TypeError, match="install"):
        alloc.counts(previous)


def test_tracemalloc_fallback_sees_buffers_live_at_node_boundaries():
    with _traced.traced_peak(precise=False) as traced:
        kept = np.ones(1 << 16, np.float32)
        traced.node_done("keeps")
        np.ones(1 << 20, np.float32)  # freed before the boundary: the fallback cannot see it
        traced.node_done("frees")
    assert traced.by == _traced.TRACEMALLOC_DOMAIN and traced.python_bytes is not None
    assert traced.nodes == {"keeps": kept.nbytes} and kept.nbytes <= traced.bytes < 1 << 20


class Doubling:
    """y = 2 x into its output block; the product first in a temporary of x's size: an undeclared numpy array,
    or (`declared`) workspace slot 0, declared for the plan."""

    declared = False

    def __init__(self, state, info):
        self.info = info

    def declare_workspace(self, shapes):
        nbytes = int(np.prod(shapes[0].dims)) * 4
        return [ort_abi.WorkspaceSlot(0, nbytes)] if type(self).declared else []

    def compute(self, ctx):
        x = ctx.input(0)
        out = ctx.output(0, x.shape, x.dtype)
        if type(self).declared:
            tmp = ctx.preallocated_workspace(0, x.nbytes)[:x.nbytes].view(x.dtype).reshape(x.shape)
        else:
            tmp = np.empty_like(x)
        np.add(x, x, out=tmp)
        np.copyto(out, tmp)


@pytest.mark.parametrize("declared", [False, True])
def test_an_undeclared_temporary_is_reported_at_its_node(alloc, monkeypatch, declared):
    registry = ort_abi.KernelRegistry()
    kdef = ort_abi.KernelDefBuilder().op_type("Doubling").domain(DOMAIN).since_version(1).ep(CPU[0]).build()
    registry.add_kernel_v2(kdef, Doubling)
    monkeypatch.setattr(ort_session._session, "load_plugins", lambda paths: registry)
    monkeypatch.setattr(Doubling, "declared", declared)
    shape = [256, 512]
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Neg", ["x"], ["r"], name="neg"),
         helper.make_node("Doubling", ["r"], ["y"], name="double", domain=DOMAIN)],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)])
    sess = InferenceSession(model.SerializeToString(), {**PRE, "measure_host_allocations": True}, providers=CPU)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], -2 * x)
    stats = sess.last_run_stats
    assert stats.traced_by == _traced.NUMPY_ALLOCATOR and stats.traced_python_bytes is None
    assert stats.copied_outputs == 0 and stats.scratch_fallbacks == 0 and stats.allocations == 0
    if declared:
        assert stats.workspace_from_plan == 1 and stats.traced_bytes < 1024 and "double" not in stats.traced_nodes
    else:  # the runtime cannot see it (no scratch asked), the measure does: exactly the temporary, at its node
        assert stats.workspace_from_plan == 0 and stats.traced_nodes["double"] == x.nbytes
        assert stats.traced_bytes >= x.nbytes


def test_traced_figures_only_when_measuring(alloc):
    cfg = ort_graph.zoo.DecoderConfig(layers=1, hidden=64, heads=4, kv_heads=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = InferenceSession(ort_graph.zoo.decoder(cfg), {"free_dimension_overrides": {
            "batch": 1, "sequence": 8, "past_sequence": 0}, **PRE}, providers=CPU)
    sess.run(None, ort_graph.zoo.decoder_inputs(cfg, 1, 8, 0))
    stats = sess.last_run_stats
    assert (stats.traced_bytes, stats.traced_by, stats.traced_nodes, stats.traced_python_bytes) == (None, None, {}, None)


# every shared export, the CUDA-targeted ones (float16, bfloat16, int4 with float16 activations) run on the CPU too
EXPORTS = ["genai_fp32_cpu/model.onnx", "genai_int4_cpu/model.onnx", "genai_int8_cpu/model.onnx",
           "genai_fp16_cuda/model.onnx", "genai_bf16_cuda/model.onnx", "genai_int4_cuda/model.onnx",
           "torch/torchscript_static.onnx", "torch/torchscript_dynamic.onnx", "torch/torchscript_kv_dynamic.onnx",
           "torch/dynamo_static.onnx", "torch/dynamo_dynamic.onnx", "torch/dynamo_kv_dynamic.onnx"]


def _dims(graph) -> dict[str, int]:
    dims = {}
    for name in graph.inputs:
        for d in graph.values[name].shape or ():
            if isinstance(d, str):
                low = d.lower()
                dims[d] = 0 if "past" in low else 1 if "batch" in low else 16 if "dim" in low else 8
    return dims


@pytest.mark.parametrize("export", EXPORTS)
def test_shared_export_allocates_within_a_tenth_of_its_plan(alloc, shared_models, export):
    path = shared_models / "llama_l4" / export
    if not path.exists():
        pytest.skip(f"{path} not present")
    dims = _dims(ort_graph.load(path).graph)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = InferenceSession(str(path), {"free_dimension_overrides": dims, **PRE, "measure_host_allocations": True},
                                providers=CPU)
    feeds = generate_inputs(sess.model.graph, dims)
    sess.run(None, feeds)
    sess.run(None, feeds)  # lazily built caches are filled by the first run
    stats = sess.last_run_stats
    dev = sess.plan.to_dict()["devices"]["cpu"]
    planned = dev["peak_activations"] + dev["workspace"]
    assert stats.traced_by == _traced.NUMPY_ALLOCATOR
    numpy_nodes = [i for i, k in sess.kernels.items() if isinstance(k, NumpyKernel)]
    if numpy_nodes:  # numpy kernels may allocate temporaries (the measure sees them; torchscript_static's Where,
        # Pow, IsNaN, And, Cos, Sin write their outputs in place and make none since its ConstantOfShape folds)
        assert stats.traced_bytes <= planned // 10, (stats.traced_bytes, planned, stats.traced_nodes)
        assert not stats.traced_nodes or stats.traced_bytes >= max(stats.traced_nodes.values())
    else:  # every node a C kernel (the genai exports since the int64 mask ops are C): nothing outside the plan
        assert stats.traced_bytes == 0 and not stats.traced_nodes, stats.traced_nodes


def test_float16_matmul_nbits_computes_in_declared_workspace(alloc):
    """float16 A: upcast A and the float32 Y in declared slot 2, rounded into the output block; the packed
    weight unpacked into slot 0 without converting bytes to indices; as onnxruntime computes it."""
    ort = pytest.importorskip("onnxruntime")
    from onnx import numpy_helper

    K, N, bs, M = 128, 96, 32, 16
    rng = np.random.default_rng(5)
    b = rng.integers(0, 256, (N, K // bs, bs // 2), dtype=np.uint8)
    scales = (rng.random((N, K // bs)) * 0.1 + 0.01).astype(np.float16)
    node = helper.make_node("MatMulNBits", ["a", "b", "scales"], ["y"], name="mm", domain="com.microsoft", K=K, N=N,
                            bits=4, block_size=bs)
    model = helper.make_model(helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("a", TensorProto.FLOAT16, [M, K])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [M, N])],
        [numpy_helper.from_array(b, "b"), numpy_helper.from_array(scales, "scales")]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]).SerializeToString()
    a = rng.standard_normal((M, K)).astype(np.float16)
    sess = InferenceSession(model, {**PRE, "measure_host_allocations": True}, providers=CPU)
    got = sess.run(None, {"a": a})[0]
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"a": a})[0]
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), ref.astype(np.float32), rtol=1e-2, atol=2e-2)
    stats = sess.last_run_stats
    assert stats.copied_outputs == 0 and stats.workspace_from_plan == 2 and stats.scratch_fallbacks == 0
    assert stats.traced_nodes.get("mm", 0) < 256, stats.traced_nodes  # was A, Y in float32, Y copied, the indices


@pytest.mark.parametrize("op,rows", [("SkipSimplifiedLayerNormalization", 3), ("SkipLayerNormalization", 700),
                                     ("SimplifiedLayerNormalization", 700), ("LayerNormalization", 3)])
def test_float16_norms_compute_in_float32_chunks_in_their_blocks(alloc, op, rows):
    """float16 norms stage whole rows in float32 in declared slot 1 (several chunks at 700 rows) and round into
    their blocks (the sum too): as the generic path computes them, which upcasts the whole tensor."""
    from onnx import numpy_helper

    from ort_cpu_ep.ops import find, opset_scope

    hidden, f16 = 64, TensorProto.FLOAT16
    rng = np.random.default_rng(rows)
    skip = op.startswith("Skip")
    domain = "com.microsoft" if skip else ""
    params = [numpy_helper.from_array((rng.random(hidden) + 0.5).astype(np.float16), "gamma")]
    if "Simplified" not in op:
        params.append(numpy_helper.from_array(rng.standard_normal(hidden).astype(np.float16), "beta"))
    ins = ["x", "skip"] if skip else ["x"]
    outs = ["y", "", "", "sum"] if skip else ["y"]
    node = helper.make_node(op, ins + [p.name for p in params], outs, name="norm", domain=domain, epsilon=1e-5)
    model = helper.make_model(helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, f16, [rows, hidden]) for n in ins],
        [helper.make_tensor_value_info(n, f16, [rows, hidden]) for n in outs if n], params),
        opset_imports=[helper.make_opsetid("", 16), helper.make_opsetid("com.microsoft", 1)])
    feeds = {n: (rng.standard_normal((rows, hidden)) * 3).astype(np.float16) for n in ins}
    sess = InferenceSession(model.SerializeToString(), {**PRE, "measure_host_allocations": True}, providers=CPU)
    got = sess.run(None, feeds)
    stats = sess.last_run_stats
    assert stats.copied_outputs == 0 and stats.workspace_from_plan == 2 and stats.scratch_fallbacks == 0
    assert stats.traced_nodes.get("norm", 0) < 64, stats.traced_nodes
    plain = ort_graph.Node(0, "norm", op, domain, ins + [p.name for p in params], outs)  # no graph: the generic path
    for a in node.attribute:
        plain.attributes[a.name] = ort_graph.Attr(a.name, a.type, a.f)
    with opset_scope({domain: 1, "": 16}):
        want = find(op, domain, 1 if skip else 16).compute(plain, [*feeds.values(), *(numpy_helper.to_array(p)
                                                                                        for p in params)])
    want = [w for w, n in zip(want, outs) if n]
    for g, w in zip(got, want):
        assert g.dtype == np.float16
        np.testing.assert_allclose(g.astype(np.float32), w.astype(np.float32), rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("band", [None, 5])
def test_bfloat16_mlp_computes_into_its_blocks(alloc, monkeypatch, band):
    """bfloat16 MatMul (A upcast once, B by bands of columns: several when `band` is small), Sigmoid (float32
    chunks), Mul (ml_dtypes' loop) and Cast to float32 compute into their blocks, bit-identical to upcasting."""
    import ml_dtypes
    from onnx import numpy_helper

    from ort_cpu_ep.ops import ops_math

    if band is not None:
        monkeypatch.setattr(ops_math, "BF16_MATMUL_BAND", band * 16)
    bf16, M, K, N = TensorProto.BFLOAT16, 12, 16, 24
    rng = np.random.default_rng(7)
    w = rng.standard_normal((K, N)).astype(ml_dtypes.bfloat16)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"), helper.make_node("Sigmoid", ["h"], ["s"], name="sig"),
             helper.make_node("Mul", ["h", "s"], ["m"], name="mul"),
             helper.make_node("Cast", ["m"], ["y"], name="cast", to=TensorProto.FLOAT)]
    w_init = helper.make_tensor("w", bf16, [K, N], w.tobytes(), raw=True)
    model = helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", bf16, [M, K])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [M, N])], [w_init]),
        opset_imports=[helper.make_opsetid("", 17)])
    x = rng.standard_normal((M, K)).astype(ml_dtypes.bfloat16)
    sess = InferenceSession(model.SerializeToString(), {**PRE, "measure_host_allocations": True}, providers=CPU)
    got = sess.run(None, {"x": x})[0]
    assert np.array_equal(numpy_helper.to_array(w_init).view(np.uint16), w.view(np.uint16))
    h = (x.astype(np.float32) @ w.astype(np.float32)).astype(ml_dtypes.bfloat16)
    s = (1 / (1 + np.exp(-h.astype(np.float32)))).astype(ml_dtypes.bfloat16)
    want = (h.astype(np.float32) * s.astype(np.float32)).astype(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_allclose(got, want, rtol=1e-2)  # float32 summation order and exp may differ by a bf16 ulp
    stats = sess.last_run_stats
    assert stats.copied_outputs == 0 and stats.workspace_from_plan == 2 and stats.scratch_fallbacks == 0
    assert stats.traced_bytes < 256, stats.traced_nodes


@pytest.mark.parametrize("negative", [False, True])
def test_gather_checks_its_indices_without_index_sized_temporaries(alloc, negative, monkeypatch):
    """The numpy Gather (the C one, csrc/move_gather.c, allocates nothing): valid non-negative int64 indices are
    range-checked by their minimum and maximum and used as given: nothing index-sized is allocated (negative ones
    are made non-negative in a temporary, as they must)."""
    from ort_cpu_ep import c_kernels

    monkeypatch.setenv(c_kernels.DISABLE_ENV, "1")
    c_kernels._load.cache_clear()
    try:
        _gather_temporaries(negative)
    finally:
        monkeypatch.delenv(c_kernels.DISABLE_ENV)
        c_kernels._load.cache_clear()


def _gather_temporaries(negative: bool) -> None:
    n = 4096
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["y"], name="gather")], "g",
        [helper.make_tensor_value_info("table", TensorProto.FLOAT, [64, 8]),
         helper.make_tensor_value_info("ids", TensorProto.INT64, [n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n, 8])]),
        opset_imports=[helper.make_opsetid("", 17)])
    rng = np.random.default_rng(1)
    table = rng.standard_normal((64, 8)).astype(np.float32)
    ids = rng.integers(-64 if negative else 0, 64, n)
    sess = InferenceSession(model.SerializeToString(), {**PRE, "measure_host_allocations": True}, providers=CPU)
    np.testing.assert_array_equal(sess.run(None, {"table": table, "ids": ids})[0], table[ids])
    held = sess.last_run_stats.traced_nodes.get("gather", 0)
    assert held >= ids.nbytes if negative else held < 64, held


def test_without_the_extension_the_tracemalloc_fallback_is_named(monkeypatch):
    monkeypatch.setattr(_traced, "counting_allocator", lambda: None)
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Hardmax", ["x"], ["y"], name="hardmax")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 64])]), opset_imports=[helper.make_opsetid("", 17)])
    sess = InferenceSession(model.SerializeToString(), {**PRE, "measure_host_allocations": True}, providers=CPU)
    sess.run(None, {"x": np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)})
    stats = sess.last_run_stats
    assert stats.traced_by == _traced.TRACEMALLOC_DOMAIN and stats.traced_python_bytes > 0
    assert stats.traced_bytes is not None and stats.copied_outputs == 1
