"""The C float32 LayerNormalization and inference BatchNormalization (csrc/affine_norm_kernel.c) against
onnxruntime and the numpy kernel, one node at a time through the CPU provider: every axis, with and without B,
ranks 2..5, thread counts, and which nodes the C kernels take."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_abi
from ort_cpu_ep.testing import chosen_language, one_node_model, onnxruntime_outputs, run_one_node

F = TensorProto.FLOAT


def _layernorm(shape, axis=-1, *, bias=True, seed=0, outputs=("y",), opset=17, **attrs):
    rng = np.random.default_rng(seed)
    norm = shape[axis:] if axis != 0 else shape
    inits = [numpy_helper.from_array(rng.standard_normal(norm).astype(np.float32), "scale")]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(norm).astype(np.float32), "b"))
    node = helper.make_node("LayerNormalization", ["x", "scale"] + (["b"] if bias else []), list(outputs), axis=axis,
                            **attrs)
    model = one_node_model(node, [helper.make_tensor_value_info("x", F, list(shape))],
                           [helper.make_tensor_value_info(o, F, None) for o in outputs], inits)
    model.opset_import[0].version = opset
    return model, {"x": (rng.standard_normal(shape) * 3 + 1).astype(np.float32)}


def _batchnorm(shape, *, seed=0, opset=15, outputs=("y",), **attrs):
    rng = np.random.default_rng(seed)
    c = shape[1]
    arrays = {"scale": rng.standard_normal(c), "b": rng.standard_normal(c), "mean": rng.standard_normal(c),
              "var": rng.uniform(0.1, 3.0, c)}
    inits = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in arrays.items()]
    node = helper.make_node("BatchNormalization", ["x", *arrays], list(outputs), **attrs)
    model = one_node_model(node, [helper.make_tensor_value_info("x", F, list(shape))],
                           [helper.make_tensor_value_info(o, F, None) for o in outputs], inits)
    model.opset_import[0].version = opset
    return model, {"x": rng.standard_normal(shape).astype(np.float32)}




def _check(model, feeds, threads=None):
    got = run_one_node(model, feeds, "C", threads=threads)["y"]
    want = onnxruntime_outputs(model, feeds, optimize=False)[0]
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(got, run_one_node(model, feeds, "numpy")["y"], rtol=2e-5, atol=2e-5)
    return got


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize(("shape", "axis"), [((1, 40, 120), -1), ((2, 3, 4, 5), 2), ((2, 3, 4, 5), -3), ((7, 9), 0),
                                             ((3, 1, 17), -1), ((5, 1), -1), ((2, 3, 64), 1)])
def test_layernorm_matches_onnxruntime_and_numpy(shape, axis, bias):
    model, feeds = _layernorm(shape, axis, bias=bias, epsilon=1e-6)
    _check(model, feeds)


def test_layernorm_of_a_constant_row_is_b():
    model, feeds = _layernorm((2, 8))
    feeds["x"][:] = 4.0
    got = _check(model, feeds)
    b = numpy_helper.to_array(model.graph.initializer[1])
    np.testing.assert_allclose(got, np.broadcast_to(b, got.shape), atol=1e-6)


@pytest.mark.parametrize("shape", [(2, 6), (1, 5, 7), (2, 24, 16, 16), (1, 3, 2, 4, 5)])
@pytest.mark.parametrize("opset", [9, 15])
def test_batchnorm_matches_onnxruntime_and_numpy(shape, opset):
    model, feeds = _batchnorm(shape, opset=opset, epsilon=1e-3)
    _check(model, feeds)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_same_result_at_every_thread_count(threads):
    for model, feeds in (_batchnorm((2, 16, 40, 40)), _layernorm((64, 40, 32))):
        one = run_one_node(model, feeds, "C", threads=1)["y"]
        np.testing.assert_array_equal(_check(model, feeds, threads=threads), one)


def test_nodes_the_c_kernels_take():
    assert chosen_language(_layernorm((2, 8))[0]) == "C"
    assert chosen_language(_layernorm((2, 8), opset=12)[0]) == "C"            # onnxruntime's predates the ONNX op
    assert chosen_language(_layernorm((2, 8), outputs=("y", "mean"))[0]) == "numpy"
    broadcast_scale, _ = _layernorm((2, 3, 8), axis=1)  # a Scale of [8] against the normalized [3, 8]
    broadcast_scale.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.ones(8, np.float32), "scale"))
    assert chosen_language(broadcast_scale) == "numpy"
    assert chosen_language(_batchnorm((1, 4, 3, 3))[0]) == "C"
    assert chosen_language(_batchnorm((1, 4, 3, 3), opset=7)[0]) == "C"
    assert chosen_language(_batchnorm((1, 4, 3, 3), opset=6)[0]) == "numpy"   # consumed_inputs / is_test era
    assert chosen_language(_batchnorm((1, 4, 3, 3), training_mode=1, outputs=("y", "rm", "rv"))[0]) == "numpy"


def test_statistics_of_the_wrong_length_are_an_error():
    model, feeds = _batchnorm((1, 4, 3, 3))
    model.graph.initializer[2].CopyFrom(numpy_helper.from_array(np.zeros(3, np.float32), "mean"))
    with pytest.raises(ort_abi.KernelError, match="input input_mean has 3 values and X 4 channels"):
        run_one_node(model, feeds, "C")
