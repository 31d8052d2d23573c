"""Feeds are untrusted input: containers and objects that are not arrays are refused at validation
(InvalidInputError naming the input and the expected dtype/shape); lists convert as onnxruntime does."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper

from ort_session import InferenceSession, InvalidInputError

ort = pytest.importorskip("onnxruntime")


def _model(dtype: int = T.FLOAT, shape=("batch", 3)) -> onnx.ModelProto:
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"], name="ident")], "g",
                          [helper.make_tensor_value_info("x", dtype, list(shape))],
                          [helper.make_tensor_value_info("y", dtype, list(shape))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m


@pytest.mark.parametrize("value", [None, {"a": 1}, "abc", b"abc", (1.0, 2.0, 3.0), {1.0, 2.0}, object(),
                                   memoryview(b"abc")],
                         ids=lambda v: type(v).__name__)
def test_non_array_feeds_are_refused_naming_input_and_expected_array(value):
    with pytest.raises(InvalidInputError) as info:
        InferenceSession(_model()).run(None, {"x": value})
    msg = str(info.value)
    assert "input 'x'" in msg and "float32" in msg and "['batch', 3]" in msg


@pytest.mark.parametrize(("dtype", "value"), [
    (T.FLOAT, [[1, 2, 3]]), (T.FLOAT, [[1.5, 2.0, 3.0], [4.0, 5.0, 6.0]]), (T.INT64, [[1.7, 2, -3]]),
    (T.INT32, [[1, 2, 3]]), (T.BOOL, [[True, False, True]]), (T.FLOAT, [[float("nan"), float("inf"), -0.0]]),
])
def test_lists_convert_to_the_input_dtype_like_onnxruntime(dtype, value):
    m = _model(dtype)
    ours = InferenceSession(m).run(None, {"x": value})[0]
    theirs = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": value})[0]
    assert ours.dtype == theirs.dtype
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize(("dtype", "value", "fragment"), [
    (T.FLOAT, [[1.0], [2.0, 3.0]], "does not convert|not a rectangular"),
    (T.INT64, [[2**70, 1, 1]], "does not convert"),
    (T.FLOAT, [["a", "b", "c"]], "does not convert"),
])
def test_lists_that_do_not_convert_are_typed_errors(dtype, value, fragment):
    with pytest.raises(InvalidInputError, match=fragment):
        InferenceSession(_model(dtype)).run(None, {"x": value})


@pytest.mark.parametrize(("feeds", "fragment"), [
    ({"x": np.zeros((1, 3), np.float64)}, "dtype float64 but the model expects FLOAT"),
    ({"x": np.zeros((3,), np.float32)}, "rank 1"),
    ({"x": np.zeros((1, 4), np.float32)}, "dimension 1 is 4"),
    ({"x": np.zeros((1, 3), np.float32), "z": np.zeros(1)}, "unknown input name"),
    ({}, "missing input"),
    ({"x": np.array([["a", "b", "c"]])}, "dtype <U1"),
    ({"x": np.zeros((1, 3), "M8[s]")}, "dtype datetime64"),
    ({7: np.zeros((1, 3), np.float32)}, "unknown input name"),
])
def test_wrong_dtype_rank_names_are_clear(feeds, fragment):
    with pytest.raises(InvalidInputError, match=fragment):
        InferenceSession(_model()).run(None, feeds)


def test_feeds_must_be_a_mapping():
    with pytest.raises(InvalidInputError, match="must be a dict"):
        InferenceSession(_model()).run(None, [("x", np.zeros((1, 3), np.float32))])


def _two_inputs() -> onnx.ModelProto:
    g = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"], name="add")], "g",
                          [helper.make_tensor_value_info("a", T.FLOAT, ["n", 3]),
                           helper.make_tensor_value_info("b", T.FLOAT, ["n", 3])],
                          [helper.make_tensor_value_info("y", T.FLOAT, ["n", 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m


@pytest.mark.parametrize(("bad", "fragment"), [
    ({"a": np.zeros((2, 3), np.float32), "b": np.zeros((4, 3), np.float32)}, "symbolic dimension 'n' is 2"),
    ({"a": np.zeros((2, 3), np.float64), "b": np.zeros((2, 3), np.float32)}, "dtype float64"),
    ({"a": np.zeros((2, 4), np.float32), "b": np.zeros((2, 4), np.float32)}, "dimension 1 is 4"),
    ({"a": np.zeros((2, 3), np.float32)}, "missing input"),
])
def test_feed_shapes_that_passed_pass_again_and_others_are_still_checked(bad, fragment):
    """A session remembers the feed keys (names, dtypes, shapes) its checks passed: the same key runs without
    the per-dimension checks; a refused key is never remembered, so it is refused every time."""
    sess = InferenceSession(_two_inputs())
    good = {"a": np.ones((2, 3), np.float32), "b": np.full((2, 3), 2, np.float32)}
    for _ in range(3):
        with pytest.raises(InvalidInputError, match=fragment):
            sess.run(None, bad)
        np.testing.assert_array_equal(sess.run(None, good)[0], np.full((2, 3), 3, np.float32))
    assert len(sess._passed_feeds) == 1
