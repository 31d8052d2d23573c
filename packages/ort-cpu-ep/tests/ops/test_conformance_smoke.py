"""Conformance smoke test over a fixed subset of the ONNX backend node cases."""

from __future__ import annotations

import numpy as np
import pytest

from ort_cpu_ep.conformance import CaseResult, compare, run_all, totals

# One or more families per op module; a few hundred cases, a few seconds.
SUBSET = (r"^test_(add|mul|div_|pow|mod_|bitshift|equal|where|relu|gelu|erf|sigmoid|cast_FLOAT|castlike_FLOAT_to|"
          r"reshape|transpose|slice|pad|concat|split_|gather|scatter|reduce_sum|reduce_max|argmax|topk|"
          r"matmul|gemm|einsum|softmax|layer_norm|batchnorm|conv|maxpool|averagepool|resize_upsample|"
          r"gridsample|attention_4d|nllloss|quantizelinear|dequantizelinear|if|loop|scan9|sequence_insert|"
          r"optional|nonmaxsuppression|cumsum|range)")


@pytest.fixture(scope="module")
def results() -> list[CaseResult]:
    return run_all(SUBSET)


def test_subset_has_no_run_failures_or_wrong_results(results):
    t = totals(results)
    bad = [f"{r.outcome}: {r.name}: {r.detail}" for r in results if r.outcome in ("failed", "wrong")]
    assert not bad, "\n".join(bad[:20])
    assert t["cases"] > 300
    assert t["pass"] >= 0.95 * t["cases"], t


@pytest.mark.parametrize("name", ["test_matmul_4d", "test_conv_with_strides_padding", "test_attention_4d_gqa",
                                  "test_loop11", "test_resize_upsample_scales_cubic", "test_softmax_axis_1"])
def test_named_cases_pass(results, name):
    by_name = {r.name: r for r in results}
    assert by_name[name].outcome == "pass", by_name[name]


def test_declines_carry_reasons(results):
    declined = [r for r in results if r.outcome == "declined"]
    assert all(": " in r.detail for r in declined)


def test_compare_flags_dtype_shape_and_value_mismatches():
    a = np.array([1.0, 2.0], np.float32)
    assert compare(a, a.copy(), 1e-3, 1e-7) is None
    assert "dtype" in compare(a, a.astype(np.float64), 1e-3, 1e-7)
    assert "shape" in compare(a, a[:1], 1e-3, 1e-7)
    assert "differ" in compare(a, a + 1, 1e-3, 1e-7)
    assert compare([a], [a], 1e-3, 1e-7) is None
    assert compare(None, None, 1e-3, 1e-7) is None
    assert compare(np.array([np.nan], np.float32), np.array([np.nan], np.float32), 1e-3, 1e-7) is None


def test_onnx_model_tests_run_without_failures():
    from ort_cpu_ep.conformance import model_cases, run_case

    results = [run_case(*case) for case in model_cases(r"\[(simple|pytorch-operator)\]")]
    if not results:
        pytest.skip("the onnx package ships no local model tests here")
    bad = [f"{r.outcome}: {r.name}: {r.detail}" for r in results if r.outcome in ("failed", "wrong")]
    assert not bad, "\n".join(bad)
    assert sum(r.outcome == "pass" for r in results) >= 0.9 * len(results)
