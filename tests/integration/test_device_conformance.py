"""The ONNX backend node test cases through InferenceSession with a device provider first: the simulated
GPU (an opaque device: every value crosses to it and back through boundary copies and staging), and the
CUDA EP on ort_cuda_ep.testing.EmulatingDriver (every launch executed in numpy as its kernel does). Every
node a device provider claims must give the case's expected outputs, like the CPU EP. The one case allowed
to differ is float16 rounding (the CUDA kernels accumulate in float32 and round once)."""

from __future__ import annotations

import pytest

from ort_session import conformance

ROUNDING = {"test_attention_4d_causal_fp16_expanded"}  # 2 of 192 float16 values one rounding step apart


def test_node_cases_with_the_simulated_gpu_first():
    results = conformance.run_all(providers=["SimulatedGPUExecutionProvider", "CPUExecutionProvider"])
    if not results:
        pytest.skip("the onnx package ships no backend node test cases here")
    bad = [(r.name, r.outcome, r.detail[:300]) for r in results if r.outcome in ("failed", "wrong")]
    assert not bad, f"{len(bad)} case(s) differ with the simulated GPU first: {bad[:10]!r}"
    assert sum(r.outcome == "pass" for r in results) >= 1800


def test_node_cases_with_the_cuda_ep_first(monkeypatch):
    pytest.importorskip("ort_cuda_ep", reason="ort-cuda-ep is not installed")
    from ort_cuda_ep.testing import EmulatingDriver, install_driver

    driver = install_driver(monkeypatch, EmulatingDriver())
    results = conformance.run_all(providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    if not results:
        pytest.skip("the onnx package ships no backend node test cases here")
    bad = [(r.name, r.outcome, r.detail[:300]) for r in results
           if r.outcome == "failed" or (r.outcome == "wrong" and r.name not in ROUNDING)]
    assert not bad, f"{len(bad)} case(s) differ with the CUDA EP first: {bad[:10]!r}"
    assert sum(r.outcome == "pass" for r in results) >= 1800
    entries = {c[1] for c in driver.calls if c[0] == "launch"}
    missing = [k for k in ("matmul_", "softmax_", "binary_", "unary_", "where_", "isnan_", "reduce_rows_",
                           "strided_copy_", "gather_", "cast_", "conv2d_") if not any(e.startswith(k) for e in entries)]
    assert not missing, f"no {missing!r} launch: the CUDA EP did not run those kernels"
