"""Constant folding at shape resolution is bounded: a value above the cap is never materialised (it stays a
node, computed at run time), and ONNX's data propagation running out of memory falls back to shapes only."""

import tracemalloc

import numpy as np
import pytest
from onnx import TensorProto, helper

import ort_graph
from ort_graph import from_proto
from ort_graph._constprop import MAX_ELEMENTS, evaluate

I64 = TensorProto.INT64


def _evaluate(op, inputs, **attrs):
    g = helper.make_graph([helper.make_node(op, [f"i{k}" for k in range(len(inputs))], ["o"], name=f"/{op}", **attrs)],
                          "g", [helper.make_tensor_value_info(f"i{k}", helper.np_dtype_to_tensor_dtype(np.asarray(x).dtype), None)
                                for k, x in enumerate(inputs)],
                          [helper.make_tensor_value_info("o", TensorProto.FLOAT, None)])
    node = from_proto(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])).graph.nodes[0]
    tracemalloc.start()
    try:
        out = evaluate(node, [np.asarray(x) for x in inputs])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return out, peak


@pytest.mark.parametrize(("op", "inputs"), [
    ("ConstantOfShape", [np.array([2**20, 2**20], np.int64)]),
    ("ConstantOfShape", [np.array([2**62, 4], np.int64)]),
    ("Range", [np.int64(0), np.int64(2**40), np.int64(1)]),
    ("Range", [np.float32(0), np.float32(1e30), np.float32(1)]),
    ("Expand", [np.ones((1, 1), np.int64), np.array([2**31, 2**31], np.int64)]),
    ("Where", [np.ones((4096, 1, 1), bool), np.ones((1, 4096, 1), np.int64), np.ones((1, 1, 4096), np.int64)]),
    ("Mul", [np.ones((4096, 1), np.int64), np.ones((1, 4096), np.int64)]),
    ("Gather", [np.arange(4096, dtype=np.int64).reshape(64, 64), np.zeros(4096, np.int64)]),
])
def test_a_result_above_the_cap_is_not_folded_nor_materialised(op, inputs):
    out, peak = _evaluate(op, inputs)
    assert out is None
    assert peak < 1 << 20  # sized before it is made: no 4 TiB attempt, not even one 16M-element array


@pytest.mark.parametrize(("op", "inputs", "expected"), [
    ("ConstantOfShape", [np.array([2, 3], np.int64)], np.zeros((2, 3), np.float32)),
    ("Range", [np.int64(2), np.int64(11), np.int64(3)], np.array([2, 5, 8], np.int64)),
    ("Range", [np.int64(5), np.int64(0), np.int64(1)], np.zeros(0, np.int64)),
    ("Expand", [np.array([7], np.int64), np.array([2, 2], np.int64)], np.full((2, 2), 7, np.int64)),
    ("Mul", [np.array([[2]], np.int64), np.arange(MAX_ELEMENTS, dtype=np.int64)], 2 * np.arange(MAX_ELEMENTS)[None]),
])
def test_small_results_still_fold(op, inputs, expected):
    out, _ = _evaluate(op, inputs)
    np.testing.assert_array_equal(out, expected)
    assert out.dtype == expected.dtype


@pytest.mark.parametrize("bad", [np.array([-1, 4], np.int64), np.array([2**63 - 1, 2**63 - 1], np.int64)])
def test_constant_of_shape_with_an_impossible_shape_is_left_to_the_kernel(bad):
    assert _evaluate("ConstantOfShape", [bad])[0] is None


