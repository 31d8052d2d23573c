"""Shared test fixtures: the real exported models in ../shared/models (skipped where absent)."""

from __future__ import annotations

import os
import pathlib

import pytest

_ROOT = pathlib.Path(__file__).resolve().parent


def shared_models_dir() -> pathlib.Path | None:
    env = os.environ.get("ORT_SHARED_MODELS")
    for cand in ([pathlib.Path(env)] if env else []) + [_ROOT.parent / "shared" / "models", _ROOT / "shared" / "models"]:
        if (cand / "llama_l4").is_dir():
            return cand
    return None


@pytest.fixture(scope="session")
def shared_models() -> pathlib.Path:
    d = shared_models_dir()
    if d is None:
        pytest.skip("real exported models not present (expected ../shared/models beside the checkout)")
    return d
