"""The provider's numpy kernels bind each node's compute once (`OpImpl.bind`): what they read once per node
must stay that node's, match the per-call `compute` exactly, and fail as it does."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper

import ort_abi
import ort_graph
from ort_cpu_ep import CpuExecutionProvider
from ort_cpu_ep.ops import OpImpl, all_ops, find, opset_scope
from ort_cpu_ep.ops._errors import IndexOutOfRangeError
from ort_cpu_ep.ops._util import broadcast_shape, ints, same_start


def _kernels(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
             opset: int, initializers: list[onnx.TensorProto] = ()) -> tuple[CpuExecutionProvider, list]:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    model = ort_graph.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]))
    ep = CpuExecutionProvider(model.graph, model.opset_imports)
    return ep, [(node, ep.create_kernel(node)) for node in model.graph.nodes]


def _run(ep: CpuExecutionProvider, kernel, args: list) -> ort_abi.KernelContext:
    ctx = ort_abi.KernelContext(args, output_count=1)
    with ep.run_scope():
        kernel.compute(ctx)
    return ctx


def _vi(name: str, elem: int = T.FLOAT, shape=None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def test_no_op_binds_above_a_compute_it_would_bypass():
    """A subclass that overrides `compute` below the class whose `bind` it inherits would run the parent's
    bound compute in sessions and its own only in the interpreter."""
    shadowed = []
    for impl in all_ops():
        mro = type(impl).__mro__
        bind_owner = next(c for c in mro if "bind" in c.__dict__)
        compute_owner = next(c for c in mro if "compute" in c.__dict__)
        if bind_owner is not OpImpl and mro.index(compute_owner) < mro.index(bind_owner):
            shadowed.append(f"{type(impl).__name__}: compute of {compute_owner.__name__}, bind of {bind_owner.__name__}")
    assert shadowed == []


def test_two_casts_of_one_impl_keep_their_own_target_type():
    # targets the C Cast leaves to numpy (float16; float to int8 / uint8)
    x = np.array([[1.5, 2.25, 3.0]], np.float32)
    ep, kernels = _kernels([helper.make_node("Cast", ["x"], ["h"], to=T.FLOAT16),
                            helper.make_node("Cast", ["x"], ["i"], to=T.INT8),
                            helper.make_node("Cast", ["x"], ["b"], to=T.UINT8)],
                           [_vi("x", T.FLOAT, [1, 3])], [_vi("h", T.FLOAT16), _vi("i", T.INT8), _vi("b", T.UINT8)], 19)
    assert len({id(k.impl) for _, k in kernels}) == 1  # one OpImpl serves all three nodes
    got = [_run(ep, k, [x]).outputs[0] for _, k in kernels]
    assert [g.dtype for g in got] == [np.float16, np.int8, np.uint8]
    np.testing.assert_array_equal(got[0], x.astype(np.float16))
    np.testing.assert_array_equal(got[1], x.astype(np.int8))
    np.testing.assert_array_equal(got[2], x.astype(np.uint8))


@pytest.mark.parametrize("opset", [11, 13])
def test_reducesum_and_unsqueeze_read_the_axes_their_opset_defines(opset):
    """Opset 11 takes the axes from the attribute, 13 from input 1: the kernel binds the model's opset."""
    axes = helper.make_tensor("axes", T.INT64, [1], [1])
    attrs = {"axes": [1]} if opset == 11 else {}
    ins = ["x"] if opset == 11 else ["x", "axes"]
    ep, kernels = _kernels([helper.make_node("ReduceSum", ins, ["r"], keepdims=0, **attrs),
                            helper.make_node("Unsqueeze", ins, ["u"], **attrs)],
                           [_vi("x", T.FLOAT, [2, 3])], [_vi("r"), _vi("u")], opset, [axes] if opset == 13 else [])
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    args = [x] if opset == 11 else [x, np.array([1], np.int64)]
    (_, reduce_kernel), (_, unsqueeze_kernel) = kernels
    np.testing.assert_array_equal(_run(ep, reduce_kernel, args).outputs[0], x.sum(axis=1))
    assert _run(ep, unsqueeze_kernel, args).outputs[0].shape == (2, 1, 3)


