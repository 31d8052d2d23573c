"""`ortrun` arguments that used to end in tracebacks, hangs or numpy's words: each is a usage error (exit 2) at
parse time or a typed one-line error, checked before any kernel runs."""

import os

import numpy as np
import pytest

from ort_graph import zoo
from ort_session import _cli_text, _context_limits
from ort_session.cli import main

CFG = zoo.DecoderConfig(layers=1, max_positions=24)


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return str(zoo.write_decoder(tmp_path_factory.mktemp("m") / "decoder.onnx", CFG))


@pytest.mark.parametrize("argv, message", [
    (["run", "--seed", "-1"], "argument --seed: '-1' is not a seed: an integer from 0 to 2**64-1"),
    (["run", "--seed", str(2**64)], "is not a seed"),
    (["run", "--seed", "1.5"], "is not a seed"),
    (["generate", "--seed", "x"], "is not a seed"),
    (["run", "--tolerance", "nan"], "argument --tolerance: 'nan' is not a finite number >= 0"),
    (["run", "--tolerance", "inf"], "is not a finite number >= 0"),
    (["run", "--tolerance=-1e-3"], "is not a finite number >= 0"),
    (["run", "--dim", f"batch={2**63}"], f"does not fit an ONNX dimension (int64, at most {2**63 - 1})"),
    (["plan", "--dim", "batch=" + "9" * 5000], "must look like name=INTEGER"),
    (["plan", "--dim", "batch=" + "9" * 19], "does not fit an ONNX dimension"),
    (["plan", "--dim", "batch=\u0663"], "must look like name=INTEGER"),
    (["plan", "--dim=batch=-2"], "must look like name=INTEGER"),
])
def test_bad_values_are_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: ortrun") and message in err


def _input_error(model_path, value, capsys):
    assert main(["run", model_path, "--input", f"input_ids={value}", "--dim", "past_sequence=0"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "allow_pickle" not in err
    return err


@pytest.mark.parametrize("make, says", [
    (lambda d: (d / "t.txt").write_text("1 2 3\n") and d / "t.txt", "is not a .npy array file"),
    (lambda d: "/proc/self/status", "is not a .npy array file"),
    (lambda d: "/dev/zero", "is a character device, not a regular file"),
    (lambda d: d, "is a directory, not a regular file"),
    (lambda d: (os.mkfifo(d / "p"), d / "p")[1], "is a FIFO (named pipe), not a regular file"),
    (lambda d: (np.save(d / "o.npy", np.array([{"a": 1}], dtype=object)), d / "o.npy")[1],
     "holds Python objects (pickled data), which ortrun never loads"),
    (lambda d: (np.save(d / "c.npy", np.arange(6)), (d / "c.npy").write_bytes((d / "c.npy").read_bytes()[:30]),
                d / "c.npy")[2], "is not a readable .npy array file: it is truncated or damaged"),
    (lambda d: str(d / "a\0b.npy"), "cannot open the file (embedded null byte)"),
    (lambda d: d / "missing.npy", "cannot open the file (No such file or directory)"),
])
def test_input_files_are_read_only_as_regular_npy_files(model_path, tmp_path, make, says, capsys):
    last = _input_error(model_path, make(tmp_path), capsys).strip().splitlines()[-1]
    assert last.startswith("ortrun: error: --input input_ids=") and says in last


def test_a_real_npy_input_still_runs_and_matches_onnxruntime(model_path, tmp_path, capsys):
    np.save(tmp_path / "ids.npy", np.array([[3, 1, 4]], np.int64))
    assert main(["run", model_path, "--input", f"input_ids={tmp_path / 'ids.npy'}", "--dim", "past_sequence=0",
                 "--check"]) == 0
    assert "check PASSED" in capsys.readouterr().out


@pytest.mark.parametrize("command, batch, says", [
    ("run", 10**11, "more than this machine's"),
    ("run", 2**63 - 1, "more than this machine's"),
    ("plan", 2**62, "more than the 2**63-1 bytes a memory plan can size"),
])
def test_huge_dims_are_a_typed_error_naming_the_input(model_path, command, batch, says, capsys):
    assert main([command, model_path, "--dim", f"batch={batch}", "--dim", "past_sequence=0"]) == 2
    err = capsys.readouterr().err
    assert "ortrun: error: generated input 'input_ids' of shape [" in err and says in err and "Traceback" not in err


def test_generate_caps_new_tokens_at_the_models_positions(model_path, capsys):
    assert main(["generate", model_path, "-p", "hi", "-n", str(10**12)]) == 0
    err = capsys.readouterr().err
    assert f"up to {CFG.max_positions - 2} new, planned context {CFG.max_positions}" in err


@pytest.mark.parametrize("argv, says", [
    (["-p", "x" * 30, "-n", "2"], f"the prompt is 30 tokens, the context {CFG.max_positions} (the positions the model holds)"),
    (["-p", "hi", "-c", "100"], f"-c/--ctx-size 100 is more than the {CFG.max_positions} positions"),
])
def test_generate_checks_the_prompt_and_context_against_the_positions_up_front(model_path, argv, says, capsys,
                                                                               monkeypatch):
    monkeypatch.setattr(_cli_text, "_session", lambda *a: pytest.fail("planned a session"))
    assert main(["generate", model_path, *argv]) == 2
    assert says in capsys.readouterr().err


def test_plan_checks_the_context_against_the_positions_up_front(model_path, capsys):
    assert main(["plan", model_path, "-c", str(10**12)]) == 2
    assert f"-c/--ctx-size {10**12} is more than the {CFG.max_positions} positions" in capsys.readouterr().err


def test_generate_without_positions_checks_the_kv_cache_against_memory(model_path, capsys, monkeypatch):
    monkeypatch.setattr(_context_limits, "model_positions", lambda graph: None)
    monkeypatch.setattr(_cli_text, "_session", lambda *a: pytest.fail("planned a session"))
    assert main(["generate", model_path, "-p", "hi", "-n", str(10**12)]) == 2
    err = capsys.readouterr().err
    assert f"ortrun: error: -n {10**12}: a context of {10**12 + 2} tokens needs" in err and "lower -n" in err


@pytest.mark.parametrize("dims", [["--dim", "sequence=0"], ["--dim", "sequence=0", "--dim", "past_sequence=3"]])
def test_an_empty_sequence_axis_runs_and_matches_onnxruntime(model_path, dims, capsys):
    assert main(["run", model_path, *dims, "--check"]) == 0
    out = capsys.readouterr().out
    assert "[1, 0, 256]" in out and "check PASSED" in out


def test_a_negative_declared_dim_is_an_input_error_naming_the_input():
    from onnx import TensorProto, helper

    import ort_graph
    from ort_session import InvalidInputError, generate_inputs

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, -5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = ort_graph.from_proto(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    assert generate_inputs(model.graph)["x"].shape == (2, 1)  # a file's negative dim reads as dynamic
    model.graph.values["x"].shape = (2, -5)  # a graph built in code keeps it
    with pytest.raises(InvalidInputError, match=r"input 'x' declares shape \[2, -5\] with dimension -5"):
        generate_inputs(model.graph)
