"""The genai-layout zoo decoder: the onnxruntime-genai builder's fp32 CPU export's structure, at any width."""

from __future__ import annotations

import collections
import re

import numpy as np
import onnx
import pytest

from ort_graph import zoo

SMALL = zoo.DecoderConfig(layers=4, hidden=64, heads=4, kv_heads=2, vocab=256, intermediate=128, max_positions=128)


def _export(shared_models) -> onnx.ModelProto:
    path = shared_models / "llama_l4" / "genai_fp32_cpu" / "model.onnx"
    if not path.exists():
        pytest.skip(f"{path} not present")
    return onnx.load(str(path), load_external_data=False)


def _per_layer_histogram(model: onnx.ModelProto) -> dict[str, collections.Counter]:
    hist: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for n in model.graph.node:
        m = re.search(r"/layers\.(\d+)/", n.name)
        hist[m.group(1) if m else "-"][(n.domain, n.op_type)] += 1
    return dict(hist)


def test_genai_decoder_has_the_exports_nodes_names_inputs_and_outputs(shared_models):
    ref, ours = _export(shared_models), zoo.genai_decoder_proto(SMALL)
    assert [(n.op_type, n.domain, n.name) for n in ours.graph.node] == [(n.op_type, n.domain, n.name) for n in ref.graph.node]
    assert [list(n.input) for n in ours.graph.node] == [list(n.input) for n in ref.graph.node]
    assert [list(n.output) for n in ours.graph.node] == [list(n.output) for n in ref.graph.node]
    assert [i.name for i in ours.graph.input] == [i.name for i in ref.graph.input]
    assert [o.name for o in ours.graph.output] == [o.name for o in ref.graph.output]
    assert sorted(t.name for t in ours.graph.initializer) == sorted(t.name for t in ref.graph.initializer)
    shapes = {t.name: tuple(t.dims) for t in ref.graph.initializer}
    assert {t.name: tuple(t.dims) for t in ours.graph.initializer} == shapes
    gqa = [n for n in ours.graph.node if n.op_type == "GroupQueryAttention"]
    ref_gqa = [n for n in ref.graph.node if n.op_type == "GroupQueryAttention"]
    assert len(gqa) == len(ref_gqa) == SMALL.layers
    for a, r in zip(gqa, ref_gqa):
        assert {x.name: onnx.helper.get_attribute_value(x) for x in a.attribute} == \
            {x.name: onnx.helper.get_attribute_value(x) for x in r.attribute}


@pytest.mark.parametrize("hidden, heads, kv_heads, layers", [(64, 4, 2, 4), (256, 8, 2, 2), (160, 2, 1, 3)])
def test_genai_decoder_per_layer_histogram_matches_the_export(shared_models, hidden, heads, kv_heads, layers):
    ref = _per_layer_histogram(_export(shared_models))
    cfg = zoo.DecoderConfig(layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, vocab=300, max_positions=64)
    ours = _per_layer_histogram(zoo.genai_decoder_proto(cfg))
    assert ours["-"] == ref["-"]
    for i in range(layers):  # layer 0 starts with SimplifiedLayerNormalization, later ones with the skip norm
        assert ours[str(i)] == ref[str(min(i, 1))], i
    assert ours[str(layers)] == ref["4"]  # the final norm's scope


@pytest.mark.parametrize("batch, seq, past", [(1, 5, 0), (2, 1, 7), (1, 3, 4)])
def test_genai_decoder_runs_under_onnxruntime_with_kv_growth(batch, seq, past):
    ort = pytest.importorskip("onnxruntime")
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(zoo.genai_decoder_proto(SMALL).SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    feeds = zoo.genai_decoder_inputs(SMALL, batch, seq, past)
    out = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    assert out["logits"].shape == (batch, seq, SMALL.vocab)
    assert np.isfinite(out["logits"]).all()
    for i in range(SMALL.layers):
        key = out[f"present.{i}.key"]
        assert key.shape == (batch, SMALL.kv_heads, past + seq, SMALL.head_dim)
        np.testing.assert_array_equal(key[:, :, :past], feeds[f"past_key_values.{i}.key"])


def test_genai_decoder_refuses_a_config_it_cannot_lay_out():
    with pytest.raises(ValueError, match="norm='layernorm'"):
        zoo.genai_decoder_proto(zoo.DecoderConfig(norm="layernorm"))
