"""Real exports through the whole session (fixtures in ../shared/models; skipped where absent)."""

import warnings

import numpy as np

import ort_graph
from ort_session import InferenceSession, generate_inputs

DIMS = {"batch_size": 1, "sequence_length": 8, "past_sequence_length": 0, "total_sequence_length": 8}


def _session(path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return InferenceSession(str(path), {"free_dimension_overrides": DIMS})


def test_bf16_genai_export_runs_on_cpu_close_to_the_fp32_export(shared_models):
    """onnxruntime's CPU provider cannot run this export (no bf16 MatMul); ours computes bf16 norms and
    attention in float32 and must agree with the fp32 export of the same weights to bf16 precision."""
    s32 = _session(shared_models / "llama_l4" / "genai_fp32_cpu" / "model.onnx")
    s16 = _session(shared_models / "llama_l4" / "genai_bf16_cuda" / "model.onnx")
    feeds = generate_inputs(s32.model.graph, DIMS)
    feeds16 = {k: v.astype(ort_graph.to_numpy_dtype(s16.model.graph.values[k].dtype)) for k, v in feeds.items()}
    ref = s32.run(["logits"], feeds)[0]
    got = s16.run(["logits"], feeds16)[0].astype(np.float32)
    assert np.abs(got - ref).max() < 2e-2 * np.abs(ref).max()
    assert (got.argmax(-1) == ref.argmax(-1)).all()
