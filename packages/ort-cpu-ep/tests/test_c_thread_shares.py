"""The threaded elementwise C kernels split n elements into shares that cover all of them: sizes of count x 2^k + 1
(where each share's base is a multiple of its block and one element is left over) at 2 and 3 threads. The shares
once came from n // count rounded up to the block, which left the last element of such sizes uncomputed (Tanh,
Relu and kin since their threading; Add and Cast as they were threaded): `cpu_kernels_share`."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper

from ort_cpu_ep.testing import one_node_model, run_one_node

MS = "com.microsoft"
# op -> (inputs, attributes, domain, element type in, numpy of x)
CASES = {
    "Tanh": (1, {}, "", T.FLOAT, np.tanh),
    "Exp": (1, {}, "", T.FLOAT, np.exp),
    "Sqrt": (1, {}, "", T.FLOAT, np.sqrt),
    "Relu": (1, {}, "", T.FLOAT, lambda x: np.maximum(x, 0)),
    "Sigmoid": (1, {}, "", T.FLOAT, lambda x: 1 / (1 + np.exp(-x))),
    "HardSwish": (1, {}, "", T.FLOAT, lambda x: x * np.clip(x / 6 + 0.5, 0, 1)),
    "QuickGelu": (1, {"alpha": 1.0}, MS, T.FLOAT, lambda x: x / (1 + np.exp(-x))),
    "Add": (2, {}, "", T.FLOAT, lambda x: x + x),
    "Mul": (2, {}, "", T.FLOAT, lambda x: x * x),
    "Neg": (1, {}, "", T.FLOAT, np.negative),
    "Cast": (1, {"to": T.FLOAT}, "", T.INT32, lambda x: x.astype(np.float32)),
}


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("block", [1 << 15, 1 << 16])
@pytest.mark.parametrize("op", list(CASES))
def test_every_element_is_computed_at_any_thread_count(op, block, threads):
    inputs, attrs, domain, dtype, ref = CASES[op]
    n = threads * block + 1
    node = helper.make_node(op, ["x"] * inputs, ["y"], domain=domain, **attrs)
    out = T.FLOAT
    model = one_node_model(node, [helper.make_tensor_value_info("x", dtype, [n])], [helper.make_tensor_value_info("y", out, [n])])
    if domain:
        model.opset_import.append(helper.make_opsetid(domain, 1))
    x = (np.arange(n) % 13 + 1).astype(np.int32 if dtype == T.INT32 else np.float32) / (1 if dtype == T.INT32 else 4)
    x = x.astype(np.int32 if dtype == T.INT32 else np.float32)
    got = run_one_node(model, {"x": x}, "C", threads=threads)["y"]
    np.testing.assert_allclose(got, ref(x), rtol=1e-5)
