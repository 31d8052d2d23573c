"""The all-C replay (`_quick_run`): a pre-allocated run whose every step is a C step is replayed with no Python
per node, and computes, counts and refuses exactly what the executor's path does: the same outputs as onnxruntime,
outputs the caller owns, and every feed that differs from the kept run's names, dtypes, shapes or layout (and
every RunOptions, progress callback or kernel failure) taken by the executor's path with its own checks."""

from __future__ import annotations

import warnings

import attrs
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper
from onnx import numpy_helper as nh

from ort_cpu_ep import c_kernels
from ort_graph import zoo
from ort_session import PRE_ALLOCATE, InferenceSession, InvalidInputError, RunOptions, SessionError, _executor
from ort_session._executor import NO_C_STEPS_ENV
from ort_session._quick_run import QuickRun

pytestmark = pytest.mark.skipif(c_kernels.c_registry() is None, reason="the ort-cpu-ep C kernels are not built")


def _chain(n=3, shape=(2, 8)):
    """x -> Add c -> Mul c -> Add c ...: every node a C kernel; and a Gather of the sum by an int64 feed."""
    nodes, x = [], "x"
    for i in range(n):
        nodes.append(helper.make_node("Add" if i % 2 == 0 else "Mul", [x, "c"], [f"v{i}"]))
        x = f"v{i}"
    nodes.append(helper.make_node("Gather", [x, "idx"], ["g"], axis=1))
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", T.FLOAT, list(shape)),
                                               helper.make_tensor_value_info("idx", T.INT64, [2])],
                              [helper.make_tensor_value_info(x, T.FLOAT, list(shape)),
                               helper.make_tensor_value_info("g", T.FLOAT, [shape[0], 2])],
                              [nh.from_array(np.full([1], 1.5, np.float32), "c")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def _session(model, pre_allocate=True, **options):
    opts = {"intra_op_num_threads": 1, **options}
    if pre_allocate:
        opts[PRE_ALLOCATE] = "1"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return InferenceSession(model, opts, providers=["CPUExecutionProvider"])


def _feeds(seed=0, shape=(2, 8)):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal(shape).astype(np.float32), "idx": np.array([1, 6], np.int64)}


def _ort(model, feeds):
    return ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.fixture
def no_executor(monkeypatch):
    """Executor.run refused: a run that reaches it fails the test (the replay must not)."""
    def refuse(*args, **kwargs):
        raise AssertionError("the executor's path ran")
    return lambda: monkeypatch.setattr(_executor.Executor, "run", refuse)


def test_a_preallocated_all_c_run_is_replayed_and_matches_onnxruntime(no_executor):
    model = _chain()
    sess = _session(model)
    first = sess.run(None, _feeds(0))
    assert isinstance(sess._quick, QuickRun)
    no_executor()
    for seed in range(3):
        feeds = _feeds(seed)
        got = sess.run(None, feeds)
        for g, r in zip(got, _ort(model, feeds), strict=True):
            np.testing.assert_allclose(g, r, rtol=1e-6)
    stats = sess.last_run_stats
    assert stats.nodes_run == stats.c_steps == 4 and stats.allocations == 0 and stats.layout == "pre-allocated"
    np.testing.assert_allclose(first[0], _ort(model, _feeds(0))[0], rtol=1e-6)  # not written by later runs


def test_replayed_outputs_are_the_callers_own_and_a_loop_can_feed_them_back(no_executor):
    model = _chain(shape=(2, 8))
    sess = _session(model)
    feeds = _feeds(0)
    sess.run(None, feeds)
    no_executor()
    held = [sess.run(None, feeds)[0] for _ in range(4)]  # each kept: no later run writes it
    for h in held:
        np.testing.assert_array_equal(h, held[0])
    x = feeds["x"]
    for _ in range(5):  # an output fed back as the next run's input
        y = sess.run(["v2"], {"x": x, "idx": feeds["idx"]})[0]
        np.testing.assert_allclose(y, ((x + 1.5) * 1.5) + 1.5, rtol=1e-6)
        x = y