@pytest.mark.parametrize(("op", "attrs", "args"), [
    ("Mul", {}, [np.ones((1, 1, 4), np.float32), np.float32([2])]),
    ("Sub", {}, [np.float32([3]), np.arange(6, dtype=np.float32).reshape(2, 3)]),
    ("Add", {"broadcast": 1, "axis": 0}, [np.ones((2, 3), np.float32), np.float32([1, 2])]),  # legacy (opset 6)
    ("Cast", {"to": T.FLOAT}, [np.float16([0.5, -1])]),
    ("Cast", {"to": T.STRING}, [np.float32([0.5, -1])]),
    ("ReduceSum", {"keepdims": 1}, [np.ones((2, 3), np.float32), np.int64([-1])]),
    ("ReduceSum", {"keepdims": 0, "noop_with_empty_axes": 1}, [np.ones((2, 3), np.float32), np.int64([])]),
    ("ReduceSum", {"keepdims": 0}, [np.arange(24, dtype=np.float32).reshape(2, 3, 4), np.int64([-1, 0])]),
    ("ReduceMean", {"keepdims": 1}, [np.arange(24, dtype=np.float32).reshape(2, 3, 4), np.int64([1])]),
    ("Unsqueeze", {}, [np.arange(4), np.int64([0, -1])]),
    ("Unsqueeze", {}, [np.arange(4), np.int64([2, 0])]),
    ("Unsqueeze", {}, [np.arange(4), np.int64([-4])]),  # -4 + 2 is normalized once more by np.expand_dims
    ("Gather", {"axis": 0}, [np.arange(8), np.int64([-3])]),
    ("Gather", {"axis": 1}, [np.arange(8).reshape(2, 4), np.int64(2)]),
    ("Gather", {"axis": 0}, [np.arange(8), np.int64([1, -1, 0])]),
    ("Concat", {"axis": 0}, [np.arange(2), np.int64([1])]),
    ("Concat", {"axis": -1}, [np.ones((2, 1), np.float32), np.zeros((2, 3), np.float32)]),
    ("Concat", {"axis": 0}, [np.arange(2), np.int32([1])]),  # mixed types: np.concatenate's promotion
])
def test_bound_compute_equals_compute(op, attrs, args):
    opset = 6 if "broadcast" in attrs else 18
    names = [f"i{k}" for k in range(len(args))]
    graph = helper.make_graph([helper.make_node(op, names, ["y"], **attrs)], "g", [_vi(n) for n in names], [_vi("y")])
    node = ort_graph.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])).graph.nodes[0]
    impl = find(op, "", opset)
    with opset_scope({"": opset}):
        expected = impl.compute(node, list(args))
    got = impl.bind(node, opset)(list(args))
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape
        np.testing.assert_array_equal(g, e)


def _error_of(fn):
    with pytest.raises(Exception) as info:
        fn()
    return type(info.value), str(info.value)


@pytest.mark.parametrize(("op", "attrs", "args"), [
    ("Unsqueeze", {}, [np.arange(4), np.int64([3])]),  # axis out of range for the output rank 2
    ("Unsqueeze", {}, [np.arange(4), np.int64([-5])]),
    ("Unsqueeze", {}, [np.arange(4), np.int64([1, 1])]),  # repeated axis
    ("Gather", {"axis": 0}, [np.arange(8), np.int64([8])]),  # one index, out of range
    ("Gather", {"axis": 0}, [np.arange(8), np.int64([[-9]])]),
    ("Gather", {"axis": 0}, [np.arange(8), np.int64([0, 9])]),
    ("Concat", {"axis": 2}, [np.arange(2), np.arange(3)]),  # axis beyond the rank
    ("Concat", {"axis": 2}, [np.arange(2), np.int32([3])]),  # and mixed types
    ("Concat", {"axis": 0}, [np.ones((2, 2)), np.ones((2, 3))]),  # extents that differ off the axis
])
def test_bound_compute_fails_as_compute_does(op, attrs, args):
    names = [f"i{k}" for k in range(len(args))]
    graph = helper.make_graph([helper.make_node(op, names, ["y"], name="n", **attrs)], "g", [_vi(n) for n in names],
                              [_vi("y")])
    node = ort_graph.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])).graph.nodes[0]
    impl = find(op, "", 18)
    with opset_scope({"": 18}):
        expected = _error_of(lambda: impl.compute(node, list(args)))
    assert _error_of(lambda: impl.bind(node, 18)(list(args))) == expected
    if op == "Gather":
        assert expected[0] is IndexOutOfRangeError and "node 'n'" in expected[1]


