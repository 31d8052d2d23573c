"""The conformance runner measures onnxruntime and onnx.reference next to us, on the same cases, each case
at its own rtol/atol, and prints one row per runtime."""

import numpy as np
import pytest

from ort_cpu_ep.conformance import compare
from ort_session import conformance
from ort_session._conformance_peers import compare_at_case_tolerance


def test_bfloat16_is_held_to_the_case_tolerance():
    import ml_dtypes

    expected = np.array([0.45507812], ml_dtypes.bfloat16)
    one_step = np.array([0.45703125], ml_dtypes.bfloat16)  # one bfloat16 rounding step above
    assert compare(expected, one_step, 1e-3, 1e-7) is None  # the op library's allowance
    assert "values differ" in compare_at_case_tolerance(expected, one_step, 1e-3, 1e-7)
    assert "dtype float32 != expected bfloat16" in compare_at_case_tolerance(expected, one_step.astype(np.float32),
                                                                             1e-3, 1e-7)
    assert compare_at_case_tolerance(expected, expected.copy(), 1e-3, 1e-7) is None


def test_three_runtimes_on_the_same_cases(capsys):
    pytest.importorskip("onnxruntime", reason="onnxruntime is a test tool of this project")
    results = conformance.run_compared(r"^test_(relu|scatter_with_axis)$")
    assert set(results) == {"ours", "onnxruntime", "onnx.reference"}
    names = {key: [r.name for r in rs] for key, (_label, rs) in results.items()}
    assert names["ours"] == names["onnxruntime"] == names["onnx.reference"] == ["test_relu", "test_scatter_with_axis"]
    outcome = {key: {r.name: r.outcome for r in rs} for key, (_label, rs) in results.items()}
    assert outcome["ours"] == {"test_relu": "pass", "test_scatter_with_axis": "pass"}
    assert outcome["onnx.reference"]["test_scatter_with_axis"] == "declined"  # no Scatter implementation
    text = conformance.table(results)
    assert text.splitlines()[0].split() == ["runtime", "(case", "rtol/atol)", "cases", "pass", "declined", "failed",
                                            "wrong"]
    assert "this project, CPU EP" in text and "onnxruntime 1." in text and "onnx.reference 1." in text


def test_main_prints_the_rows_and_rejects_an_unknown_runtime(capsys):
    assert conformance.main(["--filter", "^test_relu$", "--runtimes", "ours,onnx.reference", "-q"]) == 0
    out = capsys.readouterr().out
    assert "this project, CPU EP" in out and "onnx.reference" in out and "onnxruntime 1." not in out
    with pytest.raises(SystemExit):
        conformance.main(["--runtimes", "tvm"])
    assert "unknown ['tvm']" in capsys.readouterr().err


def test_bfloat16_attention_matches_the_reference_at_the_case_tolerance():
    """Computed as the reference does (every step in bfloat16, each matmul accumulated in float32 and rounded
    once): the ten bfloat16 attention cases, plain and expanded, pass at their own rtol/atol."""
    (label, results), = conformance.run_compared(r"^test_attention_.*bf16", runtimes=("ours",)).values()
    assert len(results) == 10
    assert [r for r in results if r.outcome != "pass"] == []
