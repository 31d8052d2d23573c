"""Fixtures for ort-partition tests: static-shape zoo decoders and simple providers."""

from __future__ import annotations

import warnings

import pytest
from ort_graph import zoo

import ort_graph


def _resolve(model, dims):
    if hasattr(ort_graph, "resolve_shapes"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ort_graph.resolve_shapes(model, dims=dims)
        return model
    import onnx  # fallback until shape resolution is everywhere

    return ort_graph.from_proto(onnx.shape_inference.infer_shapes(ort_graph.to_proto(model), data_prop=True))


def make_static_decoder(**kw):
    """A zoo decoder with static shapes (batch=1, sequence=32, past_sequence=0 unless given)."""
    kw.setdefault("batch", 1)
    kw.setdefault("sequence", 32)
    kw.setdefault("past_sequence", 0)
    cfg = zoo.DecoderConfig(**kw)
    return _resolve(zoo.decoder(cfg), {})


@pytest.fixture
def static_decoder():
    return make_static_decoder


@pytest.fixture
def resolve():
    return _resolve
