"""The C Reshape, Identity, Flatten, Squeeze and Unsqueeze (csrc/move_reshape.c) against the numpy kernels, bitwise,
one node at a time through the CPU provider: every element type they take, ranks 0-6, empty extents, negative
axes, 0 and -1 in shapes, allowzero, the output written over the input, typed errors naming the op and the
node, and the opsets and element types left to numpy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import ort_abi
import ort_graph
from ort_cpu_ep import CpuExecutionProvider, c_kernels
from ort_cpu_ep.testing import (
    c_kernel_workspace,
    compute_over_input,
    one_node_model,
    random_bits,
    run_one_node,
    same_bits_as_numpy,
)

DTYPES = [np.float32, np.int64, np.bool_, np.float16, np.uint8, np.int8, np.uint16, np.int16, np.int32, np.uint32,
          np.uint64, np.float64]
HYPOTHESIS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def model(op, x, *, ints=None, opset=None, name="n", **attrs):
    """One `op` node named `name` over feed `x` and the int64 initializers `ints` (input name -> values or None
    for an omitted input)."""
    ints = ints or {}
    names = ["x", *(n if v is not None else "" for n, v in ints.items())]
    while names and not names[-1]:
        names.pop()
    inits = [numpy_helper.from_array(np.asarray(v, np.int64), n) for n, v in ints.items() if v is not None]
    elem = helper.np_dtype_to_tensor_dtype(x.dtype)
    m = one_node_model(helper.make_node(op, names, ["y"], name=name, **attrs),
                       [helper.make_tensor_value_info("x", elem, list(x.shape))],
                       [helper.make_tensor_value_info("y", elem, None)], inits)
    if opset is not None:
        m.opset_import[0].version = opset
    return m


def same_bits(m, x) -> np.ndarray:
    return same_bits_as_numpy(m, {"x": x})["y"]


def language(m) -> str:
    g = ort_graph.from_proto(m)
    ep = CpuExecutionProvider(g.graph, g.opset_imports)
    return c_kernels.kernel_language(ep.entry(g.graph.nodes[0]))


def c_error(m, x, match):
    """The C kernel's error status, as the KernelError the host raises."""
    with pytest.raises(ort_abi.KernelError, match=match) as e:
        run_one_node(m, {"x": x}, "C")
    assert e.value.code == ort_abi.ErrorCode.INVALID_ARGUMENT
    with pytest.raises(Exception):  # noqa: B017, PT011 - numpy refuses it too (ValueError, IndexError ...)
        run_one_node(m, {"x": x}, "numpy")


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_element_type_is_moved_bitwise(library, dtype):
    x = random_bits((2, 3, 4), dtype)
    assert same_bits(model("Reshape", x, ints={"shape": [4, -1]}), x).shape == (4, 6)
    same_bits(model("Identity", x), x)
    same_bits(model("Flatten", x, axis=-1), x)
    same_bits(model("Unsqueeze", x, ints={"axes": [0, -1]}), x)
    same_bits(model("Squeeze", x[:, :1], ints={"axes": [1]}), x[:, :1].copy())


@pytest.mark.parametrize("shape,target,allowzero", [
    ((2, 3, 4), [0, -1], 0), ((2, 3, 4), [0, 0, 0], 0), ((2, 3, 4), [-1], 0), ((2, 3, 4), [4, 0, 2], 0),
    ((), [1, 1], 0), ((1,), [], 0), ((0, 3), [3, 0], 1), ((0, 3), [-1, 3], 0),
    ((2, 0, 5), [0, 0, 7], 1), ((2, 3), [1, 1, 6, 1, 1, 1], 0), ((24,), [2, 3, 2, 2], 0),
])
def test_reshape_shapes(library, shape, target, allowzero):
    x = random_bits(shape, np.float32, seed=len(shape))
    same_bits(model("Reshape", x, ints={"shape": target}, allowzero=allowzero), x)


@pytest.mark.parametrize("shape,target,allowzero", [
    ((2, 3), [4, -1], 0), ((2, 3), [-1, -1], 0), ((2, 3), [7], 0),
    ((2, 3), [0, 0, 0], 0), ((0, 3), [0, -1], 1), ((0, 3), [0, -1], 0), ((2, 3), [0, 6], 1),
])
def test_an_impossible_shape_is_refused_naming_the_op_and_both_shapes(library, shape, target, allowzero):
    x = random_bits(shape, np.float32)
    text = ", ".join(str(d) for d in shape)
    c_error(model("Reshape", x, ints={"shape": target}, allowzero=allowzero), x,
            rf"Reshape node 'n': cannot reshape the input of shape \[{text}\] .* to the requested shape \[")


