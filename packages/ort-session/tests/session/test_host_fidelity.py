"""Host memory is what the plan says: CPU kernels compute into the blocks they are given, their
temporaries are declared workspace, and `measure_host_allocations` reports what a run really allocated."""

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper

from ort_cpu_ep.ops import _registry
from ort_graph import zoo
from ort_session import InferenceSession

CPU = ["CPUExecutionProvider"]
PRE = {"session.pre_allocate_execution_buffers": "1"}
HOT = ("MatMul", "Add", "Mul", "Sigmoid", "Softmax", "SimplifiedLayerNormalization", "Transpose", "Concat", "Gather",
       "Slice", "Reshape", "Expand", "Where", "Neg", "Cast")


def _decoder_session(cfg, seq, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return InferenceSession(zoo.decoder(cfg), {"free_dimension_overrides": {"batch": 1, "sequence": seq,
                                                                                "past_sequence": 0},
                                                   **PRE, **options}, providers=CPU)


def test_decoder_copies_only_what_kernels_without_an_output_block_return():
    cfg = zoo.DecoderConfig(layers=2, hidden=64, heads=4, kv_heads=2)
    sess = _decoder_session(cfg, 8)
    sess.run(None, zoo.decoder_inputs(cfg, 1, 8, 0))
    # a C kernel (ort-cpu-ep's library: the fused SimplifiedLayerNormalization) asks the host for its output
    # blocks, so it always writes them; a numpy kernel says whether it does
    writes = {n.index: getattr(getattr(sess.kernels[n.index], "impl", None), "writes_output", True)
              for n in sess.model.graph.nodes}
    ops = {n.op_type for n in sess.model.graph.nodes}
    assert {op for op in HOT if op in ops} == {op for op in HOT if op in ops and all(
        writes[n.index] for n in sess.model.graph.nodes if n.op_type == op)}
    fresh = [n for n in sess.model.graph.nodes if not writes[n.index]]
    stats = sess.last_run_stats
    assert stats.copied_outputs == sum(len([o for o in n.outputs if o]) for n in fresh)
    assert not fresh  # every kernel of a decoder computes into its planned block (Range was the last one)
    assert stats.scratch_fallbacks == 0 and stats.workspace_from_plan > 0


def test_traced_bytes_only_when_measuring_and_within_a_tenth_of_the_plan():
    cfg = zoo.DecoderConfig(layers=2, hidden=512, heads=8, kv_heads=4, vocab=512)
    feeds = zoo.decoder_inputs(cfg, 1, 128, 0)
    plain = _decoder_session(cfg, 128)
    plain.run(None, feeds)
    assert plain.last_run_stats.traced_bytes is None
    sess = _decoder_session(cfg, 128, measure_host_allocations=True)
    sess.run(None, feeds)
    sess.run(None, feeds)
    dev = sess.plan.to_dict()["devices"]["cpu"]
    planned = dev["peak_activations"] + dev["workspace"]
    traced = sess.last_run_stats.traced_bytes
    assert 0 < traced <= planned // 10, (traced, planned)


def test_traced_bytes_see_a_kernel_that_allocates_its_result():
    """Hardmax returns a fresh array the session copies in: a 4 MiB result shows in traced_bytes."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1024, 1024])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1024, 1024])
    model = helper.make_model(helper.make_graph([helper.make_node("Hardmax", ["x"], ["y"])], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    sess = InferenceSession(model.SerializeToString(), {**PRE, "measure_host_allocations": True}, providers=CPU)
    sess.run(None, {"x": np.random.default_rng(0).standard_normal((1024, 1024)).astype(np.float32)})
    stats = sess.last_run_stats
    assert stats.copied_outputs == 1 and stats.copied_bytes == 4 << 20
    assert stats.traced_bytes >= 4 << 20


def test_sigmoid_is_stable_and_may_write_over_its_input():
    from ort_cpu_ep.ops.ops_unary import sigmoid_into

    x = np.concatenate([np.linspace(-90, 90, 40001), [0.0, -0.0, np.inf, -np.inf, np.nan]]).astype(np.float32)
    ref = 1 / (1 + np.exp(-x.astype(np.float64)))
    out = np.empty_like(x)
    with np.errstate(all="raise"):  # exp(-x) over- or underflowing is the exact limit, not reported
        sigmoid_into(x, out)
    normal = ref > np.finfo(np.float32).tiny
    np.testing.assert_allclose(out[normal], ref[normal], rtol=4 * np.finfo(np.float32).eps)  # a few roundings
    assert out[-5] == out[-4] == 0.5 and out[-3] == 1.0 and out[-2] == 0.0 and np.isnan(out[-1])
    same = x.copy()
    sigmoid_into(same, same)
    assert np.array_equal(same, out, equal_nan=True)


@pytest.mark.parametrize("alias", [0, 1, 2])
def test_where_reads_its_inputs_before_writing_an_aliased_output(alias):
    """An in-place plan may give Where's output the block of an input that dies there (the condition only
    when the values are bool too)."""
    from ort_graph import Node

    rng = np.random.default_rng(alias)
    c = rng.random((4, 5)) > 0.5
    x, y = (rng.random((4, 5)) > 0.5, rng.random((4, 5)) > 0.5) if alias == 0 else \
        (rng.standard_normal((4, 5)), rng.standard_normal((4, 5)))
    want = np.where(c, x, y)
    given = [c.copy(), x.copy(), y.copy()]
    token = _registry._OUTPUT.set(lambda index, shape, dtype: given[alias])
    try:
        got = _registry.find("Where", "", 17).compute(Node(0, "w", "Where", "", ["c", "x", "y"], ["out"]), given)[0]
    finally:
        _registry._OUTPUT.reset(token)
    assert got is given[alias] and np.array_equal(got, want)


def test_outputs_outside_a_session_are_fresh_arrays():
    from ort_graph import Node

    a = np.ones((2, 3), np.float32)
    out = _registry.find("Add", "", 17).compute(Node(0, "a", "Add", "", ["a", "b"], ["y"]), [a, a])[0]
    assert out.base is None and np.array_equal(out, a + a)


def test_kernels_table_says_which_kernels_copy():
    from ort_session._kernels import kernel_rows, kernel_table

    rows = {(r["ep"], r["op"]): r for r in kernel_rows()}
    cpu = "CPUExecutionProvider"
    assert rows[(cpu, "MatMul")]["output"] == "in block" and rows[(cpu, "Hardmax")]["output"] == "copied"
    assert rows[(cpu, "com.microsoft::GroupQueryAttention")]["output"] == "in block"
    assert "output: copied" in kernel_table()


def test_quantized_activations_are_computed_in_the_workspace_as_before():
    """fake_quantize_a in a given buffer equals the plain formula (scale max |a| / 127 per block, a * (127 / max |a|) rounded)."""
    from ort_cpu_ep.ops.ops_extra_quant import fake_quantize_a

    a = np.random.default_rng(3).standard_normal((5, 70)).astype(np.float32)
    a[1] = 0
    padded = np.zeros((5, 96), np.float32)
    padded[:, :70] = a
    blocks = padded.reshape(5, 3, 32)
    amax = np.abs(blocks).max(axis=-1)
    scale = (amax / np.float32(127)).astype(np.float32)
    inv = np.where(amax != 0, np.float32(127) / np.where(amax != 0, amax, 1), 0).astype(np.float32)
    want = (np.rint(blocks * inv[..., None]) * scale[..., None]).reshape(5, 96)[:, :70]
    buf = np.full(5 * 96, np.nan, np.float32)
    got = fake_quantize_a(a, 32, buf)
    assert np.array_equal(got, want) and np.shares_memory(got, buf)


@pytest.mark.parametrize("opset,axis,rows", [(11, 1, 2), (11, 2, 6), (13, 1, 8), (13, -1, 6)])
def test_softmax_declares_its_row_statistics_for_the_models_opset(opset, axis, rows):
    """Before opset 13 Softmax coerces its input to 2-D at `axis`: one statistic per leading row. Rows of contiguous
    values (the last axis at any opset, any axis before 13) go to the C kernel where it is built, which keeps its
    statistics in registers: no workspace; the numpy kernel declares one per row."""
    from ort_cpu_ep import c_kernels

    in_c = (axis in (-1, 2) or opset < 13) and c_kernels.c_registry() is not None
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4])
    model = helper.make_model(helper.make_graph([helper.make_node("Softmax", ["x"], ["y"], axis=axis)], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", opset)])
    sess = InferenceSession(model.SerializeToString(), PRE, providers=CPU)
    node = sess.model.graph.nodes[0]
    from ort_cpu_ep._provider import node_input_shapes

    if in_c:  # the ABI's declaration (Level 2), as the session plans it
        import ort_abi

        declared = ort_abi.declare_workspace(sess.kernels[node.index], ort_abi.workspace_input_shapes(node))
    else:
        declared = sess.kernels[node.index].declare_workspace(node_input_shapes(node))
    assert [(s.slot_id, s.size_bytes) for s in declared] == ([] if in_c else [(0, 4 * rows + 4)])
    data = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    got = sess.run(None, {"x": data})[0]
    v = data.reshape(int(np.prod(data.shape[:axis])), -1) if opset < 13 else data
    e = np.exp(v - v.max(axis=-1 if opset < 13 else axis, keepdims=True))
    want = (e / e.sum(axis=-1 if opset < 13 else axis, keepdims=True)).reshape(data.shape)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert sess.last_run_stats.workspace_from_plan == (0 if in_c else 1) and sess.last_run_stats.copied_outputs == 0


def test_broadcasting_kernels_keep_numpys_buffers_small_and_leave_its_setting_alone():
    """A broadcasting ufunc allocates numpy iterator buffers (32 KiB for float32 at numpy's default 8192
    elements); CPU kernels run with 1024, and the caller's setting is untouched."""
    from ort_cpu_ep._provider import UFUNC_BUFSIZE

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1024, 1024])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, [1024])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1024, 1024])
    model = helper.make_model(helper.make_graph([helper.make_node("Add", ["x", "b"], ["y"])], "g", [x, b], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    sess = InferenceSession(model.SerializeToString(), {**PRE, "measure_host_allocations": True}, providers=CPU)
    feeds = {"x": np.ones((1024, 1024), np.float32), "b": np.arange(1024, dtype=np.float32)}
    before = np.getbufsize()
    sess.run(None, feeds)
    got = sess.run(None, feeds)[0]
    assert np.array_equal(got, feeds["x"] + feeds["b"])
    assert sess.last_run_stats.traced_bytes < 4 * before // 2, sess.last_run_stats.traced_bytes
    assert np.getbufsize() == before and UFUNC_BUFSIZE < before


@pytest.mark.parametrize("interleaved", [0, 1])
def test_rotary_computes_in_its_block_with_its_product_in_declared_workspace(interleaved):
    from ort_cpu_ep.ops.ops_extra_attention import apply_rotary

    B, N, S, H = 2, 3, 5, 16
    rng = np.random.default_rng(interleaved)
    ang = rng.random((32, H // 2)) * 3
    cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    f = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("x", f, [B, N, S, H]),
              helper.make_tensor_value_info("pos", TensorProto.INT64, [B, S])]
    inits = [helper.make_tensor("cos", f, cos.shape, cos.reshape(-1)), helper.make_tensor("sin", f, sin.shape,
                                                                                         sin.reshape(-1))]
    node = helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], domain="com.microsoft",
                            interleaved=interleaved)
    model = helper.make_model(helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", f, [B, N, S, H])],
                                                inits),
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    sess = InferenceSession(model.SerializeToString(), PRE, providers=CPU)
    x = rng.standard_normal((B, N, S, H)).astype(np.float32)
    pos = rng.integers(0, 32, (B, S)).astype(np.int64)
    got = sess.run(None, {"x": x, "pos": pos})[0]
    want = apply_rotary(x.transpose(0, 2, 1, 3), cos[pos][:, :, None], sin[pos][:, :, None],
                        bool(interleaved)).transpose(0, 2, 1, 3)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    stats = sess.last_run_stats
    assert stats.workspace_from_plan == 1 and stats.copied_outputs == 0 and stats.scratch_fallbacks == 0


@pytest.mark.parametrize("past", [0, 4])
def test_multi_head_attention_fills_its_output_and_present_blocks(past):
    import onnxruntime as ort

    B, S, N, H = 2, 3, 2, 8
    f = TensorProto.FLOAT
    names = ["q", "k", "v"] + (["pk", "pv"] if past else [])
    ins = [helper.make_tensor_value_info(n, f, [B, S, N * H]) for n in names[:3]]
    ins += [helper.make_tensor_value_info(n, f, [B, N, past, H]) for n in names[3:]]
    outs = [helper.make_tensor_value_info("o", f, [B, S, N * H]), helper.make_tensor_value_info("ck", f, [B, N, past + S, H]),
            helper.make_tensor_value_info("cv", f, [B, N, past + S, H])]
    node = helper.make_node("MultiHeadAttention", ["q", "k", "v", "", "", ""] + names[3:], ["o", "ck", "cv"],
                            domain="com.microsoft", num_heads=N)
    model = helper.make_model(helper.make_graph([node], "g", ins, outs), opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]).SerializeToString()
    rng = np.random.default_rng(past)
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
             for i in ins}
    sess = InferenceSession(model, PRE, providers=CPU)
    got = sess.run(None, feeds)
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-6)
    stats = sess.last_run_stats
    assert stats.copied_outputs == 0 and stats.workspace_from_plan == 1 and stats.planned_values == 3