def _huge_range_model(limit):
    nodes = [helper.make_node("Range", ["a", "b", "d"], ["r"], name="/Range"),
             helper.make_node("Cast", ["r"], ["y"], name="/Cast", to=TensorProto.FLOAT)]
    inits = [helper.make_tensor("a", I64, [], [0]), helper.make_tensor("b", I64, [], [limit]),
             helper.make_tensor("d", I64, [], [1])]
    g = helper.make_graph(nodes, "g", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return from_proto(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


@pytest.mark.parametrize("limit", [2**40, 2**62])
def test_resolving_shapes_of_a_huge_range_sizes_it_without_making_it(limit):
    """ONNX's data propagation materialises Range's values (std::bad_alloc for 2**40): shapes only then."""
    model = _huge_range_model(limit)
    ort_graph.resolve_shapes(model)
    assert model.graph.values["y"].shape == (limit,)


def test_resolving_shapes_of_a_small_range_still_knows_its_values():
    model = _huge_range_model(5)
    ort_graph.resolve_shapes(model)
    assert model.graph.values["y"].shape == (5,)


def _cast_of_long_input_model(via_range: bool):
    """x: [n] -> Cast (or Range(0, Shape(x)[0]) -> Cast): ONNX's Cast data propagator would make n entries."""
    if via_range:
        nodes = [helper.make_node("Shape", ["x"], ["s"], name="/Shape"),
                 helper.make_node("Squeeze", ["s"], ["n"], name="/Squeeze"),
                 helper.make_node("Range", ["zero", "n", "one"], ["r"], name="/Range"),
                 helper.make_node("Cast", ["r"], ["y"], name="/Cast", to=TensorProto.FLOAT)]
        inits = [helper.make_tensor("zero", I64, [], [0]), helper.make_tensor("one", I64, [], [1])]
    else:
        nodes, inits = [helper.make_node("Cast", ["x"], ["y"], name="/Cast", to=TensorProto.FLOAT)], []
    # Shape -> Cast -> Reshape: a short cast whose value shape resolution needs (data still propagates)
    nodes += [helper.make_node("Shape", ["x"], ["xs"], name="/Shape2"),
              helper.make_node("Cast", ["xs"], ["xs64"], name="/CastShape", to=I64),
              helper.make_node("Reshape", ["y", "xs64"], ["z"], name="/Reshape")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", I64, ["past_sequence"])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)], inits)
    return from_proto(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


@pytest.mark.parametrize("via_range", [False, True])
@pytest.mark.parametrize("n", [2**31, 2**40])
def test_an_override_making_a_cast_input_huge_resolves_without_materialising_it(via_range, n):
    model = _cast_of_long_input_model(via_range)
    tracemalloc.start()
    try:
        ort_graph.resolve_shapes(model, {"past_sequence": n})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert model.graph.values["y"].shape == (n,) and model.graph.values["z"].shape == (n,)
    assert peak < 64 << 20


# z = Reshape(y, Cast(Shape(x))): its length is known only through data propagation, so it counts as unknown
@pytest.mark.parametrize(("via_range", "n", "long"), [(False, 2**31, ["x", "y", "z"]), (True, 2**40, ["x", "r", "y", "z"]),
                                                    (False, 16, ["z"]), (True, 16, ["r", "y", "z"])])
def test_long_or_unknown_length_vectors_are_found(via_range, n, long):
    import onnx

    from ort_graph._data_prop import long_vectors
    from ort_graph._shapes import _shape_only_proto, input_shapes

    model = _cast_of_long_input_model(via_range)
    proto = _shape_only_proto(model, input_shapes(model.graph, {"past_sequence": n}, {})[0])
    plain = onnx.shape_inference.infer_shapes(proto, data_prop=False)
    assert sorted(long_vectors(plain)) == sorted(long)  # Range's length is unknown without data propagation


@pytest.mark.parametrize(("limit", "long"), [(2**40, ["r", "y"]), (100, [])])
def test_a_range_of_constants_is_a_long_vector_when_it_is(limit, long):
    import onnx

    from ort_graph._data_prop import long_vectors
    from ort_graph._shapes import _shape_only_proto

    plain = onnx.shape_inference.infer_shapes(_shape_only_proto(_huge_range_model(limit), {}), data_prop=False)
    assert sorted(long_vectors(plain)) == long
