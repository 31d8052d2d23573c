"""A whole genai-builder export (GroupQueryAttention, MatMulNBits) through InferenceSession with
pre-allocated buffers: declared workspace served from the memory plan, outputs as onnxruntime's."""

from __future__ import annotations

import numpy as np
import pytest

import ort_graph

ort = pytest.importorskip("onnxruntime")

# (directory, KV/logits dtype, tolerance)
VARIANTS = {
    "fp32": ("genai_fp32_cpu", np.float32, 1e-5),
    "int4": ("genai_int4_cpu", np.float32, 1e-5),
}


@pytest.mark.parametrize("variant", ["fp32", "int4"])
def test_genai_export_preallocated_session_serves_gqa_workspace_from_plan(shared_models, genai_feeds, variant):
    """Through InferenceSession with pre-allocated buffers: every GroupQueryAttention (scores) and MatMulNBits
    (dequantized weight band) node gets its declared workspace from the memory plan, the run allocates nothing,
    and the outputs match onnxruntime."""
    import warnings

    from ort_session import PRE_ALLOCATE, InferenceSession, SessionOptions

    folder, kv_dtype, tol = VARIANTS[variant]
    path = shared_models / "llama_l4" / folder / "model.onnx"
    if not path.exists():
        pytest.skip(f"{path} not present")
    opts = SessionOptions()
    opts.add_session_config_entry(PRE_ALLOCATE, "1")
    opts.free_dimension_overrides = {"batch_size": 1, "sequence_length": 8, "past_sequence_length": 0,
                                     "total_sequence_length": 8, "kv_cache_dim": 16}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = InferenceSession(str(path), opts)
    feeds = genai_feeds(np.array([[1, 5, 9, 33, 100, 7, 42, 250]], np.int64), 8, None, kv_dtype)
    got = sess.run(None, feeds)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    ref = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, feeds)
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g, r, rtol=tol, atol=tol)
    stats = sess.last_run_stats
    graph = ort_graph.load(path).graph
    nodes = graph.nodes
    from ort_cpu_ep import c_kernels

    c = c_kernels.c_registry() is not None
    # the C MatMul (weights [K, N]) packs A and B in one declared buffer (8 rows: more than it streams unpacked)
    c_matmuls = [n for n in nodes if c and n.op_type == "MatMul" and n.inputs[1] in graph.initializers
                 and len(graph.initializers[n.inputs[1]].dims) == 2]
    declaring = [n for n in nodes if n.op_type in ("GroupQueryAttention", "MatMulNBits")] + c_matmuls
    assert len(declaring) == (4 + len(c_matmuls) if variant == "fp32" else 25)
    # slots each node takes from the plan: the numpy GQA its scores, mask, rotated Q and K and their product, the
    # cos/sin rows at the positions, the softmax row statistics and flags (the C GQA one per-thread buffer); MatMulNBits its dequantized band and, at accuracy_level 4, A quantized; the
    # numpy float32 norms their row statistics (the C norms none)
    per_node = {"GroupQueryAttention": 1 if c else 7, "MatMulNBits": 2 if variant != "fp32" else 1,
                "SimplifiedLayerNormalization": 0 if c else 1, "SkipSimplifiedLayerNormalization": 0 if c else 1}
    assert sum(n.op_type in per_node for n in nodes) + len(c_matmuls) == len(declaring) + 9  # + the 9 norms
    # plus one chunk slot per numpy QuickGelu the CPU provider's SiLUFusion made of the MLPs' x * sigmoid(x)
    silu = [f for f in sess.fusions if f.fusion == "SiLUFusion"]
    assert len(silu) == 4
    # the C MatMuls still declare their packing block, but their constant B was packed at initialization (its bytes
    # are weights of the plan): they take no slot at run time
    assert (sess.memory.prepacked.get("cpu", 0) > 0) == bool(c_matmuls)
    slots = sum(per_node.get(n.op_type, 0) for n in nodes) + (0 if c else len(silu))  # C QuickGelu: none
    assert stats.workspace_from_plan == slots and stats.scratch_fallbacks == 0 and stats.allocations == 0
