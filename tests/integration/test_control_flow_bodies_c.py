"""Bodies compiled once (`_body_plan`) with their C steps run by the step runner (`_body_c`): the same values as
onnxruntime and as the numpy interpreter, loop-carried values and scan outputs, early exit by cond, nesting,
no allocation per pre-allocated run, and the C steps' arena counted in the node's declared workspace."""

import warnings

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto as TP
from onnx import helper

import ort_abi
import ort_graph
from ort_cpu_ep.ops import _body_plan, find
from ort_cpu_ep.ops._bodies import arena_bytes, body_bytes, graph_peak
from ort_cpu_ep.ops._body_plan import BodyPlan
from ort_cpu_ep.ops._interp import run_graph
from ort_cpu_ep.testing import control_flow_model
from ort_session import PRE_ALLOCATE, InferenceSession

N = 64


def _vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def mlp_loop(trip=100, stop_at=None, scan=False):
    """A Loop of Mul, Add, Relu on [1, N] (a loop-carried value); with `stop_at` the body's cond is `i < stop_at`
    (early exit), with `scan` each iteration's value is also a scan output."""
    nodes = [helper.make_node("Mul", ["v", "w"], ["m"], name="b/mul"),
             helper.make_node("Add", ["m", "bias"], ["a"], name="b/add"),
             helper.make_node("Relu", ["a"], ["v_out"], name="b/relu")]
    if stop_at is None:
        nodes.append(helper.make_node("Identity", ["cond"], ["cond_out"], name="b/cond"))
    else:
        nodes.append(helper.make_node("Less", ["i", "stop"], ["cond_out"], name="b/less"))
    outs = [_vi("cond_out", TP.BOOL, []), _vi("v_out", TP.FLOAT, [1, N])]
    if scan:
        nodes.append(helper.make_node("Sigmoid", ["v_out"], ["s"], name="b/sig"))
        outs.append(_vi("s", TP.FLOAT, [1, N]))
    body = helper.make_graph(nodes, "body", [_vi("i", TP.INT64, []), _vi("cond", TP.BOOL, []), _vi("v", TP.FLOAT, [1, N])],
                             outs)
    rng = np.random.default_rng(0)
    inits = [helper.make_tensor("M", TP.INT64, [], [trip]), helper.make_tensor("T", TP.BOOL, [], [True]),
             helper.make_tensor("stop", TP.INT64, [], [stop_at or 0]),
             helper.make_tensor("w", TP.FLOAT, [1, N], rng.uniform(0.5, 1.0, N).astype(np.float32).tolist()),
             helper.make_tensor("bias", TP.FLOAT, [1, N], rng.uniform(-0.1, 0.1, N).astype(np.float32).tolist())]
    loop_outs = ["y"] + (["ys"] if scan else [])
    g = helper.make_graph([helper.make_node("Loop", ["M", "T", "x"], loop_outs, name="loop", body=body)], "mlp_loop",
                          [_vi("x", TP.FLOAT, [1, N])],
                          [_vi("y", TP.FLOAT, [1, N])] + ([_vi("ys", TP.FLOAT, ["n", 1, N])] if scan else []), inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


CASES = {
    "loop100": (lambda: mlp_loop(), {"x": (1, N)}),
    "early_exit": (lambda: mlp_loop(stop_at=7), {"x": (1, N)}),
    "early_exit_scan": (lambda: mlp_loop(stop_at=7, scan=True), {"x": (1, N)}),
    "loop_scan_outputs": (lambda: mlp_loop(trip=9, scan=True), {"x": (1, N)}),
    "loop_in_loop": (lambda: control_flow_model("loop_in_loop", scan=True), {"x": (4,), "M": None}),
    "loop_in_if": (lambda: control_flow_model("loop_in_if", scan=True), {"x": (4,), "M": None}),
    "scan": (lambda: control_flow_model("scan"), {"x": (4,), "seq": (5, 4)}),
}

STATIC = {"loop100", "early_exit", "loop_scan_outputs"}  # every size known before a run: pre-allocatable


def _feeds(shapes):
    rng = np.random.default_rng(3)
    return {k: np.array(4, np.int64) if s is None else rng.standard_normal(s).astype(np.float32)
            for k, s in shapes.items()}


def _ours(proto, options=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return InferenceSession(proto.SerializeToString(), dict(options or {}), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("name", sorted(CASES))
def test_bodies_match_onnxruntime_and_the_numpy_interpreter(name, monkeypatch):
    make, shapes = CASES[name]
    proto, feeds = make(), _feeds(CASES[name][1])
    ref = onnxruntime.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    model = ort_graph.from_proto(proto)
    with monkeypatch.context() as m:  # the reference: the interpreter with the numpy kernels only
        m.setattr(_body_plan, "c_layout", lambda *a: None)
        interp = run_graph(model.graph, feeds, opsets=model.opset_imports)
    for options in ({}, {PRE_ALLOCATE: "1"}) if name in STATIC else ({},):
        sess = _ours(proto, options)
        for _ in range(2):  # the second run reuses the compiled bodies, their kernels and arenas
            got = sess.run(None, feeds)
            for g, r, name_out in zip(got, ref, model.graph.outputs, strict=True):
                np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-6)
                np.testing.assert_allclose(g, interp[name_out], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted(STATIC))
def test_pre_allocated_runs_with_bodies_allocate_nothing(name):
    make, shapes = CASES[name]
    sess = _ours(make(), {PRE_ALLOCATE: "1"})
    feeds = _feeds(shapes)
    sess.run(None, feeds)
    sess.run(None, feeds)
    assert sess.last_run_stats.allocations == 0


@pytest.mark.usefixtures("cpu_c_kernels")
def test_a_body_of_c_kernels_runs_as_c_steps_inside_the_declared_workspace():
    model = ort_graph.from_proto(mlp_loop())
    ort_graph.resolve_shapes(model, {})
    node = model.graph.node_by_name("loop")
    body = node.attr("body")
    plan = BodyPlan(body, model.opset_imports, use_c=True)
    try:
        assert plan.layout is not None
        assert sorted(s.node.op_type for s in plan.layout.steps.values()) == ["Add", "Identity", "Mul", "Relu"]
        assert len(plan.steps) == 1  # one run of C steps: one call into C per iteration
    finally:
        plan.release()
    ((_slot, declared),) = find("Loop", "", 17).workspace_bytes(node, [])
    assert arena_bytes(body) > 0
    # and the iteration number and condition the session's step runner writes when it computes the Loop whole
    assert declared == body_bytes(node) == graph_peak(body) + arena_bytes(body) + ort_abi.LOOP_STATE_BYTES


@pytest.mark.usefixtures("cpu_c_kernels")
def test_a_body_whose_c_step_is_not_started_falls_back_to_numpy():
    """An input the runner cannot read (a bool Identity's input given as a Python bool array view with odd
    strides) is not described: that step runs in numpy and the values still match."""
    proto = mlp_loop(trip=3)
    model = ort_graph.from_proto(proto)
    ort_graph.resolve_shapes(model, {})
    node = model.graph.node_by_name("loop")
    impl = find("Loop", "", 17)
    x = np.ones((2, N), np.float32)[::2]  # strided: not C-contiguous, so not described in C
    inits = {k: t.numpy() for k, t in model.graph.initializers.items()}
    args = [inits["M"], inits["T"], x] + [inits[n] for n in node.implicit_inputs()]
    got = impl.bind(node, 17)(args)[0]
    want = run_graph(model.graph, {"x": np.ascontiguousarray(x)}, opsets=model.opset_imports)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-6)


def if_chain(steps=10):
    """If on a bool input: the then-branch a chain of `steps` C ops (Mul, Add, Relu by turns) on the outer x [1, N],
    the else-branch one Neg."""
    ops = ["Mul", "Add", "Relu"]
    nodes, prev = [], "x"
    for k in range(steps):
        op = ops[k % 3]
        ins = [prev] if op == "Relu" else [prev, "w" if op == "Mul" else "bias"]
        nodes.append(helper.make_node(op, ins, [f"t{k}"], name=f"then/{op.lower()}{k}"))
        prev = f"t{k}"
    then = helper.make_graph(nodes, "then", [], [_vi(prev, TP.FLOAT, [1, N])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"], name="else/neg")], "else", [], [_vi("e", TP.FLOAT, [1, N])])
    rng = np.random.default_rng(1)
    inits = [helper.make_tensor("w", TP.FLOAT, [1, N], rng.uniform(0.5, 1.5, N).astype(np.float32).tolist()),
             helper.make_tensor("bias", TP.FLOAT, [1, N], rng.uniform(-0.1, 0.1, N).astype(np.float32).tolist())]
    g = helper.make_graph([helper.make_node("If", ["c"], ["y"], name="if", then_branch=then, else_branch=other)],
                          "if_chain", [_vi("c", TP.BOOL, []), _vi("x", TP.FLOAT, [1, N])], [_vi("y", TP.FLOAT, [1, N])],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.usefixtures("cpu_c_kernels")
@pytest.mark.parametrize("cond", [True, False])
def test_an_if_branch_of_c_steps_matches_onnxruntime_and_keeps_its_c_run_between_runs(cond, monkeypatch):
    """Run with a RunOptions (its terminate flag watched at every body node), the If is its Python kernel's, whose
    branch of 10 C steps runs through one C run kept between runs; without one the session's step runner computes
    the If whole (`_fast_control`) and no such run is built."""
    from ort_cpu_ep.ops import _body_c
    from ort_session import RunOptions

    built = []
    original = _body_c.CBodyRun.__init__
    monkeypatch.setattr(_body_c.CBodyRun, "__init__", lambda self, *a: (built.append(1), original(self, *a))[1])
    proto = if_chain()
    feeds = {"c": np.array(cond), "x": np.random.default_rng(2).standard_normal((1, N)).astype(np.float32)}
    ref = onnxruntime.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    sess = _ours(proto, {PRE_ALLOCATE: "1"})
    for _ in range(3):
        np.testing.assert_allclose(sess.run(None, feeds, RunOptions())[0], ref[0], rtol=1e-5, atol=1e-6)
    assert sess.last_run_stats.allocations == 0
    assert len(built) == (1 if cond else 0)  # built at the first run, reopened after; the 1-node branch in numpy
    for _ in range(2):
        np.testing.assert_allclose(sess.run(None, feeds)[0], ref[0], rtol=1e-5, atol=1e-6)
    assert sess.last_run_stats.allocations == 0 and sess.last_run_stats.c_steps == 1
    assert len(built) == (1 if cond else 0)


@pytest.mark.usefixtures("cpu_c_kernels")
def test_a_failing_c_step_inside_a_body_is_named():
    from ort_cpu_ep.ops._bodies import SubgraphNodeError

    model = ort_graph.from_proto(mlp_loop(trip=3))
    ort_graph.resolve_shapes(model, {})
    node = model.graph.node_by_name("loop")
    inits = {k: t.numpy() for k, t in model.graph.initializers.items()}
    bad = np.ones((1, N + 1), np.float32)  # against the [1, N] weights: Mul cannot broadcast
    args = [inits["M"], inits["T"], bad] + [inits[n] for n in node.implicit_inputs()]
    with pytest.raises(SubgraphNodeError, match=r"node 'b/mul' \(Mul\) inside subgraph 'body' of node 'loop' \(Loop\)"):
        find("Loop", "", 17).bind(node, 17)(args)


@pytest.mark.usefixtures("cpu_c_kernels")
def test_a_terminated_run_stops_inside_a_body_of_c_steps():
    class Stop(Exception):
        pass

    ticks = []

    class Checks:
        def tick(self, where):
            ticks.append(where)
            if len(ticks) >= 25:
                raise Stop(where)

        def grow(self, where, nbytes):
            pass

    model = ort_graph.from_proto(mlp_loop(trip=2**40))
    ort_graph.resolve_shapes(model, {})
    node = model.graph.node_by_name("loop")
    inits = {k: t.numpy() for k, t in model.graph.initializers.items()}
    args = [inits["M"], inits["T"], np.ones((1, N), np.float32)] + [inits[n] for n in node.implicit_inputs()]
    with ort_abi.run_checks_scope(Checks()), pytest.raises(Stop):
        find("Loop", "", 17).bind(node, 17)(args)
    assert len(ticks) == 25 and "b/mul" in ticks  # the loop's and the body's C run's checks, every iteration


@pytest.mark.usefixtures("cpu_c_kernels")
def test_a_c_step_whose_output_outgrows_its_planned_block_is_finished_in_python():
    """Body values declared [1, N] but fed [3, N] (no session checks the feed here): each C step's output request
    contradicts the plan, so C defers to the step's Python context (fresh outputs); the values still match."""
    from ort_cpu_ep.ops import _body_c

    deferred = []
    original = _body_c.CBodyRun._python_context
    model = ort_graph.from_proto(mlp_loop(trip=4))
    ort_graph.resolve_shapes(model, {})
    node = model.graph.node_by_name("loop")
    inits = {k: t.numpy() for k, t in model.graph.initializers.items()}
    x = np.random.default_rng(4).standard_normal((3, N)).astype(np.float32)
    args = [inits["M"], inits["T"], x] + [inits[n] for n in node.implicit_inputs()]
    with pytest.MonkeyPatch.context() as m:
        m.setattr(_body_c.CBodyRun, "_python_context", lambda self, step: (deferred.append(step), original(self, step))[1])
        got = find("Loop", "", 17).bind(node, 17)(args)[0]
    want = x
    for _ in range(4):
        want = np.maximum(want * inits["w"] + inits["bias"], 0)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert deferred  # the Python context finished them