def test_a_negative_extent_other_than_minus_one_is_refused(library):
    """ONNX allows only -1 (onnxruntime refuses -2); numpy's reshape would take any negative extent as -1."""
    x = random_bits((2, 3), np.float32)
    with pytest.raises(ort_abi.KernelError, match=r"Reshape node 'n': cannot reshape .* shape \[2, -2, 3\]"):
        run_one_node(model("Reshape", x, ints={"shape": [2, -2, 3]}), {"x": x}, "C")


@pytest.mark.parametrize("shape,axis", [((2, 3, 4), 0), ((2, 3, 4), 3), ((2, 3, 4), -1), ((2, 3, 4), -3), ((), 0),
                                        ((5,), 1), ((2, 0, 4), 1), ((2, 0, 4), 2), ((0, 3), 0)])
def test_flatten_axes(library, shape, axis):
    x = random_bits(shape, np.int64)
    same_bits(model("Flatten", x, axis=axis), x)


def test_flatten_refuses_an_axis_outside_the_rank(library):
    x = random_bits((2, 3), np.float32)
    with pytest.raises(ort_abi.KernelError, match=r"Flatten node 'n': axis 3 is outside \[-2, 2\]"):
        run_one_node(model("Flatten", x, axis=3), {"x": x}, "C")


@pytest.mark.parametrize("shape,axes", [((1, 3, 1, 2), None), ((1, 3, 1, 2), [0]), ((1, 3, 1, 2), [-2, 0]),
                                        ((1,), None), ((1,), [0]), ((), None), ((1, 0, 1), None), ((2, 3), []),
                                        ((1, 1, 1, 1, 1, 1), [5, -6])])
def test_squeeze_axes(library, shape, axes):
    x = random_bits(shape, np.bool_)
    same_bits(model("Squeeze", x, ints={"axes": axes}), x)


@pytest.mark.parametrize("shape,axes,match", [
    ((1, 3), [1], r"axis 1 of the input of shape \[1, 3\] has extent 3; only extents of 1 can be squeezed"),
    ((1, 3), [2], r"axis 2 is outside \[-2, 1\]"), ((1, 1), [0, -2], r"axis -2 is repeated")])
def test_squeeze_refusals(library, shape, axes, match):
    x = random_bits(shape, np.float32)
    c_error(model("Squeeze", x, ints={"axes": axes}), x, "Squeeze node 'n': " + match)


@pytest.mark.parametrize("shape,axes", [((3,), [0]), ((3,), [1]), ((3,), [-1]), ((), [0]), ((), [0, 1, -1]),
                                        ((2, 0), [1, 3]), ((2, 3), [-4, 2])])
def test_unsqueeze_axes(library, shape, axes):
    x = random_bits(shape, np.float16)
    same_bits(model("Unsqueeze", x, ints={"axes": axes}), x)


@pytest.mark.parametrize("axes,match", [([2], r"axis 2 is outside \[-2, 1\]"), ([0, 0], r"axis 0 is repeated"),
                                        ([1, -2], r"axis -2 is repeated")])
def test_unsqueeze_refusals(library, axes, match):
    x = random_bits((2,), np.float32)
    c_error(model("Unsqueeze", x, ints={"axes": axes}), x, "Unsqueeze node 'n': " + match)


@HYPOTHESIS
@given(shape=st.lists(st.integers(0, 4), max_size=6), dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**16),
       allowzero=st.booleans(), choice=st.data())
