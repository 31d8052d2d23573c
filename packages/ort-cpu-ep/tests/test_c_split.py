"""The C Split (csrc/move_split.c) against the numpy kernel, bitwise, and onnxruntime: the sizes as an input, an
equal split, opset 18's num_outputs with a smaller last part, negative axes, empty parts, every element type the
data-movement kernels take; typed errors for sizes onnxruntime refuses too."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import ort_abi
from ort_cpu_ep.testing import one_node_model, random_bits, run_one_node, same_bits_as_numpy


def split_model(x, parts, sizes=None, opset=22, **attrs):
    names = ["x"] + (["split"] if sizes is not None else [])
    inits = [numpy_helper.from_array(np.array(sizes, np.int64), "split")] if sizes is not None else []
    elem = helper.np_dtype_to_tensor_dtype(x.dtype)
    m = one_node_model(helper.make_node("Split", names, [f"y{i}" for i in range(parts)], name="n", **attrs),
                       [helper.make_tensor_value_info("x", elem, list(x.shape))],
                       [helper.make_tensor_value_info(f"y{i}", elem, None) for i in range(parts)], inits)
    m.opset_import[0].version = opset
    return m


def onnxruntime_outputs(m, feeds):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_, np.float16, np.uint8, np.float64])
@pytest.mark.parametrize(("shape", "parts", "sizes", "axis"), [
    ((1, 258, 4), 2, None, 1),          # the STFT's real / imaginary halves
    ((2, 6, 3), 3, [1, 0, 5], 1),        # an empty part
    ((5, 4), 2, [3, 2], 0),
    ((2, 3, 4), 2, [1, 3], -1),
    ((7,), 1, None, 0),
    ((2, 0, 3), 2, [0, 0], 1),
])
def test_split_matches_numpy_bitwise(library, dtype, shape, parts, sizes, axis):
    x = random_bits(shape, dtype)
    got = same_bits_as_numpy(split_model(x, parts, sizes, axis=axis), {"x": x})
    assert len(got) == parts


@pytest.mark.parametrize(("dim", "parts"), [(7, 3), (6, 3), (5, 2)])
def test_num_outputs_gives_a_smaller_last_part_as_onnxruntime(library, dim, parts):
    x = np.arange(dim * 2, dtype=np.float32).reshape(dim, 2)
    m = split_model(x, parts, opset=18, axis=0, num_outputs=parts)
    got = run_one_node(m, {"x": x}, "C")
    for i, want in enumerate(onnxruntime_outputs(m, {"x": x})):
        np.testing.assert_array_equal(got[f"y{i}"], want)


@pytest.mark.parametrize(("shape", "parts", "sizes", "attrs", "match"), [
    ((4, 3), 2, [3, 2], {}, r"split sums to 5, the axis has 4"),
    ((4, 3), 2, [5, -1], {}, r"split\[1\] = -1 is negative"),
    ((4, 3), 2, [4], {}, r"split has 1 sizes for 2 outputs"),
    ((5, 3), 2, None, {}, r"an axis of 5 does not split evenly into 2 outputs"),
    ((4, 3), 2, None, {"axis": 2}, r"axis 2 is outside \[-2, 1\]"),
])
def test_split_refusals_name_the_values(library, shape, parts, sizes, attrs, match):
    x = np.zeros(shape, np.float32)
    with pytest.raises(ort_abi.KernelError, match="node 'n'.*" + match) as e:
        run_one_node(split_model(x, parts, sizes, **attrs), {"x": x}, "C")
    assert e.value.code == ort_abi.ErrorCode.INVALID_ARGUMENT
