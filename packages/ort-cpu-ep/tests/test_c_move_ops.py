"""The C Transpose, Concat, Slice and Gather (csrc/move_transpose.c, move_concat_slice.c, move_gather.c) against
the numpy kernels, bitwise, one node at a time through the CPU provider: element types, ranks 0-6, negative axes,
empty extents, every Slice corner (negative indices, clamping, negative steps, INT64_MAX/MIN ends, omitted axes and
steps, int32 indices; against onnxruntime too), Gather's negative and out-of-range indices, and typed errors
naming the op and the node."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import AttributeProto, helper, numpy_helper

import ort_abi
import ort_graph
from ort_cpu_ep import CpuExecutionProvider, c_kernels
from ort_cpu_ep.testing import one_node_model, random_bits, run_one_node, same_bits_as_numpy

DTYPES = [np.float32, np.int64, np.bool_, np.float16, np.uint8, np.int16, np.int32, np.float64, np.uint64]
HYPOTHESIS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
I64_MAX, I64_MIN = np.iinfo(np.int64).max, np.iinfo(np.int64).min


def model(op, feeds, consts=(), **attrs):
    """One `op` node named 'n': `feeds` (name -> array, '' for an omitted input) as graph inputs, then `consts`
    (name -> array or None for an omitted input) as initializers, in that order."""
    names, inputs, inits = [], [], []
    for name, value in feeds.items():
        names.append(name)
        inputs.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype),
                                                    list(value.shape)))
    for name, value in dict(consts).items():
        names.append(name if value is not None else "")
        if value is not None:
            inits.append(numpy_helper.from_array(np.asarray(value), name))
    while names and not names[-1]:
        names.pop()
    elem = inputs[0].type.tensor_type.elem_type
    return one_node_model(helper.make_node(op, names, ["y"], name="n", **attrs), inputs,
                          [helper.make_tensor_value_info("y", elem, None)], inits)


def same_bits(m, feeds) -> np.ndarray:
    return same_bits_as_numpy(m, feeds)["y"]


def language(m) -> str:
    g = ort_graph.from_proto(m)
    ep = CpuExecutionProvider(g.graph, g.opset_imports)
    return c_kernels.kernel_language(ep.entry(g.graph.nodes[0]))


def onnxruntime_output(m, feeds):
    ort = pytest.importorskip("onnxruntime")
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def c_error(m, feeds, match):
    with pytest.raises(ort_abi.KernelError, match="node 'n'.*" + match) as e:
        run_one_node(m, feeds, "C")
    assert e.value.code == ort_abi.ErrorCode.INVALID_ARGUMENT


# ---- Transpose


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,perm", [((2, 3, 4, 5), [0, 2, 1, 3]), ((1, 32, 1, 64), [0, 2, 1, 3]),
                                        ((3, 5), None), ((4, 1, 6), [2, 0, 1]), ((2, 3, 4), [2, 1, 0]),
                                        ((7,), [0]), ((), None), ((2, 0, 3), [1, 2, 0]), ((33, 17), [1, 0]),
                                        ((2, 3, 2, 3, 2, 3), [5, 3, 1, 4, 2, 0]), ((2, 3, 4), [-1, 0, -2])])
def test_transpose(library, dtype, shape, perm):
    x = random_bits(shape, dtype, seed=len(shape))
    attrs = {} if perm is None else {"perm": perm}
    got = same_bits(model("Transpose", {"x": x}, **attrs), {"x": x})
    assert got.tobytes() == np.ascontiguousarray(np.transpose(x, perm)).tobytes()


@pytest.mark.parametrize("perm,match", [([0, 0, 1], "is not a permutation"), ([0, 1], "has 2 entries"),
                                        ([0, 1, 3], "is not a permutation")])
def test_transpose_refuses_a_perm_that_is_not_a_permutation(library, perm, match):
    x = random_bits((2, 3, 4), np.float32)
    c_error(model("Transpose", {"x": x}, perm=perm), {"x": x}, "Transpose node 'n': perm .*" + match)


@HYPOTHESIS
@given(shape=st.lists(st.integers(0, 5), max_size=6), dtype=st.sampled_from(DTYPES), choice=st.data())
def test_hypothesis_transpose(library, shape, dtype, choice):
    x = random_bits(shape, dtype, seed=sum(shape))
    perm = list(choice.draw(st.permutations(range(len(shape)))))
    same_bits(model("Transpose", {"x": x}, **({"perm": perm} if perm else {})), {"x": x})


# ---- Concat


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes,axis", [([(1, 4, 7, 8), (1, 4, 1, 8)], 2), ([(1, 4, 7, 8), (1, 4, 1, 8)], -2),
                                         ([(3,), (0,), (2,)], 0), ([(2, 3), (2, 0), (2, 5)], 1),
                                         ([(2, 3, 4)], 0), ([(0, 3), (0, 3)], 0), ([(0, 3), (0, 2)], -1),
                                         ([(1, 2, 1, 2, 1, 2)] * 3, 4)])
def test_concat(library, dtype, shapes, axis):
    feeds = {f"x{i}": random_bits(s, dtype, seed=i) for i, s in enumerate(shapes)}
    same_bits(model("Concat", feeds, axis=axis), feeds)


def test_concat_skips_an_omitted_input_and_names_inputs_by_their_node_index(library):
    x0, x2 = random_bits((2, 3), np.float32, seed=0), random_bits((2, 4), np.float32, seed=2)
    m = model("Concat", {"x0": x0, "x2": x2}, axis=1)
    m.graph.node[0].input.insert(1, "")
    assert same_bits(m, {"x0": x0, "x2": x2}).shape == (2, 7)
    m.graph.node[0].attribute[0].i = 0
    c_error(m, {"x0": x0, "x2": x2}, r"Concat node 'n': input 2 has shape \[2, 4\], input 0 \[2, 3\]")


def test_concat_of_many_inputs(library):
    """More inputs than the kernel describes on its stack (16): their descriptions are allocated."""
    feeds = {f"x{i}": random_bits((2, i % 3, 3), np.int8, seed=i) for i in range(40)}
    same_bits(model("Concat", feeds, axis=1), feeds)


@pytest.mark.parametrize("shapes,axis,match", [
    ([(2, 3), (3, 3)], 1, r"input 1 has shape \[3, 3\], input 0 \[2, 3\]"),
    ([(2, 3), (2, 3, 1)], 0, r"input 1 has shape \[2, 3, 1\]"),
    ([(2, 3), (2, 3)], 2, r"axis 2 is outside \[-2, 1\]"), ([(2, 3), (2, 3)], -3, r"axis -3 is outside")])
def test_concat_refusals(library, shapes, axis, match):
    feeds = {f"x{i}": random_bits(s, np.float32, seed=i) for i, s in enumerate(shapes)}
    c_error(model("Concat", feeds, axis=axis), feeds, "Concat node 'n': " + match)


@HYPOTHESIS
@given(shape=st.lists(st.integers(0, 4), min_size=1, max_size=6), extents=st.lists(st.integers(0, 4), min_size=1,
       max_size=4), dtype=st.sampled_from(DTYPES), choice=st.data())
def test_hypothesis_concat(library, shape, extents, dtype, choice):
    axis = choice.draw(st.integers(-len(shape), len(shape) - 1))
    feeds = {}
    for i, e in enumerate(extents):
        s = list(shape)
        s[axis] = e
        feeds[f"x{i}"] = random_bits(s, dtype, seed=i)
    same_bits(model("Concat", feeds, axis=axis), feeds)


# ---- Slice

_SLICES = [  # (shape, starts, ends, axes, steps)
    ((10,), [2], [7], None, None), ((10,), [-3], [-1], None, None), ((10,), [-100], [100], None, None),
    ((10,), [0], [I64_MAX], None, None), ((10,), [8], [2], None, [-1]), ((10,), [-1], [I64_MIN], None, [-1]),
    ((10,), [-1], [-100], None, [-3]), ((10,), [-100], [-100], None, [-1]), ((10,), [100], [-100], None, [-2]),
    ((10,), [20], [30], None, None), ((10,), [0], [10], None, [I64_MAX]), ((10,), [9], [-11], None, [I64_MIN]),
    ((10,), [5], [5], None, None), ((10,), [0], [10], None, [3]), ((0,), [0], [5], None, None),
    ((0,), [-1], [-5], None, [-1]), ((4, 5, 6), [1, -4], [3, 1000], [2, 0], None),
    ((4, 5, 6), [0, 1], [-1, 4], [-1, -2], [2, 1]), ((4, 5, 6), [3, 4, 5], [0, 0, 0], None, [-1, -2, -3]),
    ((4, 5, 6), [1], [3], [1], [1]), ((1, 8, 16, 4), [0], [7], [2], None), ((1, 8, 16, 4), [I64_MIN], [-1], [-2], None),
    ((2, 3, 2, 3, 2, 3), [1, 0, 2], [2, -1, 0], [0, -1, 4], [1, 1, -1]),
]


@pytest.mark.parametrize("index_type", [np.int64, np.int32])
@pytest.mark.parametrize("case", _SLICES, ids=[str(i) for i in range(len(_SLICES))])
def test_slice_corners_match_numpy_and_onnxruntime(library, case, index_type):
    shape, starts, ends, axes, steps = case
    if index_type == np.int32:
        clip = np.iinfo(np.int32)
        starts, ends, steps = ([int(np.clip(v, clip.min, clip.max)) for v in vs] if vs is not None else None
                               for vs in (starts, ends, steps))
    x = random_bits(shape, np.float32, seed=3)
    consts = {"starts": np.array(starts, index_type), "ends": np.array(ends, index_type),
              "axes": None if axes is None else np.array(axes, index_type),
              "steps": None if steps is None else np.array(steps, index_type)}
    got = same_bits(model("Slice", {"x": x}, consts), {"x": x})
    want = onnxruntime_output(model("Slice", {"x": x}, consts), {"x": x})
    assert got.shape == want.shape and got.tobytes() == want.tobytes()


@pytest.mark.parametrize("dtype", DTYPES)
def test_slice_element_types(library, dtype):
    x = random_bits((3, 4, 5), dtype, seed=1)
    consts = {"starts": np.array([-1, 1], np.int64), "ends": np.array([0, 5], np.int64),
              "axes": np.array([0, 2], np.int64), "steps": np.array([-1, 2], np.int64)}
    same_bits(model("Slice", {"x": x}, consts), {"x": x})


@pytest.mark.parametrize("consts,match", [
    ({"starts": [0], "ends": [1], "axes": [2]}, r"axes\[0\] = 2 is outside \[-2, 1\]"),
    ({"starts": [0], "ends": [1], "axes": [0], "steps": [0]}, r"steps\[0\] is 0"),
    ({"starts": [0, 0], "ends": [1], "axes": None}, r"starts has 2 values, ends 1"),
])
def test_slice_refusals(library, consts, match):
    x = random_bits((3, 4), np.float32)
    c_error(model("Slice", {"x": x}, {k: None if v is None else np.array(v, np.int64) for k, v in consts.items()}),
            {"x": x}, "Slice node 'n': " + match)


@HYPOTHESIS
@given(shape=st.lists(st.integers(0, 6), min_size=1, max_size=6), dtype=st.sampled_from(DTYPES), choice=st.data())
def test_hypothesis_slice(library, shape, dtype, choice):
    r = len(shape)
    axes = choice.draw(st.lists(st.integers(-r, r - 1), min_size=1, max_size=r,
                                unique_by=lambda a: a % r))
    bound = st.one_of(st.integers(-9, 9), st.sampled_from([I64_MAX, I64_MIN]))
    n = len(axes)
    starts, ends = (choice.draw(st.lists(bound, min_size=n, max_size=n)) for _ in range(2))
    steps = choice.draw(st.lists(st.sampled_from([1, 2, 3, -1, -2, -5, I64_MAX, I64_MIN]), min_size=n, max_size=n))
    omit = choice.draw(st.sampled_from(["none", "steps", "axes"]))
    consts = {"starts": np.array(starts, np.int64), "ends": np.array(ends, np.int64),
              "axes": None if omit == "axes" else np.array(axes, np.int64),
              "steps": None if omit in ("steps", "axes") else np.array(steps, np.int64)}
    if omit == "axes" and n > r:
        return
    x = random_bits(shape, dtype, seed=n)
    same_bits(model("Slice", {"x": x}, consts), {"x": x})


def test_slice_before_opset_10_goes_to_numpy(library):
    x = random_bits((4,), np.float32)
    m = model("Slice", {"x": x}, starts=[1], ends=[3])
    m.opset_import[0].version = 9
    assert language(m) == "numpy"


# ---- Gather


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("index_type", [np.int64, np.int32])
@pytest.mark.parametrize("shape,indices,axis", [
    ((5, 3), [0, 4, -1, -5, 2], 0), ((5, 3), [[2, -1], [0, 0]], 1), ((5, 3), 3, 0), ((5, 3), -1, -1),
    ((4, 2, 3), [[1]], -2), ((7,), [], 0), ((0, 3), [], 0), ((2, 0, 3), [1, 0], 2), ((32000, 4), [17, 31999], 0),
    ((2, 1, 2, 1, 2, 3), [[0, -1, 1]], 5)])
def test_gather(library, dtype, index_type, shape, indices, axis):
    x = random_bits(shape, dtype, seed=2)
    feeds = {"x": x, "i": np.array(indices, index_type)}
    same_bits(model("Gather", feeds, axis=axis), feeds)


@pytest.mark.parametrize("indices,match", [
    ([0, 5], r"index 5 at position \[1\] of the indices is outside the valid range \[-5, 4\] for data axis 0 \(size 5\)"),
    ([[0, 1], [-6, 2]], r"index -6 at position \[1, 0\] of the indices is outside the valid range \[-5, 4\]"),
])
def test_gather_refuses_an_index_out_of_range_as_the_numpy_kernel_does(library, indices, match):
    from ort_cpu_ep.ops._errors import IndexOutOfRangeError

    x = random_bits((5, 2), np.float32)
    feeds = {"x": x, "i": np.array(indices, np.int64)}
    m = model("Gather", feeds, axis=0)
    c_error(m, feeds, "Gather node 'n': " + match)
    with pytest.raises(IndexOutOfRangeError, match="Gather node 'n': " + match):
        run_one_node(m, feeds, "numpy")


@pytest.mark.parametrize("axis", [2, -3])
def test_gather_refuses_an_axis_outside_the_rank(library, axis):
    feeds = {"x": random_bits((5, 2), np.float32), "i": np.array([0], np.int64)}
    c_error(model("Gather", feeds, axis=axis), feeds, rf"Gather node 'n': axis {axis} is outside \[-2, 1\]")


@HYPOTHESIS
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=4), index_shape=st.lists(st.integers(0, 3), max_size=2),
       dtype=st.sampled_from(DTYPES), wide=st.booleans(), choice=st.data())
def test_hypothesis_gather(library, shape, index_shape, dtype, wide, choice):
    axis = choice.draw(st.integers(-len(shape), len(shape) - 1))
    n = shape[axis]
    idx = choice.draw(st.lists(st.integers(-n, n - 1), min_size=int(np.prod(index_shape)),
                               max_size=int(np.prod(index_shape))))
    feeds = {"x": random_bits(shape, dtype, seed=n),
             "i": np.array(idx, np.int64 if wide else np.int32).reshape(index_shape)}
    same_bits(model("Gather", feeds, axis=axis), feeds)


def test_the_decode_layer_ops_are_taken_by_c(library):
    x = random_bits((1, 4, 1, 8), np.float32)
    assert language(model("Transpose", {"x": x}, perm=[0, 2, 1, 3])) == "C"
    assert language(model("Concat", {"x": x, "x2": x}, axis=2)) == "C"
    assert language(model("Gather", {"x": x, "i": np.array([0], np.int64)}, axis=1)) == "C"
    assert language(model("Slice", {"x": x}, {"s": np.array([0]), "e": np.array([1])})) == "C"
    m = model("Transpose", {"x": x})
    m.graph.node[0].attribute.append(helper.make_attribute("perm", [], attr_type=AttributeProto.INTS))
    assert language(m) == "numpy"  # numpy refuses an empty perm itself; C would reverse the axes