def test_output_names_pick_and_order_the_replayed_outputs(no_executor):
    model = _chain()
    sess = _session(model)
    feeds = _feeds(1)
    full = sess.run(None, feeds)
    no_executor()
    g, v = sess.run(["g", "v2"], feeds)
    np.testing.assert_array_equal(g, full[1])
    np.testing.assert_array_equal(v, full[0])


@pytest.mark.parametrize("change", ["dtype", "larger shape", "unknown name", "missing feed", "list"])
def test_feeds_unlike_the_kept_run_get_the_executors_checks(change):
    sess = _session(_chain())
    feeds = _feeds(0)
    sess.run(None, feeds)
    assert isinstance(sess._quick, QuickRun)
    bad = dict(feeds)
    if change == "dtype":
        bad["x"] = feeds["x"].astype(np.float64)
        match = r"input 'x' has dtype float64"
    elif change == "larger shape":
        bad["x"] = np.zeros((3, 8), np.float32)
        match = r"x"
    elif change == "unknown name":
        bad["y"] = feeds["x"]
        match = r"'y'"
    elif change == "missing feed":
        del bad["idx"]
        match = r"idx"
    else:
        bad["x"] = feeds["x"].tolist()
        match = None
    if match is None:  # a list of the right shape is converted by the executor's path and runs
        np.testing.assert_array_equal(sess.run(None, bad)[0], sess.run(None, feeds)[0])
        return
    with pytest.raises(InvalidInputError, match=match):
        sess.run(None, bad)


def test_a_non_contiguous_feed_runs_the_executors_path_with_the_same_result():
    sess = _session(_chain())
    feeds = _feeds(2)
    want = sess.run(None, feeds)
    strided = np.asfortranarray(feeds["x"])
    assert not strided.flags.c_contiguous
    got = sess.run(None, {"x": strided, "idx": feeds["idx"]})
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


def test_a_kernel_failure_in_a_replay_is_the_executors_error():
    """An index out of range: the replay stops, the executor's path runs the run and raises its error."""
    sess = _session(_chain())
    sess.run(None, _feeds(0))
    assert isinstance(sess._quick, QuickRun)
    with pytest.raises(Exception, match=r"index 9") as replayed:
        sess.run(None, {"x": _feeds(0)["x"], "idx": np.array([1, 9], np.int64)})
    ref = _session(_chain(), pre_allocate=True)
    ref._quick = False  # never replayed
    with pytest.raises(Exception, match=r"index 9") as plain:
        ref.run(None, {"x": _feeds(0)["x"], "idx": np.array([1, 9], np.int64)})
    assert type(replayed.value) is type(plain.value) and str(replayed.value) == str(plain.value)
    np.testing.assert_array_equal(sess.run(None, _feeds(0))[1], ref.run(None, _feeds(0))[1])  # later runs are fine


def test_run_options_and_progress_take_the_executors_path():
    sess = _session(_chain())
    feeds = _feeds(0)
    sess.run(None, feeds)
    seen = []
    sess.run(None, feeds, progress=lambda done, total: seen.append(done))
    assert seen == [1, 2, 3, 4]
    opts = RunOptions()
    opts.terminate = True
    with pytest.raises(Exception, match="terminated"):
        sess.run(None, feeds, opts)


@pytest.mark.parametrize("why", ["no C steps", "a Python step"])
def test_runs_that_cannot_be_replayed_are_never_kept(monkeypatch, why):
    model = _chain()
    if why == "no C steps":
        monkeypatch.setenv(NO_C_STEPS_ENV, "1")
    if why == "a Python step":  # Softmax on float64: the numpy kernel's
        graph = helper.make_graph([helper.make_node("Softmax", ["x"], ["y"])], "py",
                                  [helper.make_tensor_value_info("x", T.DOUBLE, [2, 3])],
                                  [helper.make_tensor_value_info("y", T.DOUBLE, [2, 3])])
        proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        proto.ir_version = 8
        sess = _session(proto.SerializeToString())
        sess.run(None, {"x": np.ones((2, 3))})
    else:
        sess = _session(model)
        sess.run(None, _feeds(0))
    assert sess._quick is False


