"""Shape vectors with symbolic elements (`_shape_values`): a Reshape / Expand / ConstantOfShape whose shape input is
computed from symbolic dims gets its rank and the dims that are certain, and each inferred dim is what onnxruntime
computes for concrete inputs."""

from __future__ import annotations

import warnings

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import ort_graph

I64 = T.INT64


def _const(name, values, dtype=np.int64):
    return numpy_helper.from_array(np.array(values, dtype=dtype), name)


def _model(nodes, x_shape, out, inits=(), x_type=T.FLOAT, opset=17):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", x_type, x_shape)],
                          [helper.make_tensor_value_info(out, T.FLOAT, None)], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _resolved(proto, name):
    model = ort_graph.from_proto(proto)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ort_graph.resolve_shapes(model)
    return model.graph.values[name].shape


def _agrees(proto, name, x_shape, concrete):
    """`name`'s inferred shape against onnxruntime's output for the concrete input dims `concrete` (symbol ->
    extent): each int equal, each symbol of the input the extent it names, None (or a name ONNX made up) anything."""
    inferred = _resolved(proto, name)
    shape = [concrete.get(d, d) for d in x_shape]
    x = np.ones(shape, np.float32)
    got = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run([name], {"x": x})[0]
    assert inferred is not None and len(inferred) == got.ndim, (inferred, got.shape)
    for d, n in zip(inferred, got.shape):
        assert d is None or (isinstance(d, str) and d not in concrete) or concrete.get(d, d) == n, (inferred, got.shape)
    return tuple(None if isinstance(d, str) and d.startswith("unk__") else d for d in inferred)  # ONNX's: unknown


def _paddle_head(x_shape, tail, dims_kept=(0, 1)):
    """paddle2onnx's pattern: Shape -> Cast(int32) -> Slice -> Cast(int64) -> Concat(constant tail) -> Reshape."""
    start, end = dims_kept
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Cast", ["s"], ["s32"], to=T.INT32),
             helper.make_node("Slice", ["s32", "st", "en", "ax"], ["part32"]),
             helper.make_node("Cast", ["part32"], ["part"], to=I64),
             helper.make_node("Concat", ["part", "tail"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    inits = [_const("st", [start]), _const("en", [end]), _const("ax", [0]), _const("tail", tail)]
    return _model(nodes, x_shape, "y", inits)


def test_paddle_reshape_keeps_the_batch_symbol():
    m = _paddle_head(["B", 200, 1, 1], [200], dims_kept=(0, 1))
    assert _agrees(m, "y", ["B", 200, 1, 1], {"B": 3}) == ("B", 200)


@pytest.mark.parametrize(("x_shape", "tail", "want"), [
    (["B", 2, 3], [-1], ("B", 6)),              # the -1: the input's other dims, the symbol cancelled
    (["B", 4, "H", "W"], [4, -1], ("B", 4, None)),  # H * W: not one symbol, unknown
    (["B", "S", 8], [-1, 8], ("B", "S", 1, 8)),  # every input dim cancelled: the -1 is 1
    (["B", "S", 8], [8], ("B", "S", 8)),  # no -1
    (["B", 4, 6], [0, -1], ("B", 4, 6)),        # 0 copies the input's dim at its position
])
def test_reshape_dims_are_what_onnxruntime_computes(x_shape, tail, want):
    m = _paddle_head(x_shape, tail, dims_kept=(0, 2) if "S" in x_shape else (0, 1))
    for concrete in ({"B": 2, "H": 3, "W": 5, "S": 7}, {"B": 1, "H": 1, "W": 4, "S": 1}):
        assert _agrees(m, "y", x_shape, concrete) == want


def test_the_minus_one_is_the_one_symbol_left():
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
             helper.make_node("Unsqueeze", ["b", "axes"], ["b1"]),
             helper.make_node("Concat", ["b1", "tail"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    m = _model(nodes, ["B", 4, "S", 2], "y", [_const("zero", 0), _const("axes", [0]), _const("tail", [8, -1])])
    assert _agrees(m, "y", ["B", 4, "S", 2], {"B": 3, "S": 5}) == ("B", 8, "S")


def test_gather_with_a_negative_index_and_unsqueeze():
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "last"], ["w"], axis=0),
             helper.make_node("Unsqueeze", ["w", "zero"], ["w1"]),
             helper.make_node("Concat", ["minus1", "w1"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    m = _model(nodes, [2, "H", "W"], "y", [_const("last", -1), _const("zero", [0]), _const("minus1", [-1])])
    assert _agrees(m, "y", [2, "H", "W"], {"H": 3, "W": 5}) == (None, "W")


def test_arithmetic_on_a_symbol_keeps_the_length_only():
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Mul", ["s", "two"], ["s2"]),  # [2B, 2N] and [2 * 3]
             helper.make_node("ConstantOfShape", ["s2"], ["y"])]
    m = _model(nodes, ["B", 3], "y", [_const("two", [2, 2])])
    assert _agrees(m, "y", ["B", 3], {"B": 4}) == (None, 6)


def test_expand_to_a_vector_of_symbols_broadcasts():
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Concat", ["one", "s"], ["target"], axis=0),
             helper.make_node("Expand", ["c", "target"], ["y"])]
    m = _model(nodes, ["B", "S"], "y", [_const("one", [5]), numpy_helper.from_array(np.ones((1, 1), np.float32), "c")])
    assert _agrees(m, "y", ["B", "S"], {"B": 2, "S": 3}) == (5, "B", "S")


def test_a_float_cast_is_not_followed():
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Cast", ["s"], ["f"], to=T.FLOAT),
             helper.make_node("Cast", ["f"], ["target"], to=I64),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    shape = _resolved(_model(nodes, ["B", 3], "y"), "y")
    assert shape is None or len(shape) == 2 and all(d is None or d == 3 or d == "B" for d in shape)
