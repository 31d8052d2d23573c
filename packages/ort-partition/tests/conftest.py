"""Fixtures for ort-partition tests: static-shape zoo decoders and simple providers."""

from __future__ import annotations

import warnings

import pytest
from onnx import TensorProto, helper

import ort_graph
from ort_graph import zoo


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


def _node(op, inputs, outputs, name, ann=None, **kw):
    n = helper.make_node(op, inputs, outputs, name=name, **kw)
    if ann is not None:
        e = n.metadata_props.add()
        e.key, e.value = "layer_ann", ann
    return n


def make_control_flow_model():
    """x -> outer_add[layers.0] -> If[layers.1] { then: t_plain, t_own[layers.0], t_if{ deep_plain } ; else: e_plain }
    plus a top-level node without annotation."""
    f = TensorProto.FLOAT
    vi = lambda n: helper.make_tensor_value_info(n, f, [2])  # noqa: E731
    deep = helper.make_graph([_node("Identity", ["a"], ["d"], "/deep_plain")], "deep", [], [vi("d")])
    then = helper.make_graph(
        [_node("Neg", ["a"], ["t1"], "/t_plain"), _node("Abs", ["t1"], ["t2"], "/t_own", ann="layers.0"),
         _node("If", ["c"], ["t3"], "/t_if", then_branch=deep, else_branch=deep)],
        "then", [], [vi("t3")])
    other = helper.make_graph([_node("Neg", ["a"], ["e1"], "/e_plain")], "else", [], [vi("e1")])
    g = helper.make_graph(
        [_node("Add", ["x", "x"], ["a"], "/outer_add", ann="layers.0"),
         _node("ReduceSum", ["a"], ["s"], "/plain", keepdims=0),
         _node("Greater", ["s", "zero"], ["c"], "/cmp", ann="  layers.1  "),
         _node("If", ["c"], ["y"], "/the_if", ann="layers.1", then_branch=then, else_branch=other)],
        "main", [vi("x")], [vi("y")], [helper.make_tensor("zero", f, [], [0.0])])
    return ort_graph.from_proto(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


@pytest.fixture
def control_flow_model():
    return make_control_flow_model
