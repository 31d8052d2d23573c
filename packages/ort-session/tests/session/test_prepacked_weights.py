"""Constant weights pre-packed at initialization (ABI v5, ort-cpu-ep's float32 MatMul): the packed bytes are the
node's weights in the plan, before the budget check (a budget they do not fit is refused before anything is
allocated); runs give the same bits as packing per call; an initializer a feed may replace is not packed. (A kernel
whose pre-packing fails: tests/integration/test_prepack_failure.py.)"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from ort_cpu_ep.testing import CLibraryUnavailable, require_c_library
from ort_session import InferenceSession, PlanOverBudgetError

F = TensorProto.FLOAT
M, K, N = 64, 300, 77


@pytest.fixture(autouse=True)
def c_built():
    """The C kernel library, built in place if missing: skipped only where no C compiler can build it."""
    try:
        require_c_library()
    except CLibraryUnavailable as e:
        pytest.skip(str(e))


def _model(b, *, b_is_input=False, ir=10, op="MatMul"):
    inputs = [helper.make_tensor_value_info("a", F, [M, K])]
    if b_is_input:  # an initializer that is also a graph input: a feed may replace it
        inputs.append(helper.make_tensor_value_info("b", F, list(b.shape)))
    graph = helper.make_graph([helper.make_node(op, ["a", "b"], ["y"], name="mm")], "g", inputs,
                              [helper.make_tensor_value_info("y", F, [M, N])], [numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=ir).SerializeToString()


def _session(model, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return InferenceSession(model, {"intra_op_num_threads": 2, **options}, providers=["CPUExecutionProvider"])


def _packed_bytes():
    """The whole B in the micro-kernel's panels: K rows of N rounded up to a panel (8, 16 or 64 columns)."""
    got = _session(_model(_b())).memory.prepacked["cpu"]
    # the panel width follows the machine's vector ISA (N = 77 pads to 80 in 8- and 16-wide panels alike)
    assert got in {K * ((N + w - 1) // w * w) * 4 for w in (8, 16, 64)}, got
    return got


def _b():
    return np.random.default_rng(0).standard_normal((K, N)).astype(np.float32)


def test_packed_bytes_are_the_nodes_weights_and_runs_match_packing_per_call():
    b = _b()
    a = np.random.default_rng(1).standard_normal((M, K)).astype(np.float32)
    packed = _session(_model(b))
    cpu = packed.plan.to_dict()["devices"]["cpu"]
    assert cpu["prepacked_weights"] == _packed_bytes()
    assert cpu["weights"] == b.nbytes + cpu["prepacked_weights"]  # the initializer stays resident: both counted
    fed = _session(_model(b, b_is_input=True))  # B may be fed: not constant, packed per call
    assert "prepacked_weights" not in fed.plan.to_dict()["devices"]["cpu"]
    assert fed.plan.to_dict()["devices"]["cpu"]["weights"] == b.nbytes
    got = packed.run(None, {"a": a})[0]
    np.testing.assert_array_equal(got, fed.run(None, {"a": a})[0])
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-4)


def test_a_budget_the_packed_weights_do_not_fit_is_refused_before_anything_is_allocated():
    b = _b()
    sess = _session(_model(b))
    total = sess.plan.to_dict()["devices"]["cpu"]["total"]
    _session(_model(b), budgets=f"cpu:{total}")  # exactly what the plan needs: accepted
    with pytest.raises(PlanOverBudgetError, match=r"cpu: weights \d+ \+ planned peak"):
        _session(_model(b), budgets=f"cpu:{total - _packed_bytes() // 2}")  # fits only without the packed copy


@pytest.mark.parametrize("op", ["MatMul", "Gemm"])
def test_an_ir3_weight_listed_as_an_input_is_a_constant_and_is_packed(op):
    """Before IR 4 every initializer is listed in graph.input and none may be fed (as onnxruntime): packed."""
    b = _b()
    a = np.random.default_rng(1).standard_normal((M, K)).astype(np.float32)
    ir3 = _session(_model(b, b_is_input=True, ir=3, op=op))
    constant = _session(_model(b, op=op))
    assert constant.memory.prepacked["cpu"] > 0
    assert ir3.memory.prepacked["cpu"] == constant.memory.prepacked["cpu"]
    assert "prepacked_weights" not in _session(_model(b, b_is_input=True, op=op)).plan.to_dict()["devices"]["cpu"]
    np.testing.assert_array_equal(ir3.run(None, {"a": a})[0], constant.run(None, {"a": a})[0])