def _dynamic_conv():
    """x [n, 4, h, w] -> a padded 1x3 Conv with constant W (pre-packed, the original released) -> Add: no static plan
    (nothing bounds n, h, w), so each feed shape is traced by its first run and planned from its pattern."""
    rng = np.random.default_rng(5)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[1, 3], pads=[0, 1, 0, 1]),
         helper.make_node("Add", ["c", "b"], ["y"])], "dyn",
        [helper.make_tensor_value_info("x", T.FLOAT, ["n", 16, "h", "w"])],
        [helper.make_tensor_value_info("y", T.FLOAT, ["n", 32, "h", "w"])],
        [nh.from_array(rng.standard_normal((32, 16, 1, 3)).astype(np.float32), "w"),
         nh.from_array(np.full([1], 0.5, np.float32), "b")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8
    return proto.SerializeToString()


def test_symbolic_dims_are_replayed_on_the_pattern_traced_for_their_feed_shapes(monkeypatch):
    """The first run of a feed shape traces it, the second runs the executor on its pattern and keeps the replay;
    from then on that shape is replayed (the Conv's workspace traced from its packed weights' shape: no request
    outside the pattern). Another shape takes the executor's path, and alternating with it the kernels declare for
    each run's pattern again (`SessionMemory.declare_for`): no scratch, the replay kept; each run matches
    onnxruntime."""
    model = _dynamic_conv()
    sess = _session(model, pre_allocate=False)
    rng = np.random.default_rng(0)
    x = {"x": rng.standard_normal((2, 16, 8, 200)).astype(np.float32)}
    sess.run(None, x)
    assert sess._quick is None  # traced: not yet
    sess.run(None, x)
    assert isinstance(sess._quick, QuickRun)
    executor_run = _executor.Executor.run

    def refuse(*args, **kwargs):
        raise AssertionError("the executor's path ran")

    monkeypatch.setattr(_executor.Executor, "run", refuse)
    for seed in range(3):
        x = {"x": np.random.default_rng(seed).standard_normal((2, 16, 8, 200)).astype(np.float32)}
        np.testing.assert_allclose(sess.run(None, x)[0], _ort(model, x)[0], rtol=1e-5, atol=1e-5)
        stats = sess.last_run_stats
        assert stats.c_steps == 2 and stats.layout == "cached pattern" and stats.allocations == 0
    monkeypatch.setattr(_executor.Executor, "run", executor_run)
    for shape in ((1, 16, 2, 9), (1, 16, 2, 9), (2, 16, 8, 200), (1, 16, 2, 9), (2, 16, 8, 200)):
        x = {"x": rng.standard_normal(shape).astype(np.float32)}  # the other shape traced, then alternating: each
        np.testing.assert_allclose(sess.run(None, x)[0], _ort(model, x)[0], rtol=1e-5, atol=1e-5)  # run declares
        stats = sess.last_run_stats  # its pattern's workspace again: no scratch (a trace takes it, by design)
        assert stats.scratch_fallbacks == 0 or stats.layout == "tracing"
    assert isinstance(sess._quick, QuickRun) and sess._quick.usable  # and the first shape is still replayed
    monkeypatch.setattr(_executor.Executor, "run", refuse)
    x = {"x": rng.standard_normal((2, 16, 8, 200)).astype(np.float32)}
    np.testing.assert_allclose(sess.run(None, x)[0], _ort(model, x)[0], rtol=1e-5, atol=1e-5)


def test_a_static_plan_without_preallocation_is_replayed_with_no_allocation(no_executor):
    """The plan's buffers made per run from the retained host arena: a replay allocates nothing either."""
    model = _chain()
    sess = _session(model, pre_allocate=False)
    sess.run(None, _feeds(0))
    assert isinstance(sess._quick, QuickRun)
    no_executor()
    for seed in range(3):
        feeds = _feeds(seed)
        for g, r in zip(sess.run(None, feeds), _ort(model, feeds), strict=True):
            np.testing.assert_allclose(g, r, rtol=1e-6)
        stats = sess.last_run_stats
        assert stats.allocations == 0 and stats.c_steps == 4 and stats.layout == "static plan"


@pytest.mark.parametrize("pre_allocate", [False, True])
def test_concurrent_runs_are_each_right(pre_allocate):
    """One replay at a time: a run that finds it busy takes the executor's path (pre-allocated: refused there
    with ConcurrentRunError, as without the replay)."""
    import threading

    from ort_memplan import ConcurrentRunError

    model = _chain()
    sess = _session(model, pre_allocate=pre_allocate)
    sess.run(None, _feeds(0))
    want = {seed: _ort(model, _feeds(seed)) for seed in range(4)}
    errors: list[BaseException] = []

    def worker(seed):
        feeds = _feeds(seed)
        for _ in range(200):
            try:
                got = sess.run(None, feeds)
            except ConcurrentRunError:
                assert pre_allocate
                continue
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)
                return
            for g, r in zip(got, want[seed], strict=True):
                if not np.allclose(g, r, rtol=1e-6):
                    errors.append(AssertionError(f"seed {seed}: wrong output"))
                    return

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors[0]


