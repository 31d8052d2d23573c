"""The shared onnxruntime-genai export (ORT_SHARED_MODELS) served batched answers what onnxruntime-genai answers."""

from __future__ import annotations

import numpy as np


def test_shared_genai_export_matches_onnxruntime_genai(kit, shared_models):
    """MODELS.md: onnxruntime-genai's greedy tokens after [1, 5, 9, 33, 100] begin 146, 248, 149, 253, 112."""
    engine = kit.build_engine(shared_models / "llama_l4" / "genai_fp32_cpu", max_batch=4)
    engine.scheduler.start()
    try:
        out = kit.run_all(engine, [[1, 5, 9, 33, 100], [1, 7], [1, 9, 9]], [11, 6, 6])
    finally:
        engine.close()
    assert engine.runner.mode == "batched"
    assert out[0] == [146, 248, 149, 253, 112, 248, 248, 248, 248, 248, 248]
    assert np.all(np.asarray(out[1]) < kit.VOCAB)
