"""`ortrun` end to end: exit codes, the stable JSON layout, checks against onnxruntime, generation."""

import json

import numpy as np
import pytest

from ort_graph import zoo
from ort_session.cli import main

CFG = zoo.DecoderConfig(layers=2)


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return str(zoo.write_decoder(tmp_path_factory.mktemp("m") / "decoder.onnx", CFG))


def test_plan_json_layout_is_stable(model_path, capsys):
    rc = main(["plan", model_path, "--budget", "gpu:300KiB", "--providers", "SimulatedGPUExecutionProvider",
               "--dim", "batch=1", "--dim", "sequence=16", "--dim", "past_sequence=0", "--json"])
    assert rc == 0
    d = json.loads(capsys.readouterr().out)
    assert set(d) == {"model", "placement_mode", "granularity", "nodes", "devices", "copies", "layers", "declines",
                      "recheck", "shapes"}
    assert d["copies"]["count"] == d["copies"]["to_device"]["count"] + d["copies"]["to_host"]["count"] > 0
    assert d["placement_mode"] == "auto-fit" and d["granularity"] == "layers"
    assert set(d["nodes"][0]) == {"name", "op", "layer", "ep", "reason"}
    dev = d["devices"]["simgpu"]
    assert set(dev) == {"ep", "weights", "peak_activations", "workspace", "lower_bound", "total", "budget",
                        "workspace_layout"}
    assert dev["workspace_layout"] in ("packed", "separate")
    assert 0 < dev["total"] <= dev["budget"] == 300 * 1024
    assert set(d["recheck"]) == {"ok", "planned_overruns", "cost_sum_overruns"}


def test_run_check_passes_against_onnxruntime(model_path, capsys):
    assert main(["run", model_path, "--check", "--dim", "past_sequence=3"]) == 0
    assert "check PASSED" in capsys.readouterr().out


def test_run_on_a_budgeted_device_reports_its_measured_peak(model_path, capsys):
    assert main(["run", model_path, "--budget", "gpu:300KiB", "--providers", "SimulatedGPUExecutionProvider",
                 "--dim", "batch=1", "--dim", "sequence=16", "--dim", "past_sequence=0", "--check"]) == 0
    out = capsys.readouterr().out
    line = next(s for s in out.splitlines() if s.strip().startswith("simgpu memory: peak"))
    assert line.endswith("of capacity 300.0 KiB") and "check PASSED" in out


def test_run_with_input_files(model_path, tmp_path, capsys):
    ids = tmp_path / "ids.npy"
    np.save(ids, np.array([[1, 2, 3]], np.int64))
    assert main(["run", model_path, "--input", f"input_ids={ids}", "--dim", "past_sequence=0", "--check"]) == 0
    assert "[1, 3, 256]" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["plan", "/nonexistent/model.onnx"], "does not exist"),
    (["plan", "--layers", "cuda(layers.[0-15]"], "missing ')'"),
])
def test_errors_exit_2_with_a_clear_message(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["plan", "--budget", "gpu:12parsecs"], "argument --budget: budget for 'gpu' in 'gpu:12parsecs': unknown unit"),
    (["plan", "--device-profile", "v100"], "argument --device-profile: unknown device profile 'v100'; known profiles: a100"),
    (["plan", "--dim", "batch"], "argument --dim: 'batch' must look like name=INTEGER"),
    (["run", "--option", "pre_allocate"], "argument --option: 'pre_allocate' must look like key=value"),
    (["generate", "-n", "0"], "argument -n/--n-predict/--max-new-tokens: '0' is not a positive integer"),
    (["plan", "--plot", "plan.jpeg"], "argument --plot: 'plan.jpeg' must end in .png, .svg or .pdf"),
    (["plan", "--gpu-layers", "2", "--layers", "cuda(layers.0)"], "not allowed with argument"),
])
def test_bad_arguments_are_the_parsers_errors_at_parse_time(argv, message, capsys):
    """Checked when the arguments are parsed (usage and exit 2), before any model is loaded."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and err.startswith("usage: ortrun")


def test_generate_streams_tokens_with_zero_allocations(model_path, capsys):
    assert main(["generate", model_path, "--prompt", "hello", "--max-new-tokens", "4"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("hello")
    assert "4 tokens" in captured.err and "0 runtime allocations" in captured.err


def test_kernels_lists_every_ep_and_workspace_support(capsys):
    assert main(["kernels"]) == 0
    out = capsys.readouterr().out
    assert "CPUExecutionProvider" in out and "GroupQueryAttention" in out and "declares" in out


def test_kernels_says_which_kernels_are_c_and_whether_the_c_library_is_in_use(capsys, monkeypatch):
    from ort_cpu_ep import c_kernels

    if c_kernels.c_registry() is None:
        pytest.skip(f"ort-cpu-ep's C kernels are not built here: {c_kernels.status().reason}")
    assert main(["kernels"]) == 0
    lines = capsys.readouterr().out.splitlines()
    nbits = [ln.split() for ln in lines if ln.startswith("CPUExecutionProvider") and "::MatMulNBits " in ln]
    assert sorted(row[3] for row in nbits) == ["C", "numpy"]  # the C kernel, and the numpy one it falls back to
    for op in ("com.microsoft::GroupQueryAttention", "com.microsoft::SkipSimplifiedLayerNormalization",
               "SimplifiedLayerNormalization", "com.microsoft::QuickGelu"):
        rows = [ln.split() for ln in lines if ln.startswith("CPUExecutionProvider") and ln.split()[1] == op]
        assert sorted(row[3] for row in rows) == ["C", "numpy"], op
    assert lines[-1].startswith("ort-cpu-ep C kernels: loaded from")
    monkeypatch.setenv(c_kernels.DISABLE_ENV, "1")
    c_kernels._load.cache_clear()
    try:
        assert main(["kernels"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert "C kernels: NOT in use (disabled by ORT_CPU_EP_NO_C_KERNELS)" in lines[-1]
        assert not any(ln.split()[3] == "C" for ln in lines if ln.startswith("CPUExecutionProvider "))
    finally:
        monkeypatch.delenv(c_kernels.DISABLE_ENV)
        c_kernels._load.cache_clear()


def test_run_check_says_when_onnxruntime_cannot_run_the_model(tmp_path, capsys):
    import onnx
    from onnx import TensorProto
    from onnx import helper as h

    # bfloat16 MatMul: ours runs it, onnxruntime's CPU provider has no kernel for it
    g = h.make_graph([h.make_node("MatMul", ["a", "b"], ["y"])], "g",
                     [h.make_tensor_value_info("a", TensorProto.BFLOAT16, [2, 3]),
                      h.make_tensor_value_info("b", TensorProto.BFLOAT16, [3, 2])],
                     [h.make_tensor_value_info("y", TensorProto.BFLOAT16, [2, 2])])
    path = tmp_path / "bf16.onnx"
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), path)
    assert main(["run", str(path), "--check"]) == 2
    captured = capsys.readouterr()
    assert "output y" in captured.out  # our run finished and printed its output before the check
    assert "--check: onnxruntime" in captured.err and "cannot run this model" in captured.err
    assert "MatMul" in captured.err and "Traceback" not in captured.err
