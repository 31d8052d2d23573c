"""Conv without a GPU: the implicit-GEMM launch code runs on an EmulatingRuntime (every launch checked
against conv.cu's signature and executed in numpy as the kernel computes, every read and write
bounds-checked) and is compared with onnxruntime's CPU Conv on the same inputs; plus claims, declines
and the (zero) workspace recipe shared by Level 1, Level 2 and the runtime."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from ort_abi import tensor_from_host, tensor_to_host
from ort_cuda_ep import _launch_conv, get_profile
from ort_cuda_ep._launch import ScratchOnly, compute
from ort_cuda_ep._ops import NodeFacts, check_node, find_spec
from ort_cuda_ep._workspace import estimate_bytes, workspace_bytes
from ort_cuda_ep.testing import EmulatingRuntime

F32, F16, BF16 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16
PROFILE = get_profile("a100")


def onnxruntime_conv(x, w, b, attrs):
    names = ["x", "w"] + (["b"] if b is not None else [])
    node = helper.make_node("Conv", names, ["y"], **attrs)
    ins = [helper.make_tensor_value_info(n, F32, a.shape) for n, a in zip(names, (x, w, b))]
    g = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info("y", F32, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, dict(zip(names, (x, w, b))))[0]


def ours(x, w, b, attrs):
    rt = EmulatingRuntime()
    args = [tensor_from_host(rt.allocator, a) for a in (x, w, b) if a is not None]
    ws = ScratchOnly(rt)
    y = compute(rt, find_spec("Conv", "", 17), "conv", args, attrs, ws)[0]
    host = tensor_to_host(y)
    ws.release()
    return host, rt


CASES = [
    ((2, 4, 7, 6), (6, 2, 3, 3), {"group": 2, "pads": [1, 0, 2, 1], "strides": [2, 1], "dilations": [1, 2]}, True),
    ((1, 8, 20, 20), (70, 8, 3, 3), {"pads": [1, 1, 1, 1]}, True),  # 400 rows x 70 channels: several tiles
    ((1, 6, 9, 9), (6, 1, 3, 3), {"group": 6, "auto_pad": "SAME_UPPER", "strides": [2, 2]}, True),  # depthwise
    ((1, 3, 8, 7), (5, 3, 2, 3), {"auto_pad": "SAME_LOWER"}, False),
    ((2, 3, 6, 6), (4, 3, 3, 3), {"auto_pad": "VALID", "strides": [1, 2]}, False),
    ((1, 4, 5, 5), (8, 4, 1, 1), {}, True),  # pointwise
    ((1, 2, 11, 10), (3, 2, 3, 2), {"dilations": [3, 2], "strides": [2, 3], "pads": [2, 1, 0, 2]}, True),
    ((1, 3, 9), (5, 3, 3), {"auto_pad": "SAME_LOWER", "strides": [2]}, True),  # 1-D
    ((3, 4, 11), (4, 2, 2), {"group": 2, "pads": [0, 3], "dilations": [3]}, False),  # 1-D grouped, dilated
]


@pytest.mark.parametrize("xs,ws,attrs,with_bias", CASES)
def test_conv_matches_onnxruntime(xs, ws, attrs, with_bias):
    rng = np.random.default_rng(sum(xs) + sum(ws))
    x, w = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32) if with_bias else None
    got, rt = ours(x, w, b, attrs)
    np.testing.assert_allclose(got, onnxruntime_conv(x, w, b, attrs), rtol=1e-4, atol=1e-4)
    assert {e for e, *_ in rt.launches} == {"conv2d_f32"}
    assert rt.counters.last["conv"] == ("none", 0)  # implicit GEMM: no workspace at run time either


@pytest.mark.parametrize("dtype,tol", [(np.float16, 2e-2), (ml_dtypes.bfloat16, 1e-1)])
def test_half_storage_matches_onnxruntime_in_float32(dtype, tol):
    rng = np.random.default_rng(3)
    x, w, b = (rng.standard_normal(s).astype(dtype) for s in ((1, 4, 6, 6), (8, 2, 3, 3), (8,)))
    attrs = {"group": 2, "pads": [1, 1, 1, 1]}
    got, rt = ours(x, w, b, attrs)
    want = onnxruntime_conv(*(a.astype(np.float32) for a in (x, w, b)), attrs)
    assert got.dtype == dtype
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=tol, atol=tol)
    assert {e for e, *_ in rt.launches} == {f"conv2d_{'f16' if dtype == np.float16 else 'bf16'}"}


def test_rows_past_one_grid_are_cut_into_launches(monkeypatch):
    """Output pixels past the grid's y extent go to further launches starting at m0 (the emulation asserts
    each grid covers its rows); here a launch holds 128 rows so a 15x15 output needs two."""
    monkeypatch.setattr(_launch_conv, "ROWS_PER_LAUNCH", 128)
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((1, 3, 15, 15)).astype(np.float32), rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    got, rt = ours(x, w, None, {"pads": [1, 1, 1, 1]})
    np.testing.assert_allclose(got, onnxruntime_conv(x, w, None, {"pads": [1, 1, 1, 1]}), rtol=1e-4, atol=1e-4)
    assert [v[19] for e, _g, _b, v in rt.launches] == [0, 128]  # m0 of each launch


def test_an_empty_batch_launches_nothing():
    got, rt = ours(np.zeros((0, 3, 5, 5), np.float32), np.ones((2, 3, 3, 3), np.float32), None, {})
    assert got.shape == (0, 2, 3, 3) and rt.launches == []


def _facts(shapes, dtypes=(F32, F32, F32), attrs=None):
    names = tuple(f"i{i}" for i in range(len(shapes)))
    return NodeFacts("conv", "Conv", "", names, tuple(dtypes[:len(shapes)]), tuple(shapes), attrs or {}, ("y",))


def test_claims():
    for shapes, attrs in [([("N", 3, "H", "W"), (8, 3, 3, 3), (8,)], {"pads": [1, 1, 1, 1]}),
                          ([(1, 8, 32, 32), (8, 1, 3, 3)], {"group": 8, "auto_pad": b"SAME_UPPER"}),
                          ([("N", 4, "L"), (6, 2, 5)], {"group": 2, "strides": [2], "dilations": [2]})]:
        assert check_node(_facts(shapes, attrs=attrs), 17)[1] is None


@pytest.mark.parametrize("shapes,dtypes,attrs,aspect,needle", [
    ([(1, 3, 4, 8, 8), (4, 3, 3, 3, 3)], (F32, F32), {}, "shape", "3-D convolution"),
    ([(1, 3, 8, 8), (4, 3, 3, 3)], (F32, F16), {}, "dtype", "mix"),
    ([(1, 3, 8, 8), (4, 3, 3, 3)], (TensorProto.INT8, TensorProto.INT8), {}, "dtype", "INT8"),
    ([(1, 4, 8, 8), (6, 3, 3, 3)], (F32, F32), {"group": 2}, "shape", "group=2"),
    ([(1, 3, 8, 8), (4, 3, 3, 3)], (F32, F32), {"kernel_shape": [5, 5]}, "attribute", "kernel_shape"),
    ([(1, 3, 8, 8), (4, 3, 3, 3)], (F32, F32), {"auto_pad": "SAME"}, "attribute", "auto_pad"),
    ([(1, 3, 8, 8), (4, 3, 3, 3)], (F32, F32), {"strides": [0, 1]}, "attribute", "strides"),
    ([(1, 3, 8, 8), (4, 3, 3, 3)], (F32, F32), {"pads": [1, 1]}, "attribute", "pads"),
    ([(1, 3, 2, 2), (4, 3, 3, 3)], (F32, F32), {}, "shape", "input extent 2"),
    ([(1, 3, 8, 8), (4, 3, 3, 3), (5,)], (F32, F32, F32), {}, "shape", "bias"),
    ([(1, 3, 8, 8), (4, 3, 3)], (F32, F32), {}, "shape", "W"),
])
def test_declines_name_what_and_why(shapes, dtypes, attrs, aspect, needle):
    r = check_node(_facts(shapes, dtypes, attrs), 17)[1]
    assert r is not None and r.aspect == aspect and needle in r.detail, r


def test_the_workspace_recipe_is_zero_and_validates_the_geometry():
    shapes, types = [(1, 3, 8, 8), (4, 3, 3, 3)], [F32, F32]
    assert workspace_bytes("conv", shapes, types, {}, PROFILE) == 0
    assert estimate_bytes("conv", [("N", 3, "H", "W"), (4, 3, 3, 3)], types, {}, PROFILE,
                          {"N": (1, 8), "H": (3, 512), "W": (3, 512)}) == 0
    assert workspace_bytes("conv", [(1, 3, 2, 2), (4, 3, 3, 3)], types, {}, PROFILE) is None  # no output pixel
    assert estimate_bytes("conv", [("N", 3, "H", "W"), (4, 3, 3, 3)], types, {}, PROFILE, {}) is None  # unknown
