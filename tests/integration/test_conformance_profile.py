"""Each provider's expected claims and declines over the ONNX backend node test cases (003: "each EP's
expected support/decline profile"), committed in conformance_profiles/<EP>.json. A claim lost or a new
decline fails here; a deliberate change is regenerated with `nox -s conformance_profile` (or
`python -m ort_session.conformance_profile`). Claims only: no kernel runs."""

from __future__ import annotations

import json
import pathlib
import time

import pytest

from ort_session import conformance_profile as cp

PROFILES = pathlib.Path(__file__).with_name("conformance_profiles")


@pytest.mark.parametrize("provider", cp.PROVIDERS)
def test_no_claim_is_lost_and_no_decline_is_new(provider):
    if provider == "CUDAExecutionProvider":
        pytest.importorskip("ort_cuda_ep", reason="ort-cuda-ep is not installed")
    t0 = time.perf_counter()
    actual = cp.compute_profile(provider)
    if not actual:
        pytest.skip("the onnx package ships no backend node test cases here")
    expected = json.loads(cp.profile_path(PROFILES, provider).read_text())
    problems = cp.compare(expected, actual)
    assert not problems, (f"{provider}: {len(problems)} regression(s) against {provider}.json (if deliberate, "
                          f"regenerate: nox -s conformance_profile): {problems[:10]!r}")
    assert time.perf_counter() - t0 < 60, "claims only must stay fast"


def test_compare_names_lost_claims_new_declines_and_new_cases():
    expected = {"a": "claimed", "b": {"Conv": "dtype"}, "c": {"Conv": "dtype"}}
    actual = {"a": {"Add": "shape"}, "b": {"Conv": "dtype"}, "c": {"Conv": "attribute", "Relu": "op"},
              "d": {"X": "op"}, "e": "claimed"}
    problems = cp.compare(expected, actual)
    assert problems == ["a: was claimed, now declined {'Add': 'shape'} (a lost claim)",
                        "c: new decline(s) {'Conv': 'attribute', 'Relu': 'op'} (was {'Conv': 'dtype'})",
                        "d: a new case, declined {'X': 'op'}"]
    assert cp.compare(actual, {**actual, "a": "claimed"}) == []  # an improvement is not a regression


@pytest.mark.parametrize(("rejected", "category"), [
    ("dtype: input 0 is STRING", "dtype"), ("op 'Bernoulli' at opset 22", "op"),
    ("training_mode input that may be true at run time", "attribute"), ("the moon is full", "other"),
    ("no CUDA driver/device: cuInit failed", "device"), ("input 2 has rank 5", "shape"),
])
def test_reason_categories(rejected, category):
    assert cp.reason_category(rejected) == category
