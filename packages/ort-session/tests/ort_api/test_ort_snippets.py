"""The same onnxruntime snippets against onnxruntime and `import ort_session as ort`: same results."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import ort_session

from .snippets import SNIPPETS, mlp_model

ort_reference = pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("snippet_models")
    model = mlp_model()
    path = folder / "mlp.onnx"
    path.write_bytes(model.SerializeToString())
    return {"path": str(path), "bytes": model.SerializeToString(),
            "w_input_bytes": mlp_model(w_as_input=True).SerializeToString()}


def same(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype \
            and a.shape == b.shape and np.allclose(a, b, rtol=1e-5, atol=1e-6)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


def run_snippet(module, snippet, models, folder):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # notes about options without effect here are expected
        return snippet(module, models, str(folder))


def test_there_are_at_least_thirty_snippets():
    assert len(SNIPPETS) >= 30


@pytest.mark.parametrize("snippet", SNIPPETS, ids=lambda s: s.__name__)
def test_snippet_gives_onnxruntimes_result(snippet, models, tmp_path):
    (tmp_path / "ort").mkdir()
    (tmp_path / "ours").mkdir()
    expected = run_snippet(ort_reference, snippet, models, tmp_path / "ort")
    got = run_snippet(ort_session, snippet, models, tmp_path / "ours")
    assert same(got, expected), f"{snippet.__name__}: ort_session gave {got!r}, onnxruntime {expected!r}"
