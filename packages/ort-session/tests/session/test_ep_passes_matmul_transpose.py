"""The CPU provider's MatMulTransposeFusion pass on a zoo decoder (its attention multiplies Q by Transpose(K)):
fused into FusedMatMul(transB=1) on the nodes the CPU provider claimed; outputs equal onnxruntime's and the
unfused run; the Transpose nodes are gone; pre-allocated runs allocate nothing."""

import numpy as np

from ort_graph import zoo
from ort_session import CpuExecutionProvider, InferenceSession

CFG = zoo.DecoderConfig(batch=1, sequence=8, past_sequence=4)
FEEDS = zoo.decoder_inputs(CFG, sequence=8, past=4)
PRE = {"session.pre_allocate_execution_buffers": "1"}


def fusions(sess):
    return [f for f in sess.fusions if f.fusion == "MatMulTransposeFusion"]


def test_the_attention_key_transpose_is_fused_and_matches_onnxruntime(matches_onnxruntime):
    sess = InferenceSession(zoo.decoder_proto(CFG), PRE, providers=["CPUExecutionProvider"])
    records = fusions(sess)
    assert len(records) == CFG.layers
    # the decoder's attention is grouped-query: RepeatKVFusion then folds each FusedMatMul's repeated K into Q's rows
    # (a FusedMatMul of the same attributes, named after it)
    folded = {f.replaced[-1]: f.created[1] for f in sess.fusions if f.fusion == "RepeatKVFusion"}
    for r in records:
        (created,) = r.created
        node = sess.model.graph.node_by_name(folded.get(created, created))
        assert (node.op_type, node.domain, node.ep, node.attr("transB")) == (
            "FusedMatMul", "com.microsoft", "CPUExecutionProvider", 1)
        assert sess.model.graph.values[node.inputs[1]].producer.op_type != "Transpose"
    got = sess.run(None, FEEDS)
    assert sess.last_run_stats.allocations == 0
    matches_onnxruntime(zoo.decoder_proto(CFG), FEEDS, got)


def test_outputs_equal_the_unfused_run_and_the_transposes_are_gone(monkeypatch):
    fused = InferenceSession(zoo.decoder_proto(CFG), providers=["CPUExecutionProvider"])
    monkeypatch.setattr(CpuExecutionProvider, "graph_passes", lambda self: [])
    plain = InferenceSession(zoo.decoder_proto(CFG), providers=["CPUExecutionProvider"])
    assert fusions(fused) and not fusions(plain)
    for g, w in zip(fused.run(None, FEEDS), plain.run(None, FEEDS), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    transposed = {r.replaced[0] for r in fusions(fused)}
    assert transposed <= {n.name for n in plain.model.graph.nodes}
    assert not transposed & {n.name for n in fused.model.graph.nodes}
