"""Whole genai-builder exports (fp32 / int8 / int4 CPU: GroupQueryAttention, MatMulNBits,
Skip/SimplifiedLayerNormalization) run node by node on the CPU op table vs onnxruntime: prefill + one decode."""

from __future__ import annotations

import numpy as np
import pytest

import ort_graph

ort = pytest.importorskip("onnxruntime")

# (directory, KV/logits dtype, tolerance): CPU exports match to float32 rounding; the float16 CUDA exports run
# on onnxruntime's CPU EP too and match to float16 rounding.
VARIANTS = {
    "fp32": ("genai_fp32_cpu", np.float32, 1e-5),
    "int8": ("genai_int8_cpu", np.float32, 1e-5),
    "int4": ("genai_int4_cpu", np.float32, 1e-5),
    "fp16_cuda": ("genai_fp16_cuda", np.float16, 5e-3),
    "int4_cuda": ("genai_int4_cuda", np.float16, 5e-3),
}


def _maxdiff(a: dict, b: dict) -> float:
    return float(np.abs(a["logits"].astype(np.float64) - b["logits"].astype(np.float64)).max())


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_genai_export_prefill_and_decode_match_onnxruntime(kit, shared_models, genai_feeds, variant):
    folder, kv_dtype, tol = VARIANTS[variant]
    path = shared_models / "llama_l4" / folder / "model.onnx"
    if not path.exists():
        pytest.skip(f"{path} not present")
    model = ort_graph.load(path)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]

    prompt = np.array([[1, 5, 9, 33, 100, 7, 42, 250]], np.int64)
    ours_out, ran = kit.run_model(model, genai_feeds(prompt, 8, None, kv_dtype))
    ref_out = dict(zip(names, sess.run(None, genai_feeds(prompt, 8, None, kv_dtype))))
    contrib = [n for n in model.graph.nodes if n.domain == "com.microsoft" or n.op_type == "SimplifiedLayerNormalization"]
    assert contrib and all(ran[n.name] == "cpu" for n in contrib)
    for name in names:
        assert ours_out[name].shape == ref_out[name].shape, name
        np.testing.assert_allclose(ours_out[name].astype(np.float32), ref_out[name].astype(np.float32), rtol=tol, atol=tol, err_msg=f"prefill {name}")
    assert ours_out["logits"].shape == (1, 8, 256) and ours_out["present.0.key"].shape == (1, 2, 8, 16)
    # the package interpreter gives the same result
    interp = kit.cpu.run_graph(model.graph, genai_feeds(prompt, 8, None, kv_dtype), opsets=model.opset_imports)
    for name in names:
        np.testing.assert_allclose(interp[name].astype(np.float32), ref_out[name].astype(np.float32), rtol=tol,
                                   atol=tol, err_msg=f"run_graph prefill {name}")

    nxt = np.array([[int(ref_out["logits"][0, -1].argmax())]], np.int64)
    ours_dec, _ = kit.run_model(model, genai_feeds(nxt, 9, ours_out))
    ref_dec = dict(zip(names, sess.run(None, genai_feeds(nxt, 9, ref_out))))
    for name in names:
        assert ours_dec[name].shape == ref_dec[name].shape, name
        np.testing.assert_allclose(ours_dec[name].astype(np.float32), ref_dec[name].astype(np.float32), rtol=tol, atol=tol, err_msg=f"decode {name}")
    assert ours_dec["logits"].shape == (1, 1, 256) and ours_dec["present.3.value"].shape == (1, 2, 9, 16)
    print(f"{variant}: prefill max |dlogits| {_maxdiff(ours_out, ref_out):.2e}, decode {_maxdiff(ours_dec, ref_dec):.2e}; "
          f"{sum(v == 'reference' for v in ran.values())} standard nodes via onnx.reference fallback")