def test_a_kernel_error_through_the_provider_is_the_ops_own(numpy_kernels_only):
    """(The numpy Gather's: the C one, csrc/move_gather.c, fails with the same message as a KernelError.)"""
    ep, [(_, kernel)] = _kernels([helper.make_node("Gather", ["x", "i"], ["y"], name="g0", axis=0)],
                                 [_vi("x", T.INT64, [8]), _vi("i", T.INT64, [1])], [_vi("y", T.INT64)], 18)
    with pytest.raises(IndexOutOfRangeError, match=r"Gather node 'g0': index 8 at position \[0\] .* \[-8, 7\]"):
        _run(ep, kernel, [np.arange(8), np.int64([8])])


@pytest.mark.parametrize(("a", "b"), [
    ((1, 1, 2048), (1,)), ((1,), (3, 4)), ((0, 3), (1,)), ((2, 3), (2, 3)), ((), (2,)), ((2,), ()), ((), ()),
    ((1, 3), (2, 1)), ((4, 1, 3), (5, 1)), ((1, 1), (1, 1, 1)), ((2, 1), (1,)), ((1,), (0,)),
])
def test_broadcast_shape_agrees_with_numpy(a, b):
    assert broadcast_shape(a, b) == np.broadcast_shapes(a, b)
    assert broadcast_shape(list(a), list(b)) == np.broadcast_shapes(a, b)  # the general path


@pytest.mark.parametrize(("a", "b"), [((3,), (4,)), ((2, 3), (3, 2)), ((2,), (1, 3))])
def test_broadcast_shape_refuses_what_numpy_refuses(a, b):
    with pytest.raises(ValueError):
        np.broadcast_shapes(a, b)
    with pytest.raises(ValueError, match="do not broadcast"):
        broadcast_shape(a, b)


@pytest.mark.parametrize(("value", "expected"), [
    (np.int64([3, -1]), [3, -1]), (np.uint64([2**63 + 1]), [2**63 + 1]), (np.float32([1.7, -2.5]), [1, -2]),
    (np.array([True, False]), [1, 0]), (np.int32(4), [4]), ([5, 6], [5, 6]), (None, None),
])
def test_ints_gives_python_ints(value, expected):
    got = ints(value)
    assert got == expected
    assert got is None or all(type(v) is int for v in got)


def test_same_start_compares_addresses_not_overlap():
    a = np.arange(12, dtype=np.float32)
    assert same_start(a, a.reshape(3, 4))
    assert same_start(a[:4], a)
    assert not same_start(a[1:], a)  # overlapping, other start
    assert not same_start(a.view(np.uint8)[1:5].view(np.float32), a)  # a byte in: overlaps a[0] and a[1]
    assert not same_start(a, a.copy())
    grid = a.reshape(3, 4)
    assert same_start(grid.T, grid) and same_start(grid[:, ::2], a)  # not C-contiguous
    assert not same_start(grid[:, 1:], grid) and not same_start(grid[::-1], grid)


@pytest.mark.parametrize(("op", "args", "expected"), [
    ("Mul", [np.float32([3e38, 1]), np.float32([10])], np.float32([np.inf, 10])),
    ("Div", [np.float32([1, 0]), np.float32([0])], np.float32([np.inf, np.nan])),
    ("ReduceSum", [np.float32([[3e38, 3e38]]), np.int64([1])], np.float32([[np.inf]])),
    ("ReduceMean", [np.float32([[1, 2, 6]]), np.int64([1])], np.float32([[3]])),
])
def test_floating_point_errors_are_ignored_inside_the_op_only(op, args, expected):
    names = [f"i{k}" for k in range(len(args))]
    ep, [(_, kernel)] = _kernels([helper.make_node(op, names, ["y"])], [_vi(n) for n in names], [_vi("y")], 18)
    before = np.geterr()
    with np.errstate(all="raise"):  # an overflow the op did not ignore would raise FloatingPointError
        got = _run(ep, kernel, list(args)).outputs[0]
        assert np.geterr() == {k: "raise" for k in before}
    assert np.geterr() == before
    np.testing.assert_array_equal(got, expected)
