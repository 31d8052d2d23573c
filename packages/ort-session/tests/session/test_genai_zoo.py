"""The genai-layout zoo decoder (`ort_graph.zoo.genai_decoder_proto`) through an InferenceSession vs onnxruntime:
a prefill, then decode steps feeding the presents back, with its contrib ops on ort-cpu-ep's C kernels where
they are built."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from ort_graph import zoo
from ort_session import InferenceSession

ort = pytest.importorskip("onnxruntime")

CONFIGS = {
    "h64": zoo.DecoderConfig(layers=2, hidden=64, heads=4, kv_heads=2, vocab=256, intermediate=128, max_positions=64),
    "h160_odd": zoo.DecoderConfig(layers=2, hidden=160, heads=2, kv_heads=1, vocab=300, intermediate=96, max_positions=64),
}


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("batch", [1, 2])
def test_genai_zoo_decoder_matches_onnxruntime_over_prefill_and_decode(name, batch):
    cfg = CONFIGS[name]
    model = zoo.genai_decoder_proto(cfg).SerializeToString()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = InferenceSession(model, providers=["CPUExecutionProvider"])
    so = ort.SessionOptions()
    so.log_severity_level = 3
    ref = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    names = [o.name for o in ref.get_outputs()]
    feeds = zoo.genai_decoder_inputs(cfg, batch, 5, 0)
    for step in range(3):
        got = dict(zip(names, ours.run(None, feeds)))
        want = dict(zip(names, ref.run(None, feeds)))
        for n in names:
            np.testing.assert_allclose(got[n], want[n], rtol=1e-4, atol=1e-5, err_msg=f"step {step}: {n}")
        total = feeds["attention_mask"].shape[1] + 1
        feeds = {"input_ids": np.argmax(want["logits"][:, -1:], axis=-1).astype(np.int64),
                 "attention_mask": np.ones((batch, total), np.int64)}
        feeds |= {n.replace("present", "past_key_values"): want[n] for n in names if n.startswith("present")}


def test_genai_zoo_decoder_runs_its_contrib_ops_on_c_kernels():
    from ort_cpu_ep import c_kernels

    if c_kernels.c_registry() is None:
        pytest.skip(f"ort-cpu-ep's C kernels are not built here: {c_kernels.status().reason}")
    import ort_graph
    from ort_cpu_ep import CpuExecutionProvider

    m = ort_graph.from_proto(zoo.genai_decoder_proto(CONFIGS["h64"]))
    ep = CpuExecutionProvider(m.graph, m.opset_imports)
    langs = {n.op_type: c_kernels.kernel_language(ep.entry(n)) for n in m.graph.nodes
             if n.op_type in ("GroupQueryAttention", "SkipSimplifiedLayerNormalization", "SimplifiedLayerNormalization")}
    assert langs == dict.fromkeys(("GroupQueryAttention", "SkipSimplifiedLayerNormalization",
                                   "SimplifiedLayerNormalization"), "C")


@pytest.mark.parametrize("bits", [4, 8])
def test_genai_tied_int_embedding_decoder_plans_statically_and_matches_onnxruntime(bits):
    """The builder's tied embedding (GatherBlockQuantized over the lm_head's MatMulNBits table): every value
    resolves, the buffers pre-allocate, and prefill + decode equal onnxruntime's."""
    cfg = CONFIGS["h64"]
    model = zoo.genai_tied_decoder_proto(cfg, bits=bits, block_size=32).SerializeToString()
    with warnings.catch_warnings():
        warnings.simplefilter("error", category=UserWarning)  # no ShapeResolutionWarning
        warnings.filterwarnings("ignore", message=".*(CUDA|cuda).*")
        ours = InferenceSession(model, {"session.pre_allocate_execution_buffers": "1",
                                        "free_dimension_overrides": {"batch": 1, "sequence": 4,
                                                                     "total_sequence_length": 4, "past_sequence": 0}},
                                providers=["CPUExecutionProvider"])
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    names = [o.name for o in ref.get_outputs()]
    feeds = zoo.genai_decoder_inputs(cfg, 1, 4, 0)
    got = dict(zip(names, ours.run(None, feeds)))
    want = dict(zip(names, ref.run(None, feeds)))
    for n in names:
        np.testing.assert_allclose(got[n], want[n], rtol=1e-4, atol=1e-4, err_msg=n)
    emb = next(n for n in ours.model.graph.nodes if n.op_type == "GatherBlockQuantized")
    assert ours.model.graph.values[emb.outputs[0]].shape == (1, 4, cfg.hidden)


def test_ortrun_generate_runs_the_tied_int4_decoder(tmp_path):
    from ort_session.cli import main

    path = tmp_path / "model.onnx"
    path.write_bytes(zoo.genai_tied_decoder_proto(CONFIGS["h64"], bits=4).SerializeToString())
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rc = main(["generate", str(path), "-p", "hi", "-n", "3"])
    assert rc == 0, err.getvalue()
    assert "first whose output shapes could not be resolved" not in err.getvalue()
    assert out.getvalue().startswith("hi") and len(out.getvalue().strip()) > 2
