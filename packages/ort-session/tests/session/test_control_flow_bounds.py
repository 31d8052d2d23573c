"""RunOptions.terminate inside Loop / Scan / If bodies, scan outputs without a static bound under the memory
promise, and bounded constant folding / absurd dimension overrides at initialization (models built here)."""

import threading
import time
import warnings

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import ort_memplan
from ort_cpu_ep.testing import control_flow_model
from ort_session import (
    InferenceSession,
    InvalidOptionError,
    PlanOverBudgetError,
    RunOptions,
    RunTerminatedError,
    SessionOptions,
    UnplannedAllocationError,
)

X = np.arange(4, dtype=np.float32)
HUGE = np.array(2**40, np.int64)
STOP_WITHIN_S = 5.0  # after terminate is set; a run that ignored it would take years


def _session(model, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return InferenceSession(model.SerializeToString(), **kwargs)


def _options(**entries):
    so = SessionOptions()
    for key, value in entries.items():
        so.add_session_config_entry(key, value)
    return so


def _run_in_thread(fn, limit=30.0):
    """fn()'s result or exception, or a failure when it does not end within `limit` seconds (the daemon thread
    is then abandoned: the test fails in bounded time instead of hanging)."""
    box = {}

    def target():
        try:
            box["result"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            box["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(limit)
    if t.is_alive():
        pytest.fail(f"the run did not end within {limit} s")
    return box


def _feeds(kind, m):
    return {"x": X, "seq": np.ones((m, 4), np.float32)} if kind == "scan" else {"x": X, "M": np.array(m, np.int64)}


def _reference(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


@pytest.mark.parametrize("delay", [0.0, 0.05])
@pytest.mark.parametrize(("kind", "scan"), [("loop", False), ("loop", True), ("loop_in_loop", False),
                                            ("loop_in_if", True), ("empty_body", False), ("scan", False)])
def test_terminate_from_another_thread_stops_a_huge_loop_and_the_next_run_works(kind, scan, delay):
    model = control_flow_model(kind, scan=scan)
    sess = _session(model)
    ro = RunOptions()
    long = _feeds(kind, 500_000) if kind == "scan" else {"x": X, "M": HUGE}
    timer = threading.Timer(delay, lambda: setattr(ro, "terminate", True))
    timer.start()
    started = time.perf_counter()
    box = _run_in_thread(lambda: sess.run(None, long, ro))
    timer.join()
    assert isinstance(box.get("error"), RunTerminatedError), box
    assert time.perf_counter() - started < delay + STOP_WITHIN_S
    if delay:  # set while the Loop ran: stopped inside it, named
        assert "inside node" in str(box["error"]) and "after 0 of" in str(box["error"])
    ro.terminate = False
    small = _feeds(kind, 3)
    for ours, theirs in zip(sess.run(None, small, ro), _reference(model, small), strict=True):
        np.testing.assert_array_equal(ours, theirs)


def test_terminate_stops_a_huge_loop_run_through_iobinding():
    sess = _session(control_flow_model("loop"))
    ro = RunOptions()
    io = sess.io_binding()
    io.bind_cpu_input("x", X)
    io.bind_cpu_input("M", HUGE)
    io.bind_output("y")
    threading.Timer(0.05, lambda: setattr(ro, "terminate", True)).start()
    box = _run_in_thread(lambda: sess.run_with_iobinding(io, ro))
    assert isinstance(box.get("error"), RunTerminatedError), box


def test_a_scan_output_without_static_bound_is_refused_at_initialization_under_a_budget():
    with pytest.raises(InvalidOptionError, match=r"(?s)'scans'.*node 'loop' \(Loop\).*constant trip count"):
        _session(control_flow_model("loop", scan=True), budgets="cpu:1GiB")


def test_a_scan_output_without_static_bound_is_refused_with_pre_allocated_buffers():
    with pytest.raises(InvalidOptionError, match=r"needs static shapes.*'scans'"):
        _session(control_flow_model("loop", scan=True),
                 sess_options=_options(**{"session.pre_allocate_execution_buffers": "1"}))


def test_accepted_knowingly_the_growing_scan_output_is_refused_at_the_budget_before_it_is_exceeded():
    sess = _session(control_flow_model("loop", scan=True), budgets="cpu:64KiB",
                    sess_options=_options(**{"session.allow_unplanned_shapes": "1"}))
    box = _run_in_thread(lambda: sess.run(None, {"x": X, "M": HUGE}))
    e = box.get("error")
    assert isinstance(e, UnplannedAllocationError), box
    assert e.node == "loop" and e.planned <= 64 << 10 and e.planned < e.requested <= e.planned + 16
    assert "constant trip count" in str(e)
    out = sess.run(None, {"x": X, "M": np.array(3, np.int64)})  # the next run works
    np.testing.assert_array_equal(out[1], X + np.arange(1, 4, dtype=np.float32)[:, None])


def _folded_model(kind):
    i64, f = TensorProto.INT64, TensorProto.FLOAT
    if kind == "constant_of_shape":
        nodes = [helper.make_node("ConstantOfShape", ["s"], ["c"], name="/ConstantOfShape")]
        inits = [helper.make_tensor("s", i64, [2], [2**20, 2**20])]
    else:
        nodes = [helper.make_node("Range", ["a", "b", "d"], ["r"], name="/Range"),
                 helper.make_node("Cast", ["r"], ["c"], name="/Cast", to=f)]
        inits = [helper.make_tensor("a", i64, [], [0]), helper.make_tensor("b", i64, [], [2**40]),
                 helper.make_tensor("d", i64, [], [1])]
    nodes.append(helper.make_node("Add", ["c", "x"], ["y"], name="/Add"))
    g = helper.make_graph(nodes, "folded", [helper.make_tensor_value_info("x", f, [1])],
                          [helper.make_tensor_value_info("y", f, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("kind", ["constant_of_shape", "range"])
def test_a_huge_constant_is_not_folded_and_the_budget_refuses_it_naming_the_node_and_bytes(kind):
    model = _folded_model(kind)
    sess = _session(model)  # no budget: initialization succeeds, nothing was materialised
    assert sess.get_outputs()[0].name == "y"
    node = "/ConstantOfShape" if kind == "constant_of_shape" else "/Range"
    with pytest.raises(PlanOverBudgetError, match=rf"budget of 1073741824 bytes.*\d{{13}} B written by node '{node}'"):
        _session(model, budgets="cpu:1GiB")
    with pytest.raises(ort_memplan.MemPlanError, match=r"could not allocate a planned buffer of \d{13,} bytes"):
        _session(model, sess_options=_options(**{"session.pre_allocate_execution_buffers": "1"}))


def _past_model():
    """position ids: Cast(Range(0, Shape(x)[0])) + x, x: [past_sequence]."""
    i64, f = TensorProto.INT64, TensorProto.FLOAT
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="/Shape"),
             helper.make_node("Squeeze", ["s"], ["n"], name="/Squeeze"),
             helper.make_node("Range", ["zero", "n", "one"], ["r"], name="/Range"),
             helper.make_node("Cast", ["r"], ["rf"], name="/Cast", to=f),
             helper.make_node("Add", ["rf", "x"], ["y"], name="/Add")]
    g = helper.make_graph(nodes, "past", [helper.make_tensor_value_info("x", f, ["past_sequence"])],
                          [helper.make_tensor_value_info("y", f, ["past_sequence"])],
                          [helper.make_tensor("zero", i64, [], [0]), helper.make_tensor("one", i64, [], [1])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("dim", [2**31, 2**40])
def test_a_huge_dimension_override_is_planned_not_materialised_and_refused_by_the_budget(dim):
    model = _past_model()
    sess = _session(model, free_dimension_overrides={"past_sequence": dim})
    assert sess.get_inputs()[0].shape == [dim]
    with pytest.raises(PlanOverBudgetError,
                       match=rf"written by node '/Range'.*large dimension\(s\) past_sequence={dim}:"):
        _session(model, budgets="cpu:1GiB", free_dimension_overrides={"past_sequence": dim})


def test_a_huge_dimension_override_with_pre_allocated_buffers_is_a_host_memory_error():
    with pytest.raises(ort_memplan.HostMemoryError, match=r"17592186044416 bytes.*past_sequence=1099511627776"):
        _session(_past_model(), free_dimension_overrides={"past_sequence": 2**40},
                 sess_options=_options(**{"session.pre_allocate_execution_buffers": "1"}))


@pytest.mark.parametrize("dim", [2**62, 2**63 - 1, 2**63, -1, -(2**40)])
def test_absurd_dimension_overrides_are_typed_errors_naming_the_dimension(dim):
    with pytest.raises((InvalidOptionError, ort_memplan.MemPlanError), match=r"(?s)past_sequence"):
        _session(_past_model(), free_dimension_overrides={"past_sequence": dim})


def test_a_small_override_still_runs_like_onnxruntime():
    model = _past_model()
    feeds = {"x": np.ones(5, np.float32)}
    ours = _session(model, free_dimension_overrides={"past_sequence": 5}).run(None, feeds)
    np.testing.assert_array_equal(ours[0], _reference(model, feeds)[0])


def test_a_small_model_refused_by_its_budget_names_no_dimension():
    model = _past_model()
    with pytest.raises(PlanOverBudgetError) as e:
        _session(model, budgets="cpu:1KiB", free_dimension_overrides={"past_sequence": 4096})
    assert "large dimension" not in str(e.value)


@pytest.mark.parametrize(("overrides", "max_shapes", "named"), [
    ({"past_sequence": 2**31, "batch": 4}, None, ["past_sequence=2147483648"]),
    ({}, {"x": [1, 2**40]}, ["x[1]=1099511627776"]),
    ({"batch": 4}, {"x": [1, 8]}, []),
])
def test_large_dims_names_the_overrides_and_max_shape_axes_that_are_large(overrides, max_shapes, named):
    from ort_session._large_dims import large_dims

    assert large_dims(overrides, max_shapes) == named
