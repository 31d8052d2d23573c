"""`ortrun run` and `ortrun generate` plan the shapes they feed: under a small simulated-GPU budget and
without `--dim`, the run succeeds and the device's measured peak stays within the budget."""

import numpy as np
import pytest

from ort_graph import zoo
from ort_session import InferenceSession, _session, cli

SIM = "SimulatedGPUExecutionProvider"
BUDGET = 150 * 1024
EXPORTS = ["genai_fp32_cpu/model.onnx", "genai_int4_cpu/model.onnx", "genai_int8_cpu/model.onnx",
           "genai_fp16_cuda/model.onnx", "genai_bf16_cuda/model.onnx", "genai_int4_cuda/model.onnx",
           "torch/torchscript_static.onnx", "torch/torchscript_dynamic.onnx", "torch/torchscript_kv_dynamic.onnx",
           "torch/dynamo_static.onnx", "torch/dynamo_dynamic.onnx", "torch/dynamo_kv_dynamic.onnx"]


class _Recording(InferenceSession):
    """Keeps each session and its device usage as measured by the allocator (read before close frees it)."""

    made: list = []

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        _Recording.made.append(self)
        self.usage_at_close = None

    def close(self):
        self.usage_at_close = self.device_memory()
        super().close()


@pytest.fixture
def recorded(monkeypatch):
    _Recording.made = []
    monkeypatch.setattr(_session, "InferenceSession", _Recording)  # what the commands import when they run
    return _Recording.made


def _simgpu(sess):
    return (sess.usage_at_close or sess.device_memory())["simgpu"]


@pytest.fixture(scope="module")
def decoder_path(tmp_path_factory):
    """Symbolic batch, sequence and past_sequence: `ortrun run` has to choose them."""
    return str(zoo.write_decoder(tmp_path_factory.mktemp("m") / "decoder.onnx", zoo.DecoderConfig(layers=4)))


def test_run_with_generated_inputs_plans_them_and_stays_within_the_budget(decoder_path, recorded, capsys):
    assert cli.main(["run", decoder_path, "--budget", "gpu:120KiB", "--providers", SIM, "--check"]) == 0, \
        capsys.readouterr().err
    (sess,) = recorded
    use = _simgpu(sess)
    assert use["weights"] > 0 and use["peak"] <= use["capacity"] == 120 * 1024
    assert not sess.memory.gplan.activations.unknown_sizes  # every activation of the fed shapes is planned
    assert "check PASSED" in capsys.readouterr().out


def test_run_plans_the_shapes_of_input_files(decoder_path, recorded, tmp_path, capsys):
    ids = tmp_path / "ids.npy"
    np.save(ids, np.arange(24, dtype=np.int64).reshape(1, 24) % 200)
    assert cli.main(["run", decoder_path, "--budget", "gpu:120KiB", "--providers", SIM,
                     "--input", f"input_ids={ids}"]) == 0, capsys.readouterr().err
    (sess,) = recorded
    assert sess.options.free_dimension_overrides["sequence"] == 24
    assert "[1, 24, " in capsys.readouterr().out
    use = _simgpu(sess)
    assert use["peak"] <= use["capacity"]


def test_generate_with_dims_plans_prefill_and_every_decode_step(decoder_path, recorded, capsys):
    assert cli.main(["generate", decoder_path, "--budget", "gpu:120KiB", "--providers", SIM, "--prompt", "hello",
                     "--max-new-tokens", "6", "--dim", "batch=1"]) == 0, capsys.readouterr().err
    (sess,) = recorded
    assert sess.options.max_shapes["input_ids"] == [1, 5]  # the prompt's 5 byte tokens
    use = _simgpu(sess)
    assert use["weights"] > 0 and use["peak"] <= use["capacity"]
    err = capsys.readouterr().err
    assert "6 tokens" in err and "0 runtime allocations in total (pre-allocated)" in err


@pytest.mark.parametrize("export", EXPORTS)
def test_run_every_real_export_under_a_small_budget(shared_models, export, recorded, capsys):
    path = shared_models / "llama_l4" / export
    if not path.exists():
        pytest.skip(f"{path} is not present")
    rc = cli.main(["run", str(path), "--budget", f"gpu:{BUDGET}", "--providers", SIM])
    assert rc == 0, capsys.readouterr().err
    (sess,) = recorded
    use = _simgpu(sess)
    assert use["weights"] > 0 and use["peak"] <= use["capacity"] == BUDGET


def test_generate_on_a_real_export_with_dims_stays_within_the_budget(shared_models, recorded, capsys):
    path = shared_models / "llama_l4" / "genai_int4_cpu" / "model.onnx"
    if not path.exists():
        pytest.skip(f"{path} is not present")
    assert cli.main(["generate", str(path), "--budget", f"gpu:{BUDGET}", "--providers", SIM, "--prompt", "hello there",
                     "--max-new-tokens", "6", "--dim", "batch_size=1"]) == 0, capsys.readouterr().err
    (sess,) = recorded
    use = _simgpu(sess)
    assert use["weights"] > 0 and use["peak"] <= use["capacity"] == BUDGET
