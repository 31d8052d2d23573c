"""The real onnxruntime-genai exports through InferenceSession with every GroupQueryAttention node on the
CUDA EP, on a recording driver whose gqa.cu launches are executed by ort_cuda_ep.testing.emulate_gqa
(other launches are only recorded, so only GQA goes to the device here): real cubins loaded, the
session's copies and pre-allocated arena, total_sequence_length kept on the host, the planned
workspace. Logits and present KV of a prefill and of the decode steps that follow (batch 1, and a
ragged batch of 2) match onnxruntime's CPU run of the whole model."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from ort_graph import load
from ort_session import InferenceSession

ort_cuda_ep = pytest.importorskip("ort_cuda_ep", reason="ort-cuda-ep is not installed")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the reference")
from ort_cuda_ep import gqa_recipe  # noqa: E402
from ort_cuda_ep.testing import RecordingDriver, emulate_gqa, install_driver  # noqa: E402

CUDA = "CUDAExecutionProvider"
LAYERS, KV_HEADS, HEAD = 4, 2, 16


class EmulatingDriver(RecordingDriver):
    """RecordingDriver whose gqa.cu launches run, in numpy, on the recorded arguments."""

    def __init__(self):
        super().__init__()
        self.emulated: list[str] = []

    def cuLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, shmem, stream, params, extra):
        result = super().cuLaunchKernel(fn, gx, gy, gz, bx, by, bz, shmem, stream, params, extra)
        if fn[1].startswith("gqa_"):
            emulate_gqa(fn[1], list(params[0]), self.array_at)
            self.emulated.append(fn[1])
        return result


@pytest.fixture
def driver(monkeypatch):
    return install_driver(monkeypatch, EmulatingDriver())


def _session(path, batch, seq, past):
    dims = {"batch_size": batch, "sequence_length": seq, "total_sequence_length": past + seq,
            "past_sequence_length": past, "kv_cache_dim": HEAD}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return InferenceSession(load(path), {
            "free_dimension_overrides": dims, "budgets": "cuda:64MiB",
            "session.name_based_layer_assignment": "cuda(GroupQueryAttention)",
            "session.pre_allocate_execution_buffers": "1"}, providers=[CUDA, "CPUExecutionProvider"])


def _feeds(ids, mask, past, dtype):
    feeds = {"input_ids": np.asarray(ids, np.int64), "attention_mask": np.asarray(mask, np.int64)}
    for i in range(LAYERS):
        for kind in ("key", "value"):
            feeds[f"past_key_values.{i}.{kind}"] = past[f"present.{i}.{kind}"] if past else np.zeros(
                (len(ids), KV_HEADS, 0, HEAD), dtype)
    return feeds


def _step(path, reference, driver, ids, mask, past, dtype, tol):
    batch, seq = np.asarray(ids).shape
    p = 0 if past is None else past["present.0.key"].shape[2]
    sess = _session(path, batch, seq, p)
    gqa = [n for n in sess.model.graph.nodes if n.op_type == "GroupQueryAttention"]
    assert len(gqa) == LAYERS and all(n.ep == CUDA for n in gqa)
    feeds = _feeds(ids, mask, past, dtype)
    driver.emulated.clear()
    driver.calls.clear()
    outs = sess.run(None, feeds)
    got = dict(zip(sess.model.graph.outputs, outs))
    ref = reference.run(None, feeds)
    ref_names = [o.name for o in reference.get_outputs()]
    assert set(got) == set(ref_names)
    assert sess.last_run_stats.allocations == 0  # values and workspace in the pre-allocated arena
    assert len(driver.emulated) >= 2 * LAYERS
    total_len = np.asarray(mask, np.int64).sum(axis=1)
    for name, want in zip(ref_names, ref):
        ours = got[name]
        assert ours.shape == want.shape and ours.dtype == want.dtype, name
        if name.startswith("present"):
            for b, n in enumerate(total_len):
                np.testing.assert_allclose(ours[b, :, :n].astype(np.float32), want[b, :, :n].astype(np.float32),
                                           rtol=tol, atol=tol, err_msg=name)
                assert not ours[b, :, n:].any()  # rows past a batch entry's length are zero
        else:
            np.testing.assert_allclose(ours.astype(np.float32), want.astype(np.float32), rtol=tol, atol=tol,
                                       err_msg=name)
    # total_sequence_length (Shape -> Gather -> Cast on the CPU EP) is a host input: never copied to the
    # device; seqlens_k (ReduceSum -> Sub -> Cast) is a device input: copied once
    copies = [n for n in sess.order if n.op_type == "MemcpyFromHost"]
    assert not any("Gather/Cast" in n.inputs[0] for n in copies)
    assert any("Sub/Cast" in n.inputs[0] for n in copies)
    sess.close()
    return got


@pytest.mark.parametrize("variant,dtype,tol", [("genai_fp32_cpu", np.float32, 1e-5),
                                               ("genai_fp16_cuda", np.float16, 2e-3)])
def test_prefill_then_decode_matches_onnxruntime(shared_models, driver, variant, dtype, tol):
    path = str(shared_models / "llama_l4" / variant / "model.onnx")
    reference = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    prompt = [[1, 5, 9, 33, 100, 7, 81, 12]]
    past = _step(path, reference, driver, prompt, np.ones((1, 8)), None, dtype, tol)
    ids = [[int(np.argmax(past["logits"][0, -1]))]]
    for step in range(2):
        past = _step(path, reference, driver, ids, np.ones((1, 9 + step)), past, dtype, tol)
        ids = [[int(np.argmax(past["logits"][0, -1]))]]


def test_ragged_batch_decode_matches_onnxruntime(shared_models, driver):
    """Entry 1 has 5 of the 8 cached tokens: its new token goes to present row 5 and sees 6 keys."""
    path = str(shared_models / "llama_l4" / "genai_fp32_cpu" / "model.onnx")
    reference = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(3)
    past = {f"present.{i}.{k}": rng.standard_normal((2, KV_HEADS, 8, HEAD)).astype(np.float32)
            for i in range(LAYERS) for k in ("key", "value")}
    mask = np.array([[1] * 9, [1] * 6 + [0] * 3])
    _step(path, reference, driver, [[17], [42]], mask, past, np.float32, 1e-5)


def test_the_gqa_workspace_is_declared_planned_and_used(shared_models, driver):
    """Level-2 slots of the session == the recipe == what each GQA kernel got from the plan at run time."""
    path = str(shared_models / "llama_l4" / "genai_fp32_cpu" / "model.onnx")
    rng = np.random.default_rng(4)
    past = {f"present.{i}.{k}": rng.standard_normal((2, KV_HEADS, 100, HEAD)).astype(np.float32)
            for i in range(LAYERS) for k in ("key", "value")}
    sess = _session(path, 2, 1, 100)
    want = gqa_recipe(2, 1, 100, 4, HEAD, 108, KV_HEADS).total_bytes
    gqa = [n for n in sess.model.graph.nodes if n.op_type == "GroupQueryAttention"]
    assert [sess.memory.slots[(n.index, 0)] for n in gqa] == [want] * LAYERS
    sess.run(None, _feeds([[3], [4]], np.ones((2, 101)), past, np.float32))
    counters = sess.providers[0].inner.runtime.counters
    assert [counters.last[n.name] for n in gqa] == [("planned", want)] * LAYERS
    sess.close()
    assert driver.memory == {}


def test_positions_past_the_rotary_caches_fail_as_in_onnxruntime(shared_models, driver):
    """The export's cos/sin caches cover 128 positions; a longer total length is refused with the reason."""
    path = str(shared_models / "llama_l4" / "genai_fp32_cpu" / "model.onnx")
    past = {f"present.{i}.{k}": np.zeros((1, KV_HEADS, 200, HEAD), np.float32)
            for i in range(LAYERS) for k in ("key", "value")}
    sess = _session(path, 1, 1, 200)
    with pytest.raises(Exception, match="cos_cache/sin_cache have 128 rows but total_sequence_length is 201"):
        sess.run(None, _feeds([[3]], np.ones((1, 201)), past, np.float32))
    with pytest.raises(Exception, match="cos_cache dimension 0 shall not be less than total_sequence_length"):
        ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
            None, _feeds([[3]], np.ones((1, 201)), past, np.float32))
    sess.close()
