"""`ortrun` as llama.cpp / ollama users expect it: a load summary, parse-time validation, --version, lazy
imports, --kernel-library / --option everywhere, -n / -c / --gpu-layers, warnings as lines, grouped declines,
progress that knows its stream, --plot, and device profiles without ort-cuda-ep."""

import io
import json
import subprocess
import sys

import pytest

import ort_partition
from ort_session import InferenceSession, InvalidOptionError, _progress
from ort_session._cli_args import PROFILE_NAMES, build_parser
from ort_session.cli import main

SIM = "SimulatedGPUExecutionProvider"


def test_help_and_the_parser_import_no_model_machinery():
    code = ("import sys; from ort_session._cli_args import build_parser; build_parser().format_help(); "
            "print(sorted(m for m in ('onnx', 'numpy', 'ort_graph', 'ort_partition', 'ort_session._session') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_every_option_has_help_with_an_example():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    missing = []
    for name, sp in sub.choices.items():
        for action in sp._actions:
            if action.dest in ("help",) or not action.option_strings and action.dest != "model":
                continue
            text = action.help or ""
            if action.nargs == 0 or action.const is not None:  # flags need no example
                ok = bool(text)
            else:
                ok = "e.g." in text
            if not ok:
                missing.append(f"{name} {action.option_strings or action.dest}")
    assert not missing, missing


def test_profile_choices_are_ort_partitions_profiles():
    assert PROFILE_NAMES == tuple(ort_partition.profile_names())


def test_version_names_every_package(capsys):
    assert main(["--version"]) == 0
    out = capsys.readouterr().out
    for name in ("ort-graph", "ort-partition", "ort-memplan", "ort-abi", "ort-cuda-ep", "ort-session"):
        assert name in out
    assert "0.2" in out


@pytest.mark.parametrize("command", ["plan", "run", "generate", "kernels", "demo"])
def test_kernel_library_and_option_on_every_subcommand(command):
    args = build_parser().parse_args([command, "--kernel-library", "a.so", "--kernel-library", "b.so",
                                      "--option", "session.pre_allocate_execution_buffers=1", "--option", "x=y"])
    assert args.kernel_library == ["a.so", "b.so"]
    assert args.option == [("session.pre_allocate_execution_buffers", "1"), ("x", "y")]


def test_option_reaches_the_session_and_a_wrong_one_is_an_error(capsys):
    assert main(["run", "--option", "session.pre_allocate_execution_buffers=1"]) == 0
    assert "0 runtime allocations" in capsys.readouterr().out
    assert main(["plan", "--option", "enable_fusoins=0"]) == 2
    assert "unknown session option 'enable_fusoins'" in capsys.readouterr().err


def test_llama_cpp_shortcuts_parse():
    args = build_parser().parse_args(["generate", "-p", "hi", "-n", "7", "-c", "64", "--gpu-layers", "3"])
    assert (args.max_new_tokens, args.ctx_size, args.gpu_layers, args.prompt) == (7, 64, 3, "hi")


def test_load_summary_line_on_a_budgeted_device(capsys):
    assert main(["plan", "--budget", "gpu:12MiB", "--providers", SIM]) == 0
    err = capsys.readouterr().err
    line = next(s for s in err.splitlines() if "offloaded" in s)
    # RepeatKVFusion: one node fewer for each layer's K and V repeat (4 of the 8 layers on the device)
    assert line.startswith("… offloaded 4/8 layers (192/400 nodes) to simgpu: weights ")
    assert "of budget 12.0 MiB; " in line and line.endswith("% of bytes on CPU")


def test_one_clear_line_when_the_gpu_took_nothing_and_declines_grouped(capsys):
    from ort_session._ort_api import cuda_device_count

    if cuda_device_count():
        pytest.skip("a CUDA device is present: the GPU takes nodes")
    # nobody asked for a GPU: no word about CUDA on a machine without one
    assert main(["plan"]) == 0
    captured = capsys.readouterr()
    assert "CUDA" not in captured.err and "took no node" not in captured.err
    # a cuda budget asks for it: one line says why it took nothing
    assert main(["plan", "--budget", "cuda:1GiB"]) == 0
    captured = capsys.readouterr()
    nothing = [s for s in captured.err.splitlines() if "took no node" in s]
    assert len(nothing) == 1 and nothing[0].startswith("… cuda:0 (CUDAExecutionProvider) took no node: ")
    assert "declines (432 nodes, 1 reason):" in captured.out
    assert captured.out.count("CUDAExecutionProvider rejected") == 1


def test_gpu_layers_puts_the_first_layers_on_the_gpu(capsys):
    assert main(["plan", "--gpu-layers", "3", "--providers", SIM, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    eps = {row["layer"]: row["ep"] for row in d["layers"] if row["layer"] is not None}
    assert eps == {0: SIM, 1: SIM, 2: SIM, 3: "CPUExecutionProvider", 4: "CPUExecutionProvider",
                   5: "CPUExecutionProvider", 6: "CPUExecutionProvider", 7: "CPUExecutionProvider"}


def test_a_rule_matching_nothing_is_an_ortrun_warning_line(capsys):
    assert main(["plan", "--layers", "gpu(layer.[0-1])", "--providers", SIM]) == 0
    err = capsys.readouterr().err
    line = next(s for s in err.splitlines() if "matches no node name" in s)
    assert line.startswith("ortrun: warning: layer rule 'gpu(layer.[0-1])' matches no node name; closest node names: ")
    assert "layers.0" in line and line.endswith("[RuleUnmatchedWarning]")


def test_device_profile_plans_without_ort_cuda_ep(monkeypatch, capsys):
    """Choosing a profile and a `cuda:90%` budget need no CUDA wheel; without ort-cuda-ep the plan says why
    the GPU took nothing, naming the profile."""
    monkeypatch.setitem(sys.modules, "ort_cuda_ep", None)  # import ort_cuda_ep -> ImportError
    assert main(["plan", "--device-profile", "H100", "--budget", "cuda:90%", "--json"]) == 0
    captured = capsys.readouterr()
    d = json.loads(captured.out)
    assert all(n["ep"] == "CPUExecutionProvider" for n in d["nodes"])
    line = next(s for s in captured.err.splitlines() if "took no node" in s)
    assert "ort-cuda-ep is not installed" in line and "device profile 'h100'" in line


def test_unknown_profile_is_an_error_in_the_session_too():
    from ort_graph import zoo

    with pytest.raises(InvalidOptionError, match="unknown device profile 'v100'; known profiles"):
        InferenceSession(zoo.demo_decoder(), {"device_profile": "v100", "free_dimension_overrides": {
            "batch": 1, "sequence": 4, "past_sequence": 0}}, providers=["CUDAExecutionProvider"])


def test_progress_writes_no_carriage_return_to_a_log_and_a_bar_to_a_terminal():
    log, tty = io.StringIO(), io.StringIO()
    for stream, is_tty in ((log, False), (tty, True)):
        p = _progress.Progress(stream, tty=is_tty)
        with _progress.reporting(p), _progress.phase("planning"):
            for i in range(1, 101):
                _progress.step("run", i, 100, "nodes")
            for _ in range(5):
                _progress.tick("trials")
    assert "\r" not in log.getvalue() and "run: 100% (100/100 nodes)" in log.getvalue()
    assert len(log.getvalue().splitlines()) <= 12  # a few lines, not one per node
    assert "\rrun [####################] 100% (100/100 nodes)" in tty.getvalue()


def test_sessions_stay_silent_without_a_reporter(capsys):
    from ort_graph import zoo

    InferenceSession(zoo.demo_decoder(), {"free_dimension_overrides": {"batch": 1, "sequence": 4, "past_sequence": 0}})
    assert capsys.readouterr().err == ""


def test_plot_writes_a_png(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="matplotlib is the optional extra ort-session[plot]")
    out = tmp_path / "plan.png"
    assert main(["plan", "--budget", "gpu:12MiB", "--providers", SIM, "--plot", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000


def test_plot_without_matplotlib_says_how_to_get_it(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    out = tmp_path / "plan.svg"
    assert main(["plan", "--plot", str(out)]) == 2
    assert "pip install 'ort-session[plot]'" in capsys.readouterr().err and not out.exists()
