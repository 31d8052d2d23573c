"""The contrib and quantized ops real exporters write (onnxruntime-genai's builder, ORT's static and dynamic
quantizers), one node each through an InferenceSession with pre-allocated buffers, against onnxruntime:
equal outputs, every value's shape resolved, the output computed into its planned block, a Level-1
estimate before placement and its Level-2 slots taken from the plan (no scratch fallback)."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import ort_graph
from ort_cpu_ep import CpuExecutionProvider
from ort_session import InferenceSession

ort = pytest.importorskip("onnxruntime")
r = np.random.default_rng(0)
F, U8, I8 = np.float32, np.uint8, np.int8
MS = "com.microsoft"


def f(*s):
    return r.standard_normal(s).astype(F)


def u8(*s):
    return r.integers(0, 256, s).astype(U8)


def i8(*s):
    return r.integers(-128, 128, s).astype(I8)


# int8 weights times uint8 activations stay within 7 bits ([-64, 64)): onnxruntime's u8s8 GEMM on x86 without
# AVX-512 VNNI adds pairs of products in int16 (vpmaddubsw) and saturates beyond that, which its quantizer
# avoids the same way (reduce_range); the peer would be the one off, on such a machine
def w8(*s):
    return r.integers(-64, 64, s).astype(I8)


def c(v, dt=F):
    return np.asarray(v, dt)


Q, W = "feed", "init"  # how an input is given: a graph input, or an initializer (weights, parameters)
CASES = {
    # ORT's dynamic quantizer (QOperator): DynamicQuantizeLinear + MatMulInteger / ConvInteger, or the fused ops
    "DynamicQuantizeLinear": ("", "DynamicQuantizeLinear", [(Q, f(6, 40))], {}, 3, 1e-6),
    "MatMulInteger": ("", "MatMulInteger", [(Q, u8(2, 5, 48)), (W, w8(48, 24)), (W, c(7, U8)), (W, c(3, I8))], {}, 1, 0),
    "MatMulInteger-per-column": ("", "MatMulInteger", [(Q, u8(6, 48)), (W, u8(48, 24)), (W, c(128, U8)),
                                                       (W, u8(24))], {}, 1, 0),
    "ConvInteger": ("", "ConvInteger", [(Q, u8(2, 4, 9, 9)), (W, u8(6, 2, 3, 3)), (W, c(120, U8)), (W, c(128, U8))],
                    dict(pads=[1, 1, 0, 2], strides=[2, 1], group=2), 1, 0),
    "DynamicQuantizeMatMul": (MS, "DynamicQuantizeMatMul", [(Q, f(2, 5, 32)), (W, w8(32, 20)), (W, c([0.02] * 20)),
                                                            (W, c([1] * 20, I8)), (W, f(20))], {}, 1, 1e-5),
    "MatMulIntegerToFloat": (MS, "MatMulIntegerToFloat", [(Q, u8(7, 32)), (W, w8(32, 12)), (W, c(0.03)),
                                                          (W, c([0.01] * 12)), (W, c(120, U8)), (W, c(0, I8)),
                                                          (W, f(12))], {}, 1, 1e-5),
    # ORT's static quantizer (QDQ: the default format; QOperator below)
    "QuantizeLinear": ("", "QuantizeLinear", [(Q, f(4, 6, 8) * 4), (W, c(0.03)), (W, c(-3, I8))], {}, 1, 0),
    "QuantizeLinear-per-axis": ("", "QuantizeLinear", [(Q, f(4, 6, 8) * 4), (W, np.abs(f(6)) / 10 + 0.01),
                                                       (W, u8(6))], dict(axis=1), 1, 0),
    "QuantizeLinear-ms": (MS, "QuantizeLinear", [(Q, f(4, 6, 8) * 4), (W, c(0.03)), (W, c(128, U8))], {}, 1, 0),
    "QLinearMatMul": ("", "QLinearMatMul", [(Q, u8(2, 3, 32)), (W, c(0.02)), (W, c(128, U8)), (W, w8(32, 16)),
                                            (W, c(0.01)), (W, c(0, I8)), (W, c(0.05)), (W, c(120, U8))], {}, 1, 1),
    "QLinearConv": ("", "QLinearConv", [(Q, u8(1, 3, 8, 8)), (W, c(0.02)), (W, c(128, U8)), (W, w8(5, 3, 3, 3)),
                                        (W, c([0.01, 0.02, 0.015, 0.01, 0.03])), (W, c([0] * 5, I8)), (W, c(0.2)),
                                        (W, c(100, U8)), (W, r.integers(-300, 300, 5).astype(np.int32))],
                    dict(pads=[1, 1, 1, 1], dilations=[1, 2]), 1, 1),
    "QGemm-float": (MS, "QGemm", [(Q, u8(5, 32)), (W, c(0.02)), (W, c(128, U8)), (W, w8(16, 32)), (W, c([0.01] * 16)),
                                  (W, c([0] * 16, I8)), (W, r.integers(-500, 500, 16).astype(np.int32))],
                    dict(transB=1, alpha=1.0), 1, 1e-4),
    "QGemm-quantized": (MS, "QGemm", [(Q, u8(5, 32)), (W, c(0.02)), (W, c(128, U8)), (W, w8(32, 16)), (W, c(0.01)),
                                      (W, c(0, I8)), ("", None), (W, c(0.08)), (W, c(128, U8))], {}, 1, 1),
    "QLinearAdd": (MS, "QLinearAdd", [(Q, u8(2, 8, 16)), (W, c(0.02)), (W, c(128, U8)), (W, u8(16)), (W, c(0.03)),
                                      (W, c(100, U8)), (W, c(0.05)), (W, c(128, U8))], {}, 1, 1),
    "QLinearMul": (MS, "QLinearMul", [(Q, i8(4, 16)), (W, c(0.02)), (W, c(0, I8)), (Q, i8(4, 16)), (W, c(0.03)),
                                      (W, c(1, I8)), (W, c(0.3)), (W, c(0, I8))], {}, 1, 1),
    "QLinearSigmoid": (MS, "QLinearSigmoid", [(Q, u8(3, 50)), (W, c(0.05)), (W, c(128, U8)), (W, c(0.004)),
                                              (W, c(0, U8))], {}, 1, 1),
    "QLinearLeakyRelu": (MS, "QLinearLeakyRelu", [(Q, i8(3, 50)), (W, c(0.05)), (W, c(0, I8)), (W, c(0.04)),
                                                  (W, c(-10, I8))], dict(alpha=0.2), 1, 1),
    "QLinearGlobalAveragePool": (MS, "QLinearGlobalAveragePool", [(Q, u8(2, 8, 6, 6)), (W, c(0.05)), (W, c(128, U8)),
                                                                  (W, c(0.02)), (W, c(128, U8))], {}, 1, 1),
    "QLinearAveragePool": (MS, "QLinearAveragePool", [(Q, u8(2, 3, 9, 8)), (W, c(0.05)), (W, c(128, U8)),
                                                      (W, c(0.04)), (W, c(120, U8))],
                           dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1], count_include_pad=1), 1, 1),
    "QLinearAveragePool-nhwc-ceil": (MS, "QLinearAveragePool", [(Q, i8(1, 10, 7, 4)), (W, c(0.05)), (W, c(0, I8)),
                                                                (W, c(0.03)), (W, c(-2, I8))],
                                     dict(kernel_shape=[3, 3], strides=[2, 3], ceil_mode=1, channels_last=1), 1, 1),
    "QLinearConcat": (MS, "QLinearConcat", [(W, c(0.05)), (W, c(128, U8)), (Q, u8(2, 3, 4)), (W, c(0.04)),
                                            (W, c(120, U8)), (Q, u8(2, 5, 4)), (W, c(0.06)), (W, c(130, U8))],
                      dict(axis=1), 1, 1),
    "QLinearSoftmax": (MS, "QLinearSoftmax", [(Q, u8(3, 4, 20)), (W, c(0.1)), (W, c(128, U8)), (W, c(1 / 256)),
                                              (W, c(0, U8))], dict(axis=-1, opset=13), 1, 1),
    "QLinearSoftmax-axis1": (MS, "QLinearSoftmax", [(Q, i8(3, 4, 5)), (W, c(0.1)), (W, c(0, I8)), (W, c(1 / 256)),
                                                    (W, c(-128, I8))], dict(axis=1, opset=13), 1, 1),
    "QLinearSoftmax-opset12": (MS, "QLinearSoftmax", [(Q, u8(3, 4, 5)), (W, c(0.05)), (W, c(128, U8)),
                                                      (W, c(1 / 256)), (W, c(0, U8))], dict(axis=1, opset=12), 1, 1),
    "QLinearSoftmax-axis0": (MS, "QLinearSoftmax", [(Q, u8(3, 4, 5)), (W, c(0.05)), (W, c(3, U8)), (W, c(1 / 256)),
                                                    (W, c(0, U8))], dict(axis=0, opset=13), 1, 1),
    "QLinearSoftmax-opset11-axis2": (MS, "QLinearSoftmax", [(Q, i8(2, 3, 4, 5)), (W, c(0.05)), (W, c(0, I8)),
                                                            (W, c(1 / 256)), (W, c(-128, I8))], dict(axis=2, opset=11),
                                     1, 1),
    # onnxruntime-genai's tied embedding
    "GatherBlockQuantized": (MS, "GatherBlockQuantized", [(W, u8(64, 64)), (Q, r.integers(0, 64, (2, 6))),
                                                          (W, np.abs(f(64, 4))), (W, u8(64, 2))],
                             dict(bits=4, block_size=32, gather_axis=0, quantize_axis=1), 1, 1e-6),
}


def _model(domain, op, inputs, attrs, n_out):
    names, vis, inits, feeds = [], [], [], {}
    for i, (kind, a) in enumerate(inputs):
        if not kind:
            names.append("")
            continue
        names.append(f"i{i}")
        if kind == W:
            inits.append(numpy_helper.from_array(a, f"i{i}"))
        else:
            feeds[f"i{i}"] = a
            vis.append(helper.make_tensor_value_info(f"i{i}", helper.np_dtype_to_tensor_dtype(a.dtype), a.shape))
    outs = [f"o{i}" for i in range(n_out)]
    node = helper.make_node(op, names, outs, name=f"/model/{op}", domain=domain, **attrs)
    graph = helper.make_graph([node], "g", vis, [onnx.ValueInfoProto(name=o) for o in outs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)],
                              ir_version=10)
    return model, feeds


def _run_both(model, feeds):
    """(our pre-allocated session, its outputs, onnxruntime's), every value's shape resolved."""
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ort_graph.ShapeResolutionWarning)
        sess = InferenceSession(model.SerializeToString(), {"session.pre_allocate_execution_buffers": "1"},
                                providers=["CPUExecutionProvider"])
    return sess, sess.run(None, feeds), want


def _estimate(model) -> int | None:
    """The CPU provider's Level-1 workspace estimate of the model's one node."""
    m = ort_graph.from_proto(model)
    ort_graph.resolve_shapes(m)
    return CpuExecutionProvider(m.graph, m.opset_imports).estimate(m.graph.nodes[0])


@pytest.mark.parametrize("case", list(CASES))
def test_quantized_op_matches_onnxruntime_in_its_planned_block(case):
    domain, op, inputs, attrs, n_out, tol = CASES[case]
    model, feeds = _model(domain, op, inputs, attrs, n_out)
    sess, got, want = _run_both(model, feeds)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        if np.issubdtype(w.dtype, np.integer) and tol >= 1:  # requantized codes: off by one where rounding ties
            assert np.abs(g.astype(np.int64) - w.astype(np.int64)).max() <= tol
        else:
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
    stats = sess.last_run_stats
    assert stats.copied_outputs == 0 and stats.scratch_fallbacks == 0 and stats.workspace_from_plan > 0
    assert _estimate(model) > 0


@pytest.mark.parametrize("bits,block", [(4, 16), (4, 256), (8, 32), (8, 128)])
@pytest.mark.parametrize("with_zp", [False, True])
@pytest.mark.parametrize("sdtype", [np.float32, np.float16])
def test_gather_block_quantized_embedding_sweep_in_a_session(bits, block, with_zp, sdtype):
    V, K = 40, 512
    q, scales, zp = ort_graph.zoo.quantize_blocks(f(V, K), bits, block)
    ins = [(W, q.reshape(V, K * bits // 8)), (Q, np.array([[0, 3, 39], [-1, -40, 25]], np.int64)),
           (W, scales.astype(sdtype))] + ([(W, zp)] if with_zp else [])
    model, feeds = _model(MS, "GatherBlockQuantized", ins, dict(bits=bits, block_size=block), 1)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    sess = InferenceSession(model.SerializeToString(), {"session.pre_allocate_execution_buffers": "1"},
                            providers=["CPUExecutionProvider"])
    got = sess.run(None, feeds)[0]
    assert got.dtype == want.dtype and got.shape == want.shape == (2, 3, K)
    np.testing.assert_allclose(got.astype(F), want.astype(F), rtol=1e-3, atol=1e-3 if sdtype == np.float16 else 1e-6)
    stats = sess.last_run_stats
    assert stats.copied_outputs == 0 and stats.scratch_fallbacks == 0 and stats.workspace_from_plan > 0


@pytest.mark.parametrize("domain", ["", MS])
@pytest.mark.parametrize("per_axis", [False, True])
def test_dequantize_linear_in_its_block_with_a_zero_estimate(domain, per_axis):
    scale, zp = (np.abs(f(6)) / 10 + 0.01, i8(6)) if per_axis else (c(0.03), c(-3, I8))
    model, feeds = _model(domain, "DequantizeLinear", [(Q, i8(4, 6, 8)), (W, scale), (W, zp)], dict(axis=1), 1)
    sess, got, want = _run_both(model, feeds)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    assert got[0].dtype == want[0].dtype and sess.last_run_stats.copied_outputs == 0
    assert _estimate(model) == 0


def test_every_contrib_kernel_has_a_shape_rule():
    """A com.microsoft op ort-cpu-ep runs never leaves the values after it unknown."""
    from ort_cpu_ep.ops._registry import all_ops

    missing = sorted({f"{i.domain}::{i.op_type}" for i in all_ops()
                      if i.domain == MS and not ort_graph.has_shape_rule(ort_graph.Node(0, "n", i.op_type, i.domain))})
    assert not missing


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_bias_add_in_its_block_with_a_zero_estimate(dtype):
    """onnxruntime's CPU provider has no BiasAdd (its CUDA one defines it): Y = X + bias + skip."""
    x, bias, skip = f(2, 6, 8).astype(dtype), f(8).astype(dtype), f(2, 6, 8).astype(dtype)
    model, feeds = _model(MS, "BiasAdd", [(Q, x), (W, bias), (Q, skip)], {}, 1)
    sess = InferenceSession(model.SerializeToString(), {"session.pre_allocate_execution_buffers": "1"},
                            providers=["CPUExecutionProvider"])
    got = sess.run(None, feeds)[0]
    want = (x + bias) + skip
    assert got.dtype == dtype and got.shape == (2, 6, 8)
    np.testing.assert_array_equal(got, want)
    assert sess.last_run_stats.copied_outputs == 0
    assert _estimate(model) == 0


@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("with_past,with_mask", [(False, False), (False, True), (True, False)])
def test_qattention_matches_onnxruntime(per_column, with_past, with_mask):
    """The dynamic quantizer's QAttention (BERT / GPT-2 Attention with int8 weights), estimate and slots planned."""
    hidden, heads, b, s = 16, 2, 2, 3
    ws = c([0.01] * 3 * hidden) if per_column else c(0.01)
    wz = c([2] * 3 * hidden, U8) if per_column else c(2, U8)
    ins = [(Q, u8(b, s, hidden)), (W, u8(hidden, 3 * hidden)), (W, f(3 * hidden)), (W, c(0.02)), (W, ws),
           (Q, np.array([[1, 1, 1, 1, 1, 0][-(4 if with_past else 0) - s:]] * b, np.int32)) if with_mask else ("", None),
           (W, c(128, U8)), (W, wz)]
    if with_past:
        ins.append((Q, f(2, b, heads, 4, hidden // heads)))
    model, feeds = _model(MS, "QAttention", ins, dict(num_heads=heads, unidirectional=int(with_past)), 2 if with_past else 1)
    sess, got, want = _run_both(model, feeds)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    assert sess.last_run_stats.scratch_fallbacks == 0 and sess.last_run_stats.workspace_from_plan > 0
    assert _estimate(model) > 0


@pytest.mark.parametrize("op,with_bias", [("Gelu", False), ("BiasGelu", True), ("FastGelu", False), ("FastGelu", True)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_gelu_family_in_its_block_over_several_chunks(op, with_bias, dtype):
    """The transformers optimizer's Gelu fusions: rows of 96 in chunks of 16384 elements, against onnxruntime."""
    x = (f(3, 300, 96) * 3).astype(dtype)
    ins = [(Q, x)] + ([(W, f(96).astype(dtype))] if with_bias else [])
    model, feeds = _model(MS, op, ins, {}, 1)
    sess, got, want = _run_both(model, feeds)
    assert got[0].dtype == want[0].dtype and got[0].shape == want[0].shape
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(got[0].astype(F), want[0].astype(F), **tol)
    stats = sess.last_run_stats
    assert stats.copied_outputs == 0 and stats.scratch_fallbacks == 0 and stats.workspace_from_plan > 0
    assert _estimate(model) > 0


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("with_sum,with_segment", [(True, True), (False, True), (False, False)])
def test_embed_layer_normalization_matches_onnxruntime(dtype, with_sum, with_segment):
    """BERT's fused embeddings; float32 tables compute into the blocks, a float16 table is never converted whole."""
    b, s, d, vocab = 2, 7, 32, 50
    ins = [(Q, r.integers(0, vocab, (b, s)).astype(np.int32)),
           (Q, r.integers(0, 2, (b, s)).astype(np.int32)) if with_segment else ("", None),
           (W, f(vocab, d).astype(dtype)), (W, f(16, d).astype(dtype)),
           (W, f(2, d).astype(dtype)) if with_segment else ("", None),
           (W, f(d).astype(dtype)), (W, f(d).astype(dtype)), (Q, (r.random((b, s)) > 0.3).astype(np.int32))]
    model, feeds = _model(MS, "EmbedLayerNormalization", ins, dict(epsilon=1e-12), 3 if with_sum else 2)
    sess, got, want = _run_both(model, feeds)
    tol = 1e-5 if dtype == np.float32 else 2e-3
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g.astype(F), w.astype(F), rtol=tol, atol=tol)
    stats = sess.last_run_stats
    assert stats.scratch_fallbacks == 0 and stats.workspace_from_plan > 0
    assert (stats.copied_outputs == 0) == (dtype == np.float32)
    assert _estimate(model) > 0


def test_embed_layer_normalization_names_an_id_outside_the_table():
    from ort_session import KernelRunError

    ins = [(Q, np.array([[1, 60]], np.int32)), ("", None), (W, f(50, 8)), (W, f(4, 8)), ("", None), (W, f(8)),
           (W, f(8))]
    model, feeds = _model(MS, "EmbedLayerNormalization", ins, {}, 2)
    sess = InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with pytest.raises(KernelRunError, match=r"input_ids 60 is outside the table of 50 rows"):
        sess.run(None, feeds)
