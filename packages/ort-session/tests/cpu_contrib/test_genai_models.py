"""Whole genai-builder exports (fp32 / int8 / int4 CPU: GroupQueryAttention, MatMulNBits,
Skip/SimplifiedLayerNormalization) run node by node on the CPU op table vs onnxruntime: prefill + one decode."""

from __future__ import annotations

import numpy as np
import pytest

import ort_graph

ort = pytest.importorskip("onnxruntime")

LAYERS, KV_HEADS, HEAD = 4, 2, 16


def _feeds(ids: np.ndarray, total: int, past: dict[str, np.ndarray] | None) -> dict[str, np.ndarray]:
    feeds = {"input_ids": ids, "attention_mask": np.ones((1, total), np.int64)}
    for i in range(LAYERS):
        for kind in ("key", "value"):
            name = f"past_key_values.{i}.{kind}"
            feeds[name] = past[f"present.{i}.{kind}"] if past else np.zeros((1, KV_HEADS, 0, HEAD), np.float32)
    return feeds


@pytest.mark.parametrize("variant", ["fp32", "int8", "int4"])
def test_genai_export_prefill_and_decode_match_onnxruntime(kit, shared_models, variant):
    path = shared_models / "llama_l4" / f"genai_{variant}_cpu" / "model.onnx"
    if not path.exists():
        pytest.skip(f"{path} not present")
    model = ort_graph.load(path)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]

    prompt = np.array([[1, 5, 9, 33, 100, 7, 42, 250]], np.int64)
    ours_out, ran = kit.run_model(model, _feeds(prompt, 8, None))
    ref_out = dict(zip(names, sess.run(None, _feeds(prompt, 8, None))))
    contrib = [n for n in model.graph.nodes if n.domain == "com.microsoft" or n.op_type == "SimplifiedLayerNormalization"]
    assert contrib and all(ran[n.name] == "cpu" for n in contrib)
    for name in names:
        assert ours_out[name].shape == ref_out[name].shape, name
        np.testing.assert_allclose(ours_out[name], ref_out[name], rtol=1e-5, atol=1e-5, err_msg=f"prefill {name}")
    assert ours_out["logits"].shape == (1, 8, 256) and ours_out["present.0.key"].shape == (1, 2, 8, 16)

    nxt = np.array([[int(ref_out["logits"][0, -1].argmax())]], np.int64)
    ours_dec, _ = kit.run_model(model, _feeds(nxt, 9, ours_out))
    ref_dec = dict(zip(names, sess.run(None, _feeds(nxt, 9, ref_out))))
    for name in names:
        assert ours_dec[name].shape == ref_dec[name].shape, name
        np.testing.assert_allclose(ours_dec[name], ref_dec[name], rtol=1e-5, atol=1e-5, err_msg=f"decode {name}")
    assert ours_dec["logits"].shape == (1, 1, 256) and ours_dec["present.3.value"].shape == (1, 2, 9, 16)
    print(f"{variant}: prefill max |dlogits| {np.abs(ours_out['logits'] - ref_out['logits']).max():.2e}, "
          f"decode {np.abs(ours_dec['logits'] - ref_dec['logits']).max():.2e}; "
          f"{sum(v == 'reference' for v in ran.values())} standard nodes via onnx.reference fallback")
