"""Constant weights pre-packed at initialization (ABI v5, ort-cpu-ep's float32 MatMul): the packed bytes are the
node's weights in the plan, before the budget check (a budget they do not fit is refused before anything is
allocated); runs give the same bits as packing per call; an initializer a feed may replace is not packed. An
initializer every consumer packed, and nothing else reads, is released: not the plan's weights, not held after
packing; one another node or the graph's outputs read stays, counted beside its packed copy. (A kernel whose
pre-packing fails: tests/integration/test_prepack_failure.py.)"""

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


def _model(b, *, b_is_input=False, rows=M, also=None, ir=10, op="MatMul"):
    """a @ b; `also`: "add" (a second node, Add, reads b), "output" (b is a graph output too), "twice" (two MatMuls)."""
    inputs = [helper.make_tensor_value_info("a", F, [rows, K])]
    if b_is_input:  # an initializer that is also a graph input: a feed may replace it
        inputs.append(helper.make_tensor_value_info("b", F, list(b.shape)))
    nodes = [helper.make_node(op, ["a", "b"], ["y"], name="mm")]
    outputs = [helper.make_tensor_value_info("y", F, [rows, N])]
    if also == "add":
        nodes.append(helper.make_node("Add", ["b", "b"], ["b2"], name="add"))
        outputs.append(helper.make_tensor_value_info("b2", F, [K, N]))
    elif also == "output":
        outputs.append(helper.make_tensor_value_info("b", F, [K, N]))
    elif also == "twice":
        nodes.append(helper.make_node("MatMul", ["a", "b"], ["y2"], name="mm2"))
        outputs.append(helper.make_tensor_value_info("y2", F, [rows, N]))
    graph = helper.make_graph(nodes, "g", inputs, outputs, [numpy_helper.from_array(b, "b")])
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
    assert cpu["weights"] == cpu["prepacked_weights"]  # the only consumer reads the panels: B is not held
    assert cpu["released_weights"] == b.nbytes
    assert packed.memory.dropped == {"b"}
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


@pytest.mark.parametrize("also", ["add", "output"])
def test_an_initializer_something_else_reads_stays_and_is_counted_beside_its_packed_copy(also):
    b = _b()
    a = np.random.default_rng(1).standard_normal((M, K)).astype(np.float32)
    sess = _session(_model(b, also=also))
    cpu = sess.plan.to_dict()["devices"]["cpu"]
    assert cpu["weights"] == b.nbytes + cpu["prepacked_weights"] and "released_weights" not in cpu
    assert not sess.memory.dropped
    got = sess.run(None, {"a": a})
    np.testing.assert_allclose(got[0], a.astype(np.float64) @ b, rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(got[1], b + b if also == "add" else b)


@pytest.mark.parametrize("rows", [M, 3, 1])
def test_two_packed_consumers_release_it_and_every_row_count_reads_the_panels_alone(rows):
    """Rows unknown at planning (a symbolic extent): B is packed, then a run of 1 or 3 rows (which would stream the
    original) reads the panels; the results are packing per call's (B fed: nothing packed, nothing released)."""
    b = _b()
    a = np.random.default_rng(2).standard_normal((rows, K)).astype(np.float32)
    sess = _session(_model(b, rows="m", also="twice"))
    cpu = sess.plan.to_dict()["devices"]["cpu"]
    assert cpu["weights"] == cpu["prepacked_weights"] == 2 * _packed_bytes()
    assert sess.memory.dropped == {"b"} and sess.model.graph.initializers["b"]._array is None
    fed = _session(_model(b, b_is_input=True, rows="m", also="twice"))
    assert not fed.memory.dropped
    got, ref = sess.run(None, {"a": a}), fed.run(None, {"a": a})
    np.testing.assert_allclose(got[0], a.astype(np.float64) @ b, rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(got[0], got[1])
    if rows == M:  # the packed path either way: the same bits
        np.testing.assert_array_equal(got[0], ref[0])


@pytest.mark.parametrize("also", [None, "add"])
def test_what_a_session_holds_after_initialization_is_within_the_plans_weights(also):
    """Measured (tracemalloc traces numpy's buffers): the arrays a session keeps once made, against the plan's weights:
    released, B's 4 MiB are not held beside its packed copy; kept (another node reads it), both are, and counted."""
    import gc
    import tracemalloc

    global K, N
    saved = K, N
    K, N = 1024, 1024
    try:
        b = _b()
        model = _model(b, also=also)
        del b
        _session(model).run(None, {"a": np.zeros((M, K), np.float32)})  # first use: the library's caches, imports
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            sess = _session(model)
            gc.collect()
            held = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        weights = sess.plan.to_dict()["devices"]["cpu"]["weights"]
        assert weights == (2 if also else 1) * K * N * 4
        assert weights <= held <= weights + (1 << 20), (held, weights)  # + the session's own objects
    finally:
        K, N = saved


def test_a_com_microsoft_fused_matmul_behind_its_type_check_releases_its_b():
    """FusedMatMul's C kernel runs behind the type-checking wrapper of schema-less ops: the flag is its kernel's, and
    the released B (no value at run time) passes the type check."""
    rng = np.random.default_rng(4)
    bt, a = rng.standard_normal((N, K)).astype(np.float32), rng.standard_normal((M, K)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain="com.microsoft", transB=1,
                                                alpha=0.5, name="fmm")], "g",
                              [helper.make_tensor_value_info("a", F, ["m", K])],
                              [helper.make_tensor_value_info("y", F, ["m", N])], [numpy_helper.from_array(bt, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)]).SerializeToString()
    sess = _session(model)
    assert sess.memory.dropped == {"b"}
    assert sess.plan.to_dict()["devices"]["cpu"]["released_weights"] == bt.nbytes
    for rows in (M, 2):
        np.testing.assert_allclose(sess.run(None, {"a": a[:rows]})[0], 0.5 * (a[:rows].astype(np.float64) @ bt.T),
                                   rtol=1e-5, atol=1e-4)
