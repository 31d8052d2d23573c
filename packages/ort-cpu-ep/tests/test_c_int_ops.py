"""The C integer kernels a decoder's attention-mask and shape subgraphs run: int64 / int32 Add, Sub, Mul
(csrc/arith_kernel.c), Cast from int64 / int32 and Shape (csrc/move_shape.c), int64 / int32 ReduceSum
(csrc/arith_reduce.c), one node at a time through the CPU provider against onnxruntime (values, wrap-around,
broadcasting, start / end, axes, keepdims, noop_with_empty_axes, empty tensors), their errors, and which nodes
the C kernels take."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx import numpy_helper as nh

import ort_abi
import ort_graph
from ort_cpu_ep import CpuExecutionProvider, c_kernels
from ort_cpu_ep.testing import one_node_model, run_one_node

I64, I32, F = TensorProto.INT64, TensorProto.INT32, TensorProto.FLOAT
NP = {I64: np.int64, I32: np.int32, F: np.float32}


def _ort(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _language(model) -> str:
    m = ort_graph.from_proto(model)
    ep = CpuExecutionProvider(m.graph, m.opset_imports)
    return c_kernels.kernel_language(ep.entry(m.graph.nodes[0]))


def _same_as_ort(model, feeds):
    got = run_one_node(model, feeds, "C")
    (want,) = _ort(model, feeds)
    (name,) = got
    assert got[name].dtype == want.dtype and got[name].shape == want.shape
    np.testing.assert_array_equal(got[name], want)
    return got[name]


def _ints(shape, dtype, seed, extremes=True):
    """Values across the type's range, extremes included unless not `extremes` (sums and products wrap around)."""
    rng = np.random.default_rng(seed)
    info = np.iinfo(NP[dtype])
    x = rng.integers(-1000, 1000, shape, dtype=NP[dtype], endpoint=True)
    if extremes:
        flat = x.reshape(-1)
        flat[::5] = rng.choice(np.array([info.min, info.max, 0, -1, 1], NP[dtype]), flat[::5].shape)
    return x


@pytest.mark.parametrize("dtype", [I64, I32])
@pytest.mark.parametrize("op", ["Add", "Sub", "Mul"])
@pytest.mark.parametrize(("a_shape", "b_shape"), [((4, 37), (4, 37)), ((), (3, 5)), ((2, 1, 6), (6,)), ((1,), (1,)),
                                                    ((3, 1), (1, 4)), ((0, 3), (3,))])
def test_integer_arithmetic_matches_onnxruntime(library, dtype, op, a_shape, b_shape):
    out = list(np.broadcast_shapes(a_shape, b_shape))
    model = one_node_model(helper.make_node(op, ["a", "b"], ["y"]),
                           [helper.make_tensor_value_info("a", dtype, list(a_shape)),
                            helper.make_tensor_value_info("b", dtype, list(b_shape))],
                           [helper.make_tensor_value_info("y", dtype, out)])
    assert _language(model) == "C"
    _same_as_ort(model, {"a": _ints(a_shape, dtype, 1), "b": _ints(b_shape, dtype, 2)})


def test_mixed_integer_types_go_to_numpy(library):
    """int64 with int32 is no ONNX Add (one type T): the C kernel is not picked (the model is invalid)."""
    model = one_node_model(helper.make_node("Add", ["a", "b"], ["y"]),
                           [helper.make_tensor_value_info("a", I64, [2]), helper.make_tensor_value_info("b", I32, [2])],
                           [helper.make_tensor_value_info("y", I64, [2])])
    assert _language(model) == "numpy"


def test_an_int64_kernel_given_int32_says_what_it_got(library):
    model = one_node_model(helper.make_node("Sub", ["a", "b"], ["y"]),
                           [helper.make_tensor_value_info("a", I64, [2]), helper.make_tensor_value_info("b", I64, [2])],
                           [helper.make_tensor_value_info("y", I64, [2])])
    feeds = {"a": np.ones(2, np.int64), "b": np.ones(2, np.int32)}
    with pytest.raises(ort_abi.KernelError, match=r"Sub: inputs 0 and 1 have different element types \(int64 and int32\)"):
        run_one_node(model, feeds, "C")


@pytest.mark.parametrize(("src", "to"), [(I64, I32), (I32, I64), (I64, F), (I32, F), (I64, I64), (I32, I32)])
@pytest.mark.parametrize("shape", [(1,), (3, 7), (), (0, 2)])
def test_integer_cast_matches_onnxruntime(library, src, to, shape):
    model = one_node_model(helper.make_node("Cast", ["x"], ["y"], to=to), [helper.make_tensor_value_info("x", src, list(shape))],
                           [helper.make_tensor_value_info("y", to, list(shape))])
    assert _language(model) == "C"
    x = _ints(shape, src, 3)
    if x.size and src == I64:
        x.reshape(-1)[0] = 2**40 + 12345  # narrowed: the low bits; to float32: rounded to nearest
    _same_as_ort(model, {"x": x})


