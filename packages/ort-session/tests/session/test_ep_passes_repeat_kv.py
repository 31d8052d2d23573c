"""The CPU provider's RepeatKVFusion pass: a zoo decoder's grouped-query attention (kv_heads < heads) reads its
KV cache repeated by Unsqueeze/Expand/Reshape; the pass folds the group into the query rows instead. Outputs equal
onnxruntime's and the run without the pass; the Expand nodes and their g-times-the-cache blocks are gone from the
plan (a smaller planned activation peak); pre-allocated runs allocate nothing. The torch exports match onnxruntime
whether or not their repeats matched (pinned: which ones did)."""

import warnings

import numpy as np
import onnxruntime as ort
import pytest

from ort_graph import zoo
from ort_session import CpuExecutionProvider, InferenceSession

CFG = zoo.DecoderConfig(batch=1, sequence=8, past_sequence=4)
FEEDS = zoo.decoder_inputs(CFG, sequence=8, past=4)
PRE = {"session.pre_allocate_execution_buffers": "1"}


def fusions(sess):
    return [f for f in sess.fusions if f.fusion == "RepeatKVFusion"]


def without_repeat_kv(monkeypatch):
    passes = CpuExecutionProvider.graph_passes
    monkeypatch.setattr(CpuExecutionProvider, "graph_passes",
                        lambda self: [p for p in passes(self) if p.name != "RepeatKVFusion"])


def test_the_kv_repeats_are_folded_and_match_onnxruntime_without_allocating(matches_onnxruntime):
    sess = InferenceSession(zoo.decoder_proto(CFG), PRE, providers=["CPUExecutionProvider"])
    records = fusions(sess)
    assert len(records) == 2 * CFG.layers  # the scores' K (a FusedMatMul by then) and the context's V
    graph = sess.model.graph
    for r in records:
        node = graph.node_by_name(r.created[1])
        assert node.op_type in ("MatMul", "FusedMatMul") and node.ep == "CPUExecutionProvider"
        assert graph.values[node.inputs[1]].producer.op_type == "Concat"  # the KV cache itself, not a repeat
    assert not [n for n in graph.nodes if n.op_type == "Expand"]
    got = sess.run(None, FEEDS)
    assert sess.last_run_stats.allocations == 0
    matches_onnxruntime(zoo.decoder_proto(CFG), FEEDS, got)


def test_outputs_equal_the_unfused_run(monkeypatch):
    fused = InferenceSession(zoo.decoder_proto(CFG), providers=["CPUExecutionProvider"])
    without_repeat_kv(monkeypatch)
    plain = InferenceSession(zoo.decoder_proto(CFG), providers=["CPUExecutionProvider"])
    assert fusions(fused) and not fusions(plain)
    assert [n for n in plain.model.graph.nodes if n.op_type == "Expand"]
    for g, w in zip(fused.run(None, FEEDS), plain.run(None, FEEDS), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_the_expanded_blocks_leave_the_planned_activation_peak(monkeypatch):
    # g = 4 and a long past: the expanded K/V block (g times the cache) dominated the attention's activations
    cfg = zoo.DecoderConfig(layers=2, hidden=64, heads=8, kv_heads=2, batch=1, sequence=8, past_sequence=256)
    fused = InferenceSession(zoo.decoder_proto(cfg), providers=["CPUExecutionProvider"])
    without_repeat_kv(monkeypatch)
    plain = InferenceSession(zoo.decoder_proto(cfg), providers=["CPUExecutionProvider"])
    peak = {s: s.plan.to_dict()["devices"]["cpu"]["peak_activations"] for s in (fused, plain)}
    kv_block = 1 * cfg.kv_heads * (256 + 8) * (cfg.hidden // cfg.heads) * 4
    group = cfg.heads // cfg.kv_heads
    # at least the expanded block beyond the cache itself ((g - 1) cache blocks) is gone from the peak
    assert peak[plain] - peak[fused] >= (group - 1) * kv_block


# which exports' repeats the pass folds: TorchScript's static export computes its Expand shape from constants
# (folded) and reads the V repeat by a MatMul; its K repeat goes Transpose -> Mul(scale) -> MatMul (not a direct
# read, stays). Dynamo's static export Reshapes K to rank 3 before its Transpose (stays) and reads V by a MatMul
# (folded). The dynamic exports compute the shapes from Shape nodes: no proof for other runs' shapes, they stay.
TORCH = {"dynamo_static": 4, "dynamo_dynamic": 0, "dynamo_kv_dynamic": 0, "torchscript_static": 4,
         "torchscript_dynamic": 0, "torchscript_kv_dynamic": 0}
DIMS = {"batch": 2, "seq": 4, "past_seq": 3, "total_seq": 7}


@pytest.mark.parametrize("name", sorted(TORCH))
def test_torch_exports_match_onnxruntime_with_the_pass(shared_models, name):
    path = shared_models / "llama_l4" / "torch" / f"{name}.onnx"
    if not path.exists():
        pytest.skip(f"{path} is absent")
    ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds, symbols = {}, set()
    for i in ref.get_inputs():
        symbols |= {d for d in i.shape if isinstance(d, str)}
        shape = [d if isinstance(d, int) else DIMS[d] for d in i.shape]
        if i.type == "tensor(int64)":
            feeds[i.name] = np.ones(shape, np.int64) if "mask" in i.name else rng.integers(0, 256, shape)
        else:
            feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = InferenceSession(str(path), {"free_dimension_overrides": {k: v for k, v in DIMS.items() if k in symbols}},
                                providers=["CPUExecutionProvider"])
    assert len(fusions(sess)) == TORCH[name]
    for got, want in zip(sess.run(None, feeds), ref.run(None, feeds), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
