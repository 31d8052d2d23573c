"""A Loop of 100 iterations of Mul, Add and Relu on a [1, 64] loop-carried value (random weights, the trip count a
constant): what a body's per-node cost is, the benchmark's `Loop-100` row. Built with onnx.helper."""

from __future__ import annotations

import numpy as np
from onnx import ModelProto, TensorProto, helper

WIDTH, TRIPS = 64, 100


def _vi(name: str, dtype: int, shape: list) -> object:
    return helper.make_tensor_value_info(name, dtype, shape)


def loop_model(trips: int = TRIPS, width: int = WIDTH, seed: int = 0) -> ModelProto:
    f, b = TensorProto.FLOAT, TensorProto.BOOL
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond"], ["cond_out"], name="body/cond"),
         helper.make_node("Mul", ["v", "w"], ["m"], name="body/mul"),
         helper.make_node("Add", ["m", "bias"], ["a"], name="body/add"),
         helper.make_node("Relu", ["a"], ["v_out"], name="body/relu")],
        "body", [_vi("i", TensorProto.INT64, []), _vi("cond", b, []), _vi("v", f, [1, width])],
        [_vi("cond_out", b, []), _vi("v_out", f, [1, width])])
    rng = np.random.default_rng(seed)
    inits = [helper.make_tensor("M", TensorProto.INT64, [], [trips]), helper.make_tensor("T", b, [], [True]),
             helper.make_tensor("w", f, [1, width], rng.uniform(0.5, 1.0, width).astype(np.float32).tolist()),
             helper.make_tensor("bias", f, [1, width], rng.uniform(-0.1, 0.1, width).astype(np.float32).tolist())]
    g = helper.make_graph([helper.make_node("Loop", ["M", "T", "x"], ["y"], name="loop", body=body)], "loop100",
                          [_vi("x", f, [1, width])], [_vi("y", f, [1, width])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def loop_feeds(width: int = WIDTH, seed: int = 1) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).standard_normal((1, width)).astype(np.float32)}