def test_a_closed_session_refuses_a_replay():
    sess = _session(_chain())
    sess.run(None, _feeds(0))
    sess.close()
    with pytest.raises(SessionError, match="closed"):
        sess.run(None, _feeds(0))


def test_the_genai_decoder_step_is_replayed_all_in_c_and_matches_onnxruntime(no_executor):
    """The attention-mask subgraph's int64 ReduceSum, Sub, Shape, Gather and Casts are C kernels now: a planned
    decode step of the genai layout has no Python step and is replayed."""
    cfg = zoo.DecoderConfig(layers=2, hidden=64, heads=4, kv_heads=2, intermediate=128, vocab=96, max_positions=64)
    static = attrs.evolve(cfg, batch=1, sequence=1, past_sequence=7)
    model = zoo.genai_decoder_proto(static).SerializeToString()
    feeds = zoo.genai_decoder_inputs(static, 1, 1, 7)
    sess = _session(model, free_dimension_overrides={"total_sequence_length": 8})
    sess.run(None, feeds)
    assert isinstance(sess._quick, QuickRun)
    no_executor()
    got = sess.run(None, feeds)
    assert sess.last_run_stats.nodes_run == sess.last_run_stats.c_steps == len(sess.order)
    for g, r in zip(got, _ort(model, feeds), strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)


def test_a_generation_loop_within_the_plan_is_replayed_step_by_step_and_matches_onnxruntime(no_executor):
    """Planned once for the largest step (`generation_max_shapes`), pre-allocated: the prefill and every step of a
    growing past (a new shape key each step, checked as the executor's path checks it) are replayed in C."""
    import onnx

    import ort_graph
    from ort_session._generate import generation_max_shapes

    cfg = zoo.DecoderConfig(layers=2, hidden=64, heads=4, kv_heads=2, intermediate=128, vocab=96, max_positions=64)
    proto = zoo.genai_decoder_proto(cfg)
    model = proto.SerializeToString()
    max_shapes = generation_max_shapes(ort_graph.from_proto(onnx.load_from_string(model)), 6, 12)
    sess = _session(model, max_shapes=max_shapes)
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    feeds = zoo.genai_decoder_inputs(cfg, 1, 6, 0)
    sess.run(None, feeds)
    assert isinstance(sess._quick, QuickRun)
    no_executor()
    for step in range(5):
        got, want = sess.run(None, feeds), ref.run(None, feeds)
        for g, r in zip(got, want, strict=True):
            np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)
        token = int(np.argmax(got[0][0, -1]))
        total = feeds["attention_mask"].shape[1] + 1
        feeds = {"input_ids": np.array([[token]], np.int64), "attention_mask": np.ones((1, total), np.int64),
                 **{"past_key_values." + n[len("present."):]: v for n, v in zip(sess.output_names[1:], got[1:])}}
        assert step == 0 or sess.last_run_stats.c_steps == len(sess.order)
    too_long = {**feeds, "attention_mask": np.ones((1, 40), np.int64)}
    with pytest.raises(InvalidInputError, match="pre-allocated"):  # outside the plan: the executor path's error
        sess.run(None, too_long)
