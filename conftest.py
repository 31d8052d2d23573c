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


# the shared genai-builder exports (llama_l4/genai_*): 4 layers, 2 KV heads of 16, keys then values
GENAI_LAYERS, GENAI_KV_HEADS, GENAI_HEAD = 4, 2, 16


def _genai_feeds(ids, total: int, past=None, kv_dtype=None) -> dict:
    """Feeds of a shared genai export: `ids` [1, S], a mask of `total` ones, and the previous step's presents
    as pasts (empty caches of `kv_dtype`, float32 by default, without `past`)."""
    import numpy as np

    feeds = {"input_ids": ids, "attention_mask": np.ones((1, total), np.int64)}
    for i in range(GENAI_LAYERS):
        for kind in ("key", "value"):
            feeds[f"past_key_values.{i}.{kind}"] = (past[f"present.{i}.{kind}"] if past else
                                                     np.zeros((1, GENAI_KV_HEADS, 0, GENAI_HEAD), kv_dtype or np.float32))
    return feeds


@pytest.fixture(scope="session")
def genai_feeds():
    """`genai_feeds(ids, total, past=None, kv_dtype=float32)`: the feeds of one step of a shared genai export."""
    return _genai_feeds


# -- fuzz case counts in the terminal summary ("fuzz: N cases ...") ------------------------------
class FuzzCounter:
    """Cases run by the property tests (hypothesis), by area; shown at the end of the run so CI logs
    say how much fuzzing happened."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def add(self, area: str) -> None:
        self.counts[area] = self.counts.get(area, 0) + 1


_FUZZ = pytest.StashKey[FuzzCounter]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_FUZZ] = FuzzCounter()


@pytest.fixture(scope="session")
def fuzz_cases(request: pytest.FixtureRequest) -> FuzzCounter:
    return request.config.stash[_FUZZ]


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:  # noqa: ARG001
    counts = config.stash[_FUZZ].counts if _FUZZ in config.stash else {}
    if counts:
        detail = ", ".join(f"{area}: {n}" for area, n in sorted(counts.items()))
        terminalreporter.write_line(f"fuzz: {sum(counts.values())} cases ({detail})")
