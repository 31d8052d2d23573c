"""The C float32 Add / Sub / Mul / Div / Neg (ort-cpu-ep's arith_kernel.c) inside sessions: every step of an
elementwise chain is a C step of the step runner, in every layout that plans (the chain's values written over
each other in place), with the bits of the same operations in numpy and of the numpy kernels."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from ort_cpu_ep import _c_rules as c_rules
from ort_cpu_ep import c_kernels
from ort_session import PRE_ALLOCATE, InferenceSession

pytestmark = pytest.mark.skipif(c_kernels.c_registry() is None, reason="the ort-cpu-ep C kernels are not built")

SHAPE = [2, 3, 40]
MODES = {"traced pattern": {}, "pre-allocated": {PRE_ALLOCATE: "1"}}
# (op, constant operand shape or None for Neg, the constant on the left)
CHAIN = [("Mul", [40], False), ("Add", [], False), ("Sub", [3, 1], True), ("Div", [2, 1, 40], False),
         ("Neg", None, False), ("Mul", [1, 1, 1], True), ("Add", [2, 3, 40], False), ("Div", [], True)]
UFUNCS = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}


def _chain(repeat: int):
    rng = np.random.default_rng(0)
    nodes, inits, steps, prev = [], [], [], "x"
    for i, (op, cshape, left) in enumerate(CHAIN * repeat):
        out = "y" if i == len(CHAIN) * repeat - 1 else f"t{i}"
        if cshape is None:
            nodes.append(helper.make_node(op, [prev], [out]))
            steps.append((op, None, left))
        else:
            c = np.array(rng.uniform(0.5, 1.5, cshape), np.float32)
            inits.append(numpy_helper.from_array(c, f"c{i}"))
            nodes.append(helper.make_node(op, [f"c{i}", prev] if left else [prev, f"c{i}"], [out]))
            steps.append((op, c, left))
        prev = out
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, SHAPE)], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    return model.SerializeToString(), steps


def _numpy(steps, x):
    y = x
    for op, c, left in steps:
        y = np.negative(y) if c is None else UFUNCS[op](c, y) if left else UFUNCS[op](y, c)
    return y


def _session(model, options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return InferenceSession(model, {"intra_op_num_threads": 1, **options}, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("mode", list(MODES))
def test_an_elementwise_chain_runs_as_c_steps_with_the_bits_of_numpy(monkeypatch, mode):
    model, steps = _chain(3)
    x = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)
    want = _numpy(steps, x)
    sess = _session(model, MODES[mode])
    for _ in range(3):  # a traced pattern is recorded by the first run
        got = sess.run(None, {"x": x})[0]
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    assert sess.last_run_stats.c_steps == len(steps) == sess.last_run_stats.nodes_run
    monkeypatch.setattr(c_rules, "_c_arith_applies", lambda node: False)  # the numpy kernels instead
    numpy_sess = _session(model, MODES[mode])
    got = numpy_sess.run(None, {"x": x})[0]
    assert numpy_sess.last_run_stats.c_steps == 0
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
