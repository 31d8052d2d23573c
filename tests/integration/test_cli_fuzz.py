"""`ortrun run` / `ortrun plan` with random arguments: bad dims, seeds, tolerances, budgets and input paths
(FIFOs, devices, text, pickles, NUL bytes). Every case ends in exit 0 (or 1 for a failed --check verdict), a
usage error (exit 2 from the parser) or one `ortrun: error:` line (exit 2) — never a traceback, a hang or a
raw library exception. Hypothesis with a fixed seed; the cases count in the summary (`fuzz: N cases`)."""

from __future__ import annotations

import atexit
import contextlib
import io
import os
import pathlib
import shutil
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from ort_session.cli import main

FUZZ = settings(derandomize=True, max_examples=100, deadline=20_000, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _write_files(root: pathlib.Path) -> dict[str, str]:
    rng = np.random.default_rng(0)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"], name="fc1/MatMul"),
         helper.make_node("Add", ["h", "b"], ["y"], name="fc1/Add")], "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        [numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "W"),
         numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "b")])
    (root / "m.onnx").write_bytes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    np.save(root / "ok.npy", np.ones((2, 4), np.float32))
    np.save(root / "ints.npy", np.arange(8).reshape(2, 4))
    np.save(root / "obj.npy", np.array([{"a": 1}], dtype=object))
    (root / "short.npy").write_bytes((root / "ok.npy").read_bytes()[:40])
    (root / "text.txt").write_text("1 2 3 4\n")
    os.mkfifo(root / "fifo")
    paths = {k: str(root / k) for k in ("ok.npy", "ints.npy", "obj.npy", "short.npy", "text.txt", "fifo")}
    return paths | {"dir": str(root), "missing": str(root / "missing.npy"), "dev": "/dev/zero",
                    "proc": "/proc/self/status", "nul": str(root / "a\0b.npy"), "long": str(root / ("n" * 300))}


FILES_DIR = pathlib.Path(tempfile.mkdtemp(prefix="ortrun-fuzz-"))
atexit.register(shutil.rmtree, FILES_DIR, ignore_errors=True)
FILES = _write_files(FILES_DIR)

SMALL = st.integers(0, 5).map(str)
HUGE = st.sampled_from([2**31, 2**40, 2**50, 2**62, 2**63 - 1]).map(str)
JUNK = st.one_of(st.sampled_from([-1, -3, 2**63, 2**64, 10**30]).map(str),
                 st.sampled_from(["", "x", "1.5", "-0", "\u0663", " 2", "1e3", "0x10", "9" * 400]))
NUMBER_TEXT = st.one_of(SMALL, SMALL, HUGE, JUNK)
DIM = st.tuples(st.sampled_from(["batch", "batch", "batch", "unknown", ""]), NUMBER_TEXT).map(lambda t: f"{t[0]}={t[1]}")
TOLERANCE = st.one_of(st.sampled_from(["nan", "inf", "-inf", "-1", "0", "1e-3", "1e308", "x", ""]),
                      st.floats(allow_nan=True, allow_infinity=True).map(repr))
BUDGET = st.sampled_from(["cpu:1GiB", "gpu:64KiB", "gpu:0", "cpu:-1", "gpu:12parsecs", "x", "cuda:90%", "gpu:1e30",
                          "gpu:1GiB,cpu:1KiB", ""])
INPUT = st.tuples(st.sampled_from(["x", "x", "x", "nope"]), st.sampled_from(sorted(FILES))).map(
    lambda t: f"{t[0]}={FILES[t[1]]}")


@st.composite
def argvs(draw) -> list[str]:
    command = draw(st.sampled_from(["run", "plan"]))
    argv = [command, str(FILES_DIR / "m.onnx")]
    for dim in draw(st.lists(DIM, max_size=1)):
        argv.append(f"--dim={dim}")
    if draw(st.booleans()):
        argv.append(f"--budget={draw(BUDGET)}")
        if draw(st.booleans()):
            argv += ["--providers", "SimulatedGPUExecutionProvider,CPUExecutionProvider"]
    if command == "run":
        if draw(st.booleans()):
            argv.append(f"--seed={draw(NUMBER_TEXT)}")
        if draw(st.booleans()):
            argv += ["--check", f"--tolerance={draw(TOLERANCE)}"]
        for item in draw(st.lists(INPUT, max_size=2)):
            argv.append(f"--input={item}")
    return argv


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:  # the parser's usage errors
            code = e.code if isinstance(e.code, int) else 2
    return code, out.getvalue(), err.getvalue()


@FUZZ
@given(argv=argvs())
def test_random_arguments_end_in_a_result_a_usage_error_or_one_typed_error_line(argv, fuzz_cases):
    fuzz_cases.add("ortrun arguments")
    code, out, err = _run(argv)
    assert "Traceback" not in err and "allow_pickle" not in err, (argv, err)
    if code == 0:
        assert "output y" in out or "memory plan" in out, (argv, out)
    elif code == 1:
        assert "check FAILED" in out, (argv, out, err)
    else:
        assert code == 2, (argv, code, err)
        last = err.strip().splitlines()[-1]
        assert last.startswith(("ortrun: error: ", "ortrun run: error: ", "ortrun plan: error: ")), (argv, err)


@pytest.mark.parametrize("argv", [
    ["run", str(FILES_DIR / "m.onnx"), f"--input=x={FILES['fifo']}"],
    ["run", str(FILES_DIR / "m.onnx"), "--dim=batch=2", "--check", "--tolerance=0"],
])
def test_fixed_cases_from_the_fuzz_space(argv):
    code, out, err = _run(argv)
    assert (code, "Traceback" in err) in ((0, False), (2, False)), (code, err)