@pytest.mark.parametrize(("src", "to", "language"), [
    (F, I64, "C"), (TensorProto.BOOL, I64, "C"), (I64, TensorProto.BOOL, "C"), (TensorProto.DOUBLE, F, "C"),  # cast_kernel.c
    (I64, TensorProto.FLOAT16, "numpy"), (F, TensorProto.UINT8, "numpy")])
def test_which_casts_are_c(library, src, to, language):
    model = one_node_model(helper.make_node("Cast", ["x"], ["y"], to=to), [helper.make_tensor_value_info("x", src, [2])],
                           [helper.make_tensor_value_info("y", to, [2])])
    assert _language(model) == language


@pytest.mark.parametrize(("dtype", "shape"), [(F, (2, 3, 4)), (I64, (1, 513)), (TensorProto.FLOAT16, ()), (I32, (0, 5))])
@pytest.mark.parametrize("bounds", [{}, {"start": 1}, {"end": -1}, {"start": -2, "end": 3}, {"start": 5}, {"start": 2, "end": 1},
                                    {"start": -9, "end": 9}])
def test_shape_matches_onnxruntime(library, dtype, shape, bounds):
    model = one_node_model(helper.make_node("Shape", ["x"], ["y"], **bounds), [helper.make_tensor_value_info("x", dtype, list(shape))],
                           [helper.make_tensor_value_info("y", I64, None)])
    assert _language(model) == "C"
    x = np.zeros(shape, NP.get(dtype, np.float16))
    _same_as_ort(model, {"x": x})


def _reduce(dtype, shape, axes, **attrs):
    inits = [] if axes is None else [nh.from_array(np.array(axes, np.int64), "axes")]
    return one_node_model(helper.make_node("ReduceSum", ["x"] + ([] if axes is None else ["axes"]), ["y"], **attrs),
                          [helper.make_tensor_value_info("x", dtype, list(shape))],
                          [helper.make_tensor_value_info("y", dtype, None)], inits)


@pytest.mark.parametrize("dtype", [I64, I32])
@pytest.mark.parametrize(("shape", "axes"), [((1, 513), [1]), ((1, 513), [-1]), ((3, 4, 5), [0, 2]), ((3, 4, 5), None),
                                             ((3, 4, 5), []), ((2, 0, 3), [1]), ((2, 0, 3), [2]), ((), None), ((6,), [0])])
@pytest.mark.parametrize("attrs", [{}, {"keepdims": 0}, {"noop_with_empty_axes": 1}, {"keepdims": 0, "noop_with_empty_axes": 1}])
def test_integer_reducesum_matches_onnxruntime(library, dtype, shape, axes, attrs):
    model = _reduce(dtype, shape, axes, **attrs)
    assert _language(model) == "C"
    _same_as_ort(model, {"x": _ints(shape, dtype, 4, extremes=False)})


@pytest.mark.parametrize("dtype", [I64, I32])
def test_integer_reducesum_wraps_around_as_numpy(library, dtype):
    """A sum past the type's range wraps (numpy's sum; onnxruntime's overflow is its implementation's)."""
    x = np.array([[np.iinfo(NP[dtype]).max, 7, -3]], NP[dtype])
    got = run_one_node(_reduce(dtype, x.shape, [1]), {"x": x}, "C")["y"]
    np.testing.assert_array_equal(got, x.sum(axis=1, keepdims=True, dtype=NP[dtype]))


@pytest.mark.parametrize(("axes", "why"), [([2], "are out of range"), ([-3], "are out of range"), ([1, -1], "repeat an axis")])
def test_reducesum_refuses_bad_axes_naming_them(library, axes, why):
    model = _reduce(I64, (2, 3), axes)
    with pytest.raises(ort_abi.KernelError, match=rf"ReduceSum node '.*': axes \[{', '.join(map(str, axes))}\] {why} for "
                                                  r"the input of rank 2; give each axis in \[-2, 1\] once"):
        run_one_node(model, {"x": np.ones((2, 3), np.int64)}, "C")


def test_float_reducesum_is_reduce_kernels_and_opset_12_goes_to_numpy(library):
    assert _language(_reduce(F, (2, 3), [1])) == "C"  # csrc/reduce_kernel.c
    model = one_node_model(helper.make_node("ReduceSum", ["x"], ["y"], axes=[1]), [helper.make_tensor_value_info("x", I64, [2, 3])],
                           [helper.make_tensor_value_info("y", I64, None)])
    model.opset_import[0].version = 12  # axes an attribute: the numpy kernel's
    assert _language(model) == "numpy"
