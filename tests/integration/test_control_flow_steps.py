"""If, Loop and Scan nodes computed whole by the session's C step runner, their bodies' steps in the same table
(`ort_session._fast_control`, `ort_abi.ControlSpec`): the same values as onnxruntime and as the nodes' Python
kernels (what a run with a RunOptions takes: its terminate flag is watched at every iteration), trip counts 0, 1
and many, an early exit by the condition, the iteration number read, a carried value passed through, scan
outputs stacked, scan inputs sliced either way, Constant weights inside a body; no allocation per pre-allocated
run; a terminated run stops inside the Loop; a failing body kernel raises what the Python kernel raises; what the
runner cannot take (a scan output shorter than planned, a nested Loop) still runs in Python."""

import warnings

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto as TP
from onnx import helper

import ort_abi
from ort_cpu_ep.testing import control_flow_model
from ort_session import PRE_ALLOCATE, InferenceSession, KernelRunError, RunOptions, RunTerminatedError

N = 64
CPU = ["CPUExecutionProvider"]


def _vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def counted_loop():
    """Loop(M, c0, x, acc0, k): v = relu(v * w + bias) carried, acc += i (the iteration number), k passed through
    unchanged, the body's condition `i < stop` (an outer-scope input): an early exit when stop < M."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["v", "w"], ["m"], name="b/mul"),
         helper.make_node("Add", ["m", "bias"], ["a"], name="b/add"),
         helper.make_node("Relu", ["a"], ["v_out"], name="b/relu"),
         helper.make_node("Add", ["acc", "i"], ["acc_out"], name="b/count"),
         helper.make_node("Less", ["i", "stop"], ["cond_out"], name="b/less")],
        "body", [_vi("i", TP.INT64, []), _vi("cond", TP.BOOL, []), _vi("v", TP.FLOAT, [1, N]),
                 _vi("acc", TP.INT64, []), _vi("k", TP.FLOAT, [1, N])],
        [_vi("cond_out", TP.BOOL, []), _vi("v_out", TP.FLOAT, [1, N]), _vi("acc_out", TP.INT64, []),
         _vi("k", TP.FLOAT, [1, N])])
    rng = np.random.default_rng(0)
    inits = [helper.make_tensor("acc0", TP.INT64, [], [0]),
             helper.make_tensor("w", TP.FLOAT, [1, N], rng.uniform(0.5, 1.0, N).astype(np.float32).tolist()),
             helper.make_tensor("bias", TP.FLOAT, [1, N], rng.uniform(-0.1, 0.1, N).astype(np.float32).tolist())]
    g = helper.make_graph([helper.make_node("Loop", ["M", "c0", "x", "acc0", "k"], ["y", "count", "kept"], name="loop",
                                            body=body)], "counted_loop",
                          [_vi("M", TP.INT64, []), _vi("c0", TP.BOOL, []), _vi("x", TP.FLOAT, [1, N]),
                           _vi("stop", TP.INT64, []), _vi("k", TP.FLOAT, [1, N])],
                          [_vi("y", TP.FLOAT, [1, N]), _vi("count", TP.INT64, []), _vi("kept", TP.FLOAT, [1, N])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def gain_if():
    """If(c) on x [1, N]: then x * 2 (one Mul, its weight inside the branch), else x + b (an outer-scope weight)."""
    two = helper.make_tensor("two", TP.FLOAT, [], [2.0])
    then = helper.make_graph([helper.make_node("Mul", ["x", "two"], ["t"], name="then/mul")], "then", [],
                             [_vi("t", TP.FLOAT, [1, N])], [two])
    other = helper.make_graph([helper.make_node("Add", ["x", "b"], ["e"], name="else/add")], "else", [],
                              [_vi("e", TP.FLOAT, [1, N])])
    b = helper.make_tensor("b", TP.FLOAT, [1, N], np.linspace(-1, 1, N).astype(np.float32).tolist())
    g = helper.make_graph([helper.make_node("Relu", ["x0"], ["x"], name="pre"),
                           helper.make_node("If", ["c"], ["y"], name="if", then_branch=then, else_branch=other),
                           helper.make_node("Neg", ["y"], ["z"], name="post")], "gain_if",
                          [_vi("c", TP.BOOL, []), _vi("x0", TP.FLOAT, [1, N])], [_vi("z", TP.FLOAT, [1, N])], [b])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _ours(proto, options=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return InferenceSession(proto.SerializeToString(), dict(options or {}), providers=CPU)


def _loop_feeds(trips, c0=True, stop=1000):
    rng = np.random.default_rng(5)
    return {"M": np.array(trips, np.int64), "c0": np.array(c0), "x": rng.standard_normal((1, N)).astype(np.float32),
            "stop": np.array(stop, np.int64), "k": rng.standard_normal((1, N)).astype(np.float32)}


LOOP_CASES = {"0 trips": (0, True, 1000), "1 trip": (1, True, 1000), "many trips": (37, True, 1000),
              "early exit": (100, True, 7), "false at the start": (5, False, 1000)}


@pytest.mark.usefixtures("cpu_c_kernels")
@pytest.mark.parametrize("options", [{}, {PRE_ALLOCATE: "1"}], ids=["per-run", "pre-allocated"])
def test_a_loop_of_c_steps_matches_onnxruntime_and_its_python_kernel(options):
    proto = counted_loop()
    ref = onnxruntime.InferenceSession(proto.SerializeToString(), providers=CPU)
    sess = _ours(proto, options)
    for case, (trips, c0, stop) in LOOP_CASES.items():  # one session: every trip count through the same plan
        feeds = _loop_feeds(trips, c0, stop)
        want = ref.run(None, feeds)
        python = sess.run(None, feeds, RunOptions())  # the Loop's Python kernel (every iteration checked)
        assert sess.last_run_stats.c_steps == 0, case
        for _ in range(2):  # the first run on the step runner, then its replay
            got = sess.run(None, feeds)
            assert sess.last_run_stats.c_steps == 1 and sess.last_run_stats.allocations == 0, case
            for g, w, p in zip(got, want, python, strict=True):
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=case)
                np.testing.assert_array_equal(g, p, err_msg=case)
    iterations = min(trips, stop + 1) if c0 else 0
    assert got[1] == sum(range(iterations))  # the last case's iteration numbers, summed


@pytest.mark.usefixtures("cpu_c_kernels")
@pytest.mark.parametrize("cond", [True, False])
def test_an_if_of_c_steps_is_one_step_of_the_replayed_run(cond):
    proto = gain_if()
    feeds = {"c": np.array(cond), "x0": np.random.default_rng(1).standard_normal((1, N)).astype(np.float32)}
    want = onnxruntime.InferenceSession(proto.SerializeToString(), providers=CPU).run(None, feeds)
    sess = _ours(proto, {PRE_ALLOCATE: "1"})
    python = sess.run(None, feeds, RunOptions())[0]
    for _ in range(3):
        got = sess.run(None, feeds)[0]
        np.testing.assert_allclose(got, want[0], rtol=1e-6)
        np.testing.assert_array_equal(got, python)
    stats = sess.last_run_stats
    assert (stats.nodes_run, stats.c_steps, stats.allocations) == (3, 3, 0)
    assert sess._quick  # every node, the If included, a C step: the run is replayed


@pytest.mark.usefixtures("cpu_c_kernels")
def test_a_terminated_run_stops_inside_a_loop_the_step_runner_would_compute_whole():
    class StopAfter:  # RunOptions whose terminate flag turns on once it was read `after` times
        def __init__(self, after):
            self.reads, self.after = 0, after

        @property
        def terminate(self):
            self.reads += 1
            return self.reads > self.after

    sess = _ours(counted_loop())
    sess.run(None, _loop_feeds(3))  # the step runner's table built, the Loop one of its steps
    options = StopAfter(30)
    with pytest.raises(RunTerminatedError, match="inside node 'loop'"):
        sess.run(None, _loop_feeds(10**6), options)
    assert options.reads == 31  # checked every iteration (and node), stopped at the first that said so


def gather_in_loop():
    """A Loop whose body gathers row `idx` (an outer-scope input) of a [4, N] weight: an index out of range fails."""
    body = helper.make_graph([helper.make_node("Gather", ["table", "idx"], ["row"], name="b/gather"),
                              helper.make_node("Add", ["v", "row"], ["v_out"], name="b/add"),
                              helper.make_node("Identity", ["cond"], ["cond_out"], name="b/cond")],
                             "body", [_vi("i", TP.INT64, []), _vi("cond", TP.BOOL, []), _vi("v", TP.FLOAT, [1, N])],
                             [_vi("cond_out", TP.BOOL, []), _vi("v_out", TP.FLOAT, [1, N])])
    inits = [helper.make_tensor("M", TP.INT64, [], [3]), helper.make_tensor("T", TP.BOOL, [], [True]),
             helper.make_tensor("table", TP.FLOAT, [4, N], np.arange(4 * N, dtype=np.float32).tolist())]
    g = helper.make_graph([helper.make_node("Loop", ["M", "T", "x"], ["y"], name="loop", body=body)], "gather_loop",
                          [_vi("x", TP.FLOAT, [1, N]), _vi("idx", TP.INT64, [1])], [_vi("y", TP.FLOAT, [1, N])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.usefixtures("cpu_c_kernels")
def test_a_failing_body_kernel_raises_what_the_python_kernel_raises():
    sess = _ours(gather_in_loop())
    x = np.zeros((1, N), np.float32)
    got = sess.run(None, {"x": x, "idx": np.array([2], np.int64)})[0]
    np.testing.assert_array_equal(got, 3 * np.arange(2 * N, 3 * N, dtype=np.float32)[None])
    assert sess.last_run_stats.c_steps == 1
    bad = {"x": x, "idx": np.array([9], np.int64)}
    with pytest.raises(KernelRunError) as python:
        sess.run(None, bad, RunOptions())
    with pytest.raises(KernelRunError) as stepped:
        sess.run(None, bad)
    assert "'b/gather' (Gather)" in str(stepped.value)
    assert type(stepped.value) is type(python.value) and str(stepped.value) == str(python.value)
    assert ort_abi.live_status_count() == 0  # the failed step's status was released in C


@pytest.mark.usefixtures("cpu_c_kernels")
@pytest.mark.parametrize("name", ["loop_in_if", "loop_in_loop"])
def test_nested_bodies_stay_with_the_python_kernels(name):
    proto = control_flow_model(name, scan=True)
    feeds = {"x": np.random.default_rng(3).standard_normal(4).astype(np.float32), "M": np.array(4, np.int64)}
    want = onnxruntime.InferenceSession(proto.SerializeToString(), providers=CPU).run(None, feeds)
    sess = _ours(proto)
    for _ in range(2):
        for g, w in zip(sess.run(None, feeds), want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    assert sess.last_run_stats.c_steps < sess.last_run_stats.nodes_run  # the control-flow node ran in Python


def scan_model(reverse_in, reverse_out):
    """Scan over xs [5, N] with a state [N]: st = st + x_t (x_t from the end when `reverse_in`), y_t = st * 0.5 (a
    Constant weight inside the body), stacked from the end when `reverse_out`."""
    half = helper.make_tensor("half_value", TP.FLOAT, [], [0.5])
    body = helper.make_graph([helper.make_node("Constant", [], ["half"], name="b/half", value=half),
                              helper.make_node("Add", ["st", "xt"], ["st_out"], name="b/add"),
                              helper.make_node("Mul", ["st_out", "half"], ["yt"], name="b/mul")],
                             "body", [_vi("st", TP.FLOAT, [N]), _vi("xt", TP.FLOAT, [N])],
                             [_vi("st_out", TP.FLOAT, [N]), _vi("yt", TP.FLOAT, [N])])
    scan = helper.make_node("Scan", ["s0", "xs"], ["s", "ys"], name="scan", body=body, num_scan_inputs=1,
                            scan_input_directions=[int(reverse_in)], scan_output_directions=[int(reverse_out)])
    g = helper.make_graph([scan], "scan", [_vi("s0", TP.FLOAT, [N]), _vi("xs", TP.FLOAT, [5, N])],
                          [_vi("s", TP.FLOAT, [N]), _vi("ys", TP.FLOAT, [5, N])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def loop_with_scan_outputs(stop=None):
    """Loop of 6 trips (a constant, the condition passed through: its scan output planned [6, 1, N]) stacking
    sigmoid(v) each iteration; with `stop`, the body's condition is `i < stop` (a run-time length)."""
    cond = (helper.make_node("Identity", ["cond"], ["cond_out"], name="b/cond") if stop is None
            else helper.make_node("Less", ["i", "stop"], ["cond_out"], name="b/less"))
    body = helper.make_graph([helper.make_node("Mul", ["v", "w"], ["v_out"], name="b/mul"), cond,
                              helper.make_node("Sigmoid", ["v"], ["s"], name="b/sig")],
                             "body", [_vi("i", TP.INT64, []), _vi("cond", TP.BOOL, []), _vi("v", TP.FLOAT, [1, N])],
                             [_vi("cond_out", TP.BOOL, []), _vi("v_out", TP.FLOAT, [1, N]), _vi("s", TP.FLOAT, [1, N])])
    inits = [helper.make_tensor("M", TP.INT64, [], [6]), helper.make_tensor("T", TP.BOOL, [], [True]),
             helper.make_tensor("stop", TP.INT64, [], [stop or 0]),
             helper.make_tensor("w", TP.FLOAT, [1, N], np.linspace(0.5, 1.5, N).astype(np.float32).tolist())]
    g = helper.make_graph([helper.make_node("Loop", ["M", "T", "x"], ["y", "ys"], name="loop", body=body)], "loop_scans",
                          [_vi("x", TP.FLOAT, [1, N])], [_vi("y", TP.FLOAT, [1, N]), _vi("ys", TP.FLOAT, ["n", 1, N])],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


STACKING = {"scan": lambda: scan_model(False, False), "scan reversed in": lambda: scan_model(True, False),
            "scan reversed out": lambda: scan_model(False, True), "loop scan outputs": loop_with_scan_outputs}


def _stacking_feeds(name):
    rng = np.random.default_rng(6)
    if name.startswith("scan"):
        return {"s0": rng.standard_normal(N).astype(np.float32), "xs": rng.standard_normal((5, N)).astype(np.float32)}
    return {"x": rng.standard_normal((1, N)).astype(np.float32)}


@pytest.mark.usefixtures("cpu_c_kernels")
@pytest.mark.parametrize("name", sorted(STACKING))
def test_scan_outputs_are_stacked_in_c_where_the_plan_holds_them(name):
    proto, feeds = STACKING[name](), _stacking_feeds(name)
    want = onnxruntime.InferenceSession(proto.SerializeToString(), providers=CPU).run(None, feeds)
    sess = _ours(proto, {PRE_ALLOCATE: "1"})
    python = sess.run(None, feeds, RunOptions())
    for _ in range(2):
        got = sess.run(None, feeds)
        for g, w, p in zip(got, want, python, strict=True):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
            np.testing.assert_array_equal(g, p)
        assert sess.last_run_stats.c_steps == 1 and sess.last_run_stats.allocations == 0


@pytest.mark.usefixtures("cpu_c_kernels")
def test_a_loop_whose_condition_ends_it_early_still_stacks_its_scan_outputs():
    proto, feeds = loop_with_scan_outputs(stop=2), _stacking_feeds("loop")
    want = onnxruntime.InferenceSession(proto.SerializeToString(), providers=CPU).run(None, feeds)
    sess = _ours(proto)
    for _ in range(3):  # traced, then the cached pattern
        got = sess.run(None, feeds)
        assert got[1].shape == (3, 1, N)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