def test_hypothesis_reshape_flatten_squeeze_unsqueeze(library, shape, dtype, seed, allowzero, choice):
    x = random_bits(tuple(shape), dtype, seed)
    r = len(shape)
    # Reshape: the shape as another factorization; one extent at random replaced by -1 or 0 (its own extent)
    target = list(np.random.default_rng(seed).permutation(shape)) if x.size else [0, *shape]
    if target and x.size:
        k = choice.draw(st.integers(0, len(target) - 1))
        target[k] = -1
    if not allowzero and r:
        k = choice.draw(st.integers(0, r - 1))
        if k < len(target) and target[k] == shape[k]:  # 0 copies the input's extent k
            target[k] = 0
    if x.size == 0:
        allowzero, target = True, [0, *shape]
    same_bits(model("Reshape", x, ints={"shape": target}, allowzero=int(allowzero)), x)
    same_bits(model("Flatten", x, axis=choice.draw(st.integers(-r, r))), x)
    ones = [i for i, d in enumerate(shape) if d == 1]
    axes = choice.draw(st.lists(st.sampled_from(ones), unique=True)) if ones else []
    same_bits(model("Squeeze", x, ints={"axes": [a - r if a % 2 else a for a in axes] if axes else None}), x)
    count = choice.draw(st.integers(1, 2))
    new = choice.draw(st.lists(st.integers(0, r + count - 1), min_size=count, max_size=count, unique=True))
    same_bits(model("Unsqueeze", x, ints={"axes": [a - (r + len(new)) if a % 2 else a for a in new]}), x)


@pytest.mark.parametrize("op,ints", [("Reshape", {"shape": [6, 2]}), ("Identity", None),
                                     ("Unsqueeze", {"axes": [1]}), ("Squeeze", {"axes": [0]}), ("Flatten", None)])
def test_the_output_written_over_the_input_gives_the_same_bits(library, op, ints):
    """ort-memplan may give these ops' output the input's block (ALIAS_INPLACE): then nothing moves."""
    x = random_bits((1, 3, 4), np.float32, seed=4)
    m = model(op, x, ints=ints)
    want = run_one_node(m, {"x": x}, "numpy")["y"]
    got = compute_over_input(m, {"x": x})
    assert got.shape == want.shape and got.tobytes() == want.tobytes()


def test_older_opsets_go_to_numpy(library):
    x = random_bits((1, 3), np.float32)
    assert language(model("Reshape", x, opset=4, shape=[3])) == "numpy"  # the shape attribute


@pytest.mark.parametrize(("op", "opset", "shape", "attrs"), [
    ("Squeeze", 11, (1, 3, 1, 2), {"axes": [0, -2]}), ("Squeeze", 12, (1, 3, 1), {}), ("Squeeze", 1, (2, 1), {"axes": [1]}),
    ("Unsqueeze", 11, (3, 2), {"axes": [0, 3]}), ("Unsqueeze", 12, (3,), {"axes": [-1]}), ("Identity", 13, (2, 3), {}),
    ("Identity", 1, (4,), {})])
def test_older_opsets_squeeze_unsqueeze_identity_are_c(library, op, opset, shape, attrs):
    """Before opset 13 Squeeze / Unsqueeze take axes as an attribute, Identity before 14 is "T": the C kernels
    registered for those opsets give the numpy kernels' bits."""
    x = random_bits(shape, np.float32)
    m = model(op, x, opset=opset, **attrs)
    assert language(m) == "C"
    same_bits(m, x)


def test_older_opset_squeeze_of_an_extent_above_1_is_an_error(library):
    x = random_bits((2, 3), np.float32)
    c_error(model("Squeeze", x, opset=11, axes=[0]), x, "only extents of 1 can be squeezed")


def test_strings_and_unknown_types_go_to_numpy(library):
    x = np.array(["a", "b"], dtype=object)
    m = one_node_model(helper.make_node("Identity", ["x"], ["y"]),
                       [helper.make_tensor_value_info("x", TensorProto.STRING, [2])],
                       [helper.make_tensor_value_info("y", TensorProto.STRING, None)])
    assert language(m) == "numpy"
    assert run_one_node(m, {"x": x}, "numpy")["y"].tolist() == ["a", "b"]
    g = ort_graph.from_proto(m)  # a value of unknown type (a file declaring UNDEFINED is refused at load)
    g.graph.values["x"].dtype = TensorProto.UNDEFINED
    ep = CpuExecutionProvider(g.graph, g.opset_imports)
    assert c_kernels.kernel_language(ep.entry(g.graph.nodes[0])) == "numpy"
    assert language(model("Identity", random_bits((2,), np.float32))) == "C"


def test_no_workspace_is_estimated_or_declared(library):
    m = model("Reshape", random_bits((4, 6), np.float32), ints={"shape": [24]})
    assert c_kernel_workspace(m, [(4, 6)]) == (0, [])
