"""The C float32 Add, Sub, Mul, Div and Neg (csrc/arith_kernel.c) against numpy and the numpy kernel, bit for bit,
one node at a time through the CPU provider: broadcast patterns (fixed and generated), special values, empty
tensors, rank 0, thread counts, the output written over an input, shapes that do not broadcast, and which nodes the C
kernels take."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from onnx import TensorProto, helper

import ort_abi
import ort_graph
from ort_cpu_ep import CpuExecutionProvider, c_kernels
from ort_cpu_ep.testing import c_kernel_workspace, compute_over_input, one_node_model, run_one_node

F = TensorProto.FLOAT
EP = "CPUExecutionProvider"
BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}


def _binary(op, a_shape, b_shape, *, dtype=F, opset=None, declared=True):
    """One `op` node; `declared` False: the inputs' and output's shapes unknown to the model."""
    def shape(s):
        return list(s) if declared and s is not None else None

    out = np.broadcast_shapes(a_shape, b_shape) if declared else None
    model = one_node_model(helper.make_node(op, ["a", "b"], ["y"]),
                           [helper.make_tensor_value_info("a", dtype, shape(a_shape)),
                            helper.make_tensor_value_info("b", dtype, shape(b_shape))],
                           [helper.make_tensor_value_info("y", dtype, shape(out))])
    if opset is not None:
        model.opset_import[0].version = opset
    return model


def _neg(shape, *, dtype=F):
    return one_node_model(helper.make_node("Neg", ["x"], ["y"]), [helper.make_tensor_value_info("x", dtype, list(shape))],
                          [helper.make_tensor_value_info("y", dtype, list(shape))])


def _language(model) -> str:
    m = ort_graph.from_proto(model)
    ep = CpuExecutionProvider(m.graph, m.opset_imports)
    return c_kernels.kernel_language(ep.entry(m.graph.nodes[0]))


def _values(shape, seed):
    """Normal values with every 7th a special one (zeros of both signs, infinities, NaN, denormals, extremes)."""
    rng = np.random.default_rng(seed)
    x = np.array(rng.standard_normal(shape) * 3, np.float32)  # an array at rank 0 too
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -3e-42, 3.4e38, -1.2e-38, 1.0],
                        np.float32)
    flat = x.reshape(-1)
    flat[::7] = specials[rng.integers(0, len(specials), flat[::7].shape)]
    return x


def _assert_same_bits(got, want):
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_array_equal(got.view(np.uint32), np.ascontiguousarray(want, np.float32).view(np.uint32))


def _check_binary(op, a, b, *, declared=True):
    model = _binary(op, a.shape, b.shape, declared=declared)
    got = run_one_node(model, {"a": a, "b": b}, "C")["y"]
    with np.errstate(all="ignore"):
        _assert_same_bits(got, BINARY[op](a, b))
    _assert_same_bits(got, run_one_node(model, {"a": a, "b": b}, "numpy")["y"])
    return got


_PATTERNS = [
    ((4, 37), (4, 37)),                 # same shape, a tail after two vectors
    ((), (3, 40)),                      # a rank-0 scalar on the left
    ((3, 40), ()),                      # and on the right
    ((1,), (5, 17)),                    # a one-element vector
    ((1, 1, 2048), (2048,)),            # a decode step's residual / bias
    ((2, 3, 64), (64,)),                # a trailing vector over rows
    ((2, 1, 5, 8), (1, 3, 1, 8)),       # [B, 1, S, D] * [1, H, 1, D]: rotary's cos / sin
    ((6, 1), (1, 19)),                  # an outer product: a column against a row
    ((6, 19), (6, 1)),                  # a column per row: a one-value run against a vector
    ((), ()),                           # rank 0 both
    ((3, 0), (1,)),                     # empty
    ((0, 4), (0, 1)),
    ((2, 0, 3), (3,)),
    ((2, 1, 3, 1, 2, 5), (1, 4, 1, 2, 1, 5)),  # rank 6, alternating
    ((2, 3, 4, 1, 1, 33), (3, 1, 5, 2, 1)),    # rank 6 against rank 5
]


@pytest.mark.parametrize("op", list(BINARY))
@pytest.mark.parametrize("a_shape,b_shape", _PATTERNS, ids=[f"{a}x{b}" for a, b in _PATTERNS])
def test_binary_ops_give_the_bits_of_numpy_and_the_numpy_kernel(library, op, a_shape, b_shape):
    a, b = _values(a_shape, 1), _values(b_shape, 2)
    got = _check_binary(op, a, b)
    assert got.shape == np.broadcast_shapes(a_shape, b_shape)


@pytest.mark.parametrize("op", list(BINARY))
def test_every_pair_of_special_values(library, op):
    """Each special value against each (inf - inf, 0 * inf, x / 0, 0 / 0, NaN, denormals, overflow): IEEE results
    as numpy gives them, in the vectors and in the tails."""
    s = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-45, -1e-40, 3.4e38, -3.4e38, 1.1754944e-38,
                  2.0, 0.5, 7.0], np.float32)
    a = np.repeat(s, len(s))  # 225 values: 14 vectors and a tail
    b = np.tile(s, len(s))
    _check_binary(op, a, b)
    _check_binary(op, a.reshape(len(s), len(s)), s.reshape(len(s), 1))  # one divisor per row
    _check_binary(op, s.reshape(len(s), 1), b.reshape(len(s), len(s)))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(op=st.sampled_from(list(BINARY)),
       shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=6, min_side=0, max_side=5),
       inner=st.sampled_from([None, 1, 15, 16, 17, 40]), declared=st.booleans(), seed=st.integers(0, 2**16))
def test_any_broadcastable_pair_gives_the_bits_of_numpy(library, op, shapes, inner, declared, seed):
    """Random broadcastable shape pairs (numpy's rules), sometimes with a longer innermost dimension so the
    vectors and their tails are crossed; with and without shapes declared in the model."""
    a_shape, b_shape = shapes.input_shapes
    if inner is not None:  # the innermost dimension widened where it is not broadcast
        a_shape = (*a_shape[:-1], inner) if a_shape and a_shape[-1] > 1 else a_shape
        b_shape = (*b_shape[:-1], inner) if b_shape and b_shape[-1] > 1 else b_shape
    a, b = _values(a_shape, seed), _values(b_shape, seed + 1)
    _check_binary(op, a, b, declared=declared)


@pytest.mark.parametrize("shape", [(), (1,), (15,), (16,), (2, 3, 37), (0,), (4, 0, 2), (1, 2, 1, 2, 1, 9)])
def test_neg_gives_the_bits_of_numpy(library, shape):
    """The sign bit flipped, zeros and NaN included."""
    x = _values(shape, 3)
    model = _neg(shape)
    got = run_one_node(model, {"x": x}, "C")["y"]
    _assert_same_bits(got, np.negative(x))
    _assert_same_bits(got, run_one_node(model, {"x": x}, "numpy")["y"])


@pytest.mark.parametrize("op", ["Add", "Div"])
@pytest.mark.parametrize("a_shape,b_shape", [((3, 70001), (3, 70001)), ((3, 70001), (70001,)),
                                             ((5, 1, 40000), (5, 3, 1))])
def test_threads_give_the_same_bits(library, op, a_shape, b_shape):
    """The intra-op threads split the output elements (in whole vectors, any broadcast pattern): any thread count
    gives the same bits."""
    a, b = _values(a_shape, 4), _values(b_shape, 5)
    model = _binary(op, a_shape, b_shape)
    one, three = (run_one_node(model, {"a": a, "b": b}, "C", threads=n)["y"] for n in (1, 3))
    _assert_same_bits(three, one)
    with np.errstate(all="ignore"):
        _assert_same_bits(three, BINARY[op](a, b))


def test_neg_on_threads_gives_the_same_bits(library):
    x = _values((3, 70001), 6)
    model = _neg(x.shape)
    _assert_same_bits(run_one_node(model, {"x": x}, "C", threads=3)["y"], np.negative(x))


@pytest.mark.parametrize("a_shape,b_shape,into", [((4, 37), (4, 37), 0), ((4, 37), (4, 37), 1),
                                                  ((4, 37), (37,), 0), ((3, 1), (3, 50), 1)])
def test_the_output_written_over_an_input_gives_the_same_bits(library, a_shape, b_shape, into):
    a, b = _values(a_shape, 7), _values(b_shape, 8)
    for op, ufunc in BINARY.items():
        with np.errstate(all="ignore"):
            want = ufunc(a, b)
        _assert_same_bits(compute_over_input(_binary(op, a_shape, b_shape), {"a": a, "b": b}, into), want)
    x = _values((5, 33), 9)
    _assert_same_bits(compute_over_input(_neg(x.shape), {"x": x}, 0), np.negative(x))


@pytest.mark.parametrize("op", list(BINARY))
def test_shapes_that_do_not_broadcast_are_an_error_naming_the_op_and_both_shapes(library, op):
    """The model declares no shapes (a model file is untrusted input): the feeds decide, and the kernel refuses
    them with a typed error instead of reading out of bounds."""
    model = _binary(op, (2, 3), (4,), declared=False)
    feeds = {"a": np.ones((2, 3), np.float32), "b": np.ones(4, np.float32)}
    with pytest.raises(ort_abi.KernelError, match=rf"{op}: inputs of shapes \[2, 3\] and \[4\] do not broadcast"):
        run_one_node(model, feeds, "C")
    feeds = {"a": np.ones((0, 3), np.float32), "b": np.ones((2, 1), np.float32)}  # 0 against 2
    with pytest.raises(ort_abi.KernelError, match=rf"{op}: inputs of shapes \[0, 3\] and \[2, 1\] do not broadcast"):
        run_one_node(model, feeds, "C")


@pytest.mark.parametrize("dtype", [TensorProto.INT64, TensorProto.INT32, TensorProto.FLOAT16, TensorProto.DOUBLE])
def test_other_element_types_go_to_numpy(library, dtype):
    """int64 and int32 Add, Sub and Mul are C's (test_c_int_ops.py); integer Div and Neg, and other types, numpy's."""
    for op in BINARY:
        integer_c = dtype in (TensorProto.INT64, TensorProto.INT32) and op != "Div"
        assert _language(_binary(op, (2, 3), (3,), dtype=dtype)) == ("C" if integer_c else "numpy")
    assert _language(_neg((4,), dtype=dtype)) == "numpy"


def test_float32_of_any_rank_known_or_not_goes_to_c(library):
    for op in BINARY:
        assert _language(_binary(op, (2, 3), (3,))) == "C"
        assert _language(_binary(op, (2, 3), (3,), declared=False)) == "C"
        for opset in (7, 13, 14):
            assert _language(_binary(op, (2, 3), (3,), opset=opset)) == "C"
    assert _language(_neg((2, 3))) == "C"


def test_an_input_of_unknown_element_type_goes_to_numpy(library):
    """It might be an int64 shape computation: the float32 kernel would refuse it at run time."""
    # a file declaring UNDEFINED is refused at load; a value whose type inference left unknown (dtype 0) is not
    m = ort_graph.from_proto(_binary("Mul", (2, 3), (3,)))
    m.graph.values[m.graph.nodes[0].inputs[1]].dtype = TensorProto.UNDEFINED
    ep = CpuExecutionProvider(m.graph, m.opset_imports)
    assert c_kernels.kernel_language(ep.entry(m.graph.nodes[0])) == "numpy"


def test_opset_6_broadcast_attributes_go_to_numpy(library):
    """Before opset 7 the broadcast / axis attributes line B up with A from `axis`: the C kernels are registered
    since 7 (Neg since 6)."""
    model = one_node_model(helper.make_node("Add", ["a", "b"], ["y"], broadcast=1, axis=0),
                           [helper.make_tensor_value_info("a", F, [3, 4]), helper.make_tensor_value_info("b", F, [3])],
                           [helper.make_tensor_value_info("y", F, [3, 4])])
    model.opset_import[0].version = 6
    assert _language(model) == "numpy"
    model = _neg((3,))
    model.opset_import[0].version = 6
    assert _language(model) == "C"


@pytest.mark.parametrize("op", [*BINARY, "Neg"])
def test_registered_in_the_c_library_with_no_workspace(library, op):
    registry = c_kernels.c_registry()
    for opset in (7, 13, 14, 22):
        entry = registry.find(op, "", opset, EP, {"T": F})
        assert entry is not None and c_kernels.kernel_language(entry) == "C"
        int64 = registry.find(op, "", opset, EP, {"T": TensorProto.INT64})
        assert (int64 is None) == (op in ("Div", "Neg"))
    assert registry.find(op, "", 5, EP, {"T": F}) is None
    model = _neg((4, 8)) if op == "Neg" else _binary(op, (4, 8), (8,))
    assert c_kernel_workspace(model, [(4, 8)] if op == "Neg" else [(4, 8), (8,)]) == (0, [])


@pytest.mark.parametrize("a_shape,b_shape", _PATTERNS[:9], ids=[f"{a}x{b}" for a, b in _PATTERNS[:9]])
def test_a_sum_of_two_inputs_is_the_c_add(library, a_shape, b_shape):
    """resnet50's and shufflenet's residual Sums ran in numpy: two float32 inputs take Add's C kernel (Sum-8 on
    broadcasts as Add does), with numpy's bits."""
    a, b = _values(a_shape, 3), _values(b_shape, 4)
    model = _binary("Sum", a.shape, b.shape)
    assert _language(model) == "C"
    got = run_one_node(model, {"a": a, "b": b}, "C")["y"]
    with np.errstate(all="ignore"):
        _assert_same_bits(got, np.add(a, b))


def test_sums_of_other_arities_and_types_stay_with_numpy(library):
    three = one_node_model(helper.make_node("Sum", ["a", "b", "c"], ["y"]),
                           [helper.make_tensor_value_info(n, F, [2, 3]) for n in "abc"],
                           [helper.make_tensor_value_info("y", F, [2, 3])])
    assert _language(three) == "numpy"
    assert _language(_binary("Sum", (2, 3), (2, 3), dtype=TensorProto.DOUBLE)) == "numpy"
    assert _language(_binary("Sum", (2, 3), (2, 3), opset=6)) == "numpy"  # Sum-6: no broadcasting
