"""The C step runner (`_fast_steps`) changes how a C kernel's step is called, never what a run computes or
counts: the same outputs, bit for bit, and the same RunStats as with every step through its Python context
(ORT_SESSION_NO_C_STEPS=1), in every layout that plans (traced pattern, static plan, pre-allocated buffers);
concurrent runs each use their own context and value table."""

from __future__ import annotations

import threading
import warnings

import attrs
import numpy as np
import pytest

from ort_cpu_ep import c_kernels
from ort_graph import zoo
from ort_session import PRE_ALLOCATE, InferenceSession
from ort_session._executor import NO_C_STEPS_ENV

pytestmark = pytest.mark.skipif(c_kernels.c_registry() is None, reason="the ort-cpu-ep C kernels are not built")

CFG = zoo.DecoderConfig(layers=2, hidden=64, heads=4, kv_heads=2, intermediate=128, vocab=96)
DIMS = {"batch": 1, "sequence": 5, "past_sequence": 3}
MODES = {
    "traced pattern": {},
    "static plan": {"free_dimension_overrides": DIMS},
    "pre-allocated": {"free_dimension_overrides": DIMS, PRE_ALLOCATE: "1"},
}
COUNTED = ("allocations", "planned_values", "workspace_from_plan", "scratch_fallbacks", "scratch_bytes", "nodes_run",
           "copied_outputs", "layout")


def _session(model, options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return InferenceSession(model, {"intra_op_num_threads": 1, **options}, providers=["CPUExecutionProvider"])


def _runs(model, options, feeds, monkeypatch, runner):
    if runner:
        monkeypatch.delenv(NO_C_STEPS_ENV, raising=False)
    else:
        monkeypatch.setenv(NO_C_STEPS_ENV, "1")
    sess = _session(model, options)
    out = [sess.run(None, feeds) for _ in range(3)]  # a traced pattern is recorded by the first run
    return out, sess.last_run_stats


@pytest.mark.parametrize("mode", list(MODES))
def test_the_runner_computes_and_counts_what_the_python_path_does(monkeypatch, mode):
    model = zoo.decoder_proto(CFG).SerializeToString()
    feeds = zoo.decoder_inputs(CFG, 1, 5, 3)
    got, stats = _runs(model, MODES[mode], feeds, monkeypatch, runner=True)
    ref, ref_stats = _runs(model, MODES[mode], feeds, monkeypatch, runner=False)
    for run_got, run_ref in zip(got, ref):
        for g, r in zip(run_got, run_ref):
            np.testing.assert_array_equal(g, r)
    assert stats.c_steps > 0 and ref_stats.c_steps == 0  # the runner ran the C kernels' steps, or nothing did
    assert {k: getattr(stats, k) for k in COUNTED} == {k: getattr(ref_stats, k) for k in COUNTED}


def test_a_smaller_run_of_a_static_plan_checks_ranks_and_blocks_only(monkeypatch):
    """Runs smaller than the plan (max shapes): requests are checked against the rank, and fit their blocks."""
    model = zoo.decoder_proto(CFG).SerializeToString()
    options = {"free_dimension_overrides": DIMS}
    small = zoo.decoder_inputs(CFG, 1, 2, 3)
    got, stats = _runs(model, options, small, monkeypatch, runner=True)
    ref, ref_stats = _runs(model, options, small, monkeypatch, runner=False)
    np.testing.assert_array_equal(got[-1][0], ref[-1][0])
    assert stats.layout == "static plan" and stats.c_steps > 0
    assert stats.allocations == ref_stats.allocations and stats.planned_values == ref_stats.planned_values


def test_concurrent_runs_each_use_their_own_table(monkeypatch):
    monkeypatch.delenv(NO_C_STEPS_ENV, raising=False)
    sess = _session(zoo.decoder_proto(CFG).SerializeToString(), {})
    cases = [zoo.decoder_inputs(attrs.evolve(CFG, seed=s), 1, 5, 3) for s in range(4)]
    want = [sess.run(None, feeds)[0] for feeds in cases]
    failures = []

    def work(k):
        for _ in range(15):
            got = sess.run(None, cases[k])[0]
            if not np.array_equal(got, want[k]):
                failures.append(k)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
    assert sess.last_run_stats.c_steps > 0


def _movement_chain():
    """A decode layer's data movement: Reshape, Transpose [0,2,1,3], a KV-cache Concat, Slice, Gather, Unsqueeze,
    Squeeze, Identity, Flatten."""
    from onnx import TensorProto, helper, numpy_helper

    def ints(name, values):
        return numpy_helper.from_array(np.array(values, np.int64), name)

    nodes = [
        helper.make_node("Reshape", ["x", "heads"], ["r"]),                  # (1, 1, 64) -> (1, 1, 4, 16)
        helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3]),      # (1, 4, 1, 16)
        helper.make_node("Concat", ["past", "t"], ["kv"], axis=-2),          # (1, 4, 8, 16)
        helper.make_node("Slice", ["kv", "starts", "ends", "axes", "steps"], ["s"]),
        helper.make_node("Gather", ["s", "head"], ["g"], axis=1),
        helper.make_node("Unsqueeze", ["g", "ax0"], ["u"]),
        helper.make_node("Squeeze", ["u", "ax0"], ["q"]),
        helper.make_node("Identity", ["q"], ["i"]),
        helper.make_node("Flatten", ["i"], ["y"], axis=-1),
    ]
    inits = [ints("heads", [0, 0, 4, 16]), ints("starts", [-1, 2]), ints("ends", [-9, 1 << 62]),
             ints("axes", [2, 3]), ints("steps", [-2, 3]), ints("head", [-1, 0, 2]), ints("ax0", [0])]
    graph = helper.make_graph(nodes, "moves", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 64]),
                                               helper.make_tensor_value_info("past", TensorProto.FLOAT, [1, 4, 7, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("kv", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


@pytest.mark.parametrize("options", [{}, {PRE_ALLOCATE: "1"}], ids=["static plan", "pre-allocated"])
def test_the_data_movement_ops_run_as_c_steps_bit_for_bit_as_onnxruntime(options):
    """Every node of the chain is a C kernel's step (csrc/move_*.c), outputs equal to onnxruntime's bit for bit."""
    import onnxruntime as ort

    proto = _movement_chain()
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((1, 1, 64)).astype(np.float32),
             "past": rng.standard_normal((1, 4, 7, 16)).astype(np.float32)}
    sess = _session(proto.SerializeToString(), options)
    got = [sess.run(None, feeds) for _ in range(2)][-1]
    want = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.tobytes() == w.tobytes()
    assert sess.last_run_stats.nodes_run == 9 and sess.last_run_stats.c_steps == 9


@pytest.mark.parametrize("mode", list(MODES))
def test_feeds_read_in_place_are_left_as_the_caller_gave_them(monkeypatch, mode):
    """Feeds are read where the caller holds them (no copy into their planned blocks): no kernel, C or numpy,
    writes into one, and a run's result does not change when the caller reuses its arrays."""
    monkeypatch.delenv(NO_C_STEPS_ENV, raising=False)
    sess = _session(zoo.decoder_proto(CFG).SerializeToString(), MODES[mode])
    feeds = zoo.decoder_inputs(CFG, 1, 5, 3)
    before = {name: arr.copy() for name, arr in feeds.items()}
    first = sess.run(None, feeds)
    for name, arr in feeds.items():
        np.testing.assert_array_equal(arr, before[name])
    for g, r in zip(sess.run(None, feeds), first):
        np.testing.assert_array_equal(g, r)


@pytest.mark.parametrize("mode", list(MODES))
def test_consecutive_c_steps_run_in_one_call_and_count_as_step_by_step(monkeypatch, mode):
    """Without a progress callback a run of consecutive C steps is one call into C (`compute_range`); with one
    (RunOptions.terminate rides on it) every step returns to Python: the same outputs and counts either way."""
    import ort_abi

    ranges = []
    real = ort_abi.StepRun.compute_range

    def spy(self, step, count):
        done = real(self, step, count)
        ranges.append((count, done))
        return done

    monkeypatch.setattr(ort_abi.StepRun, "compute_range", spy)
    monkeypatch.delenv(NO_C_STEPS_ENV, raising=False)
    model = zoo.decoder_proto(CFG).SerializeToString()
    feeds = zoo.decoder_inputs(CFG, 1, 5, 3)
    sess = _session(model, MODES[mode])
    for _ in range(2):
        sess.run(None, feeds)
    ranges.clear()
    got, stats = sess.run(None, feeds), sess.last_run_stats
    seen = []
    ref, ref_stats = sess.run(None, feeds, progress=lambda done, total: seen.append(done)), sess.last_run_stats
    assert ranges and sum(done for _, done in ranges) == stats.c_steps  # every C step inside a range
    assert len(ranges) < stats.c_steps and max(count for count, _ in ranges) > 1
    assert seen == list(range(1, stats.nodes_run + 1))  # step by step with progress
    for g, r in zip(got, ref):
        np.testing.assert_array_equal(g, r)
    assert stats.c_steps == ref_stats.c_steps > 0
    assert {k: getattr(stats, k) for k in COUNTED} == {k: getattr(ref_stats, k) for k in COUNTED}


@pytest.mark.parametrize("mode", ["static plan", "pre-allocated"])
def test_graph_outputs_made_in_c_are_the_callers_own_and_later_runs_never_write_them(monkeypatch, mode):
    """Graph outputs C makes land in a buffer of the run's own (no copy at the end): the arrays a caller holds
    keep their values through later runs; a buffer nobody views any more is reused (at most a few kept)."""
    monkeypatch.delenv(NO_C_STEPS_ENV, raising=False)
    model = zoo.decoder_proto(CFG).SerializeToString()
    sess = _session(model, MODES[mode])
    rng = np.random.default_rng(5)

    def feeds():
        f = zoo.decoder_inputs(CFG, 1, 5, 3)
        return {n: (rng.standard_normal(a.shape).astype(a.dtype) if a.dtype == np.float32 else a) for n, a in f.items()}

    held = []
    for _ in range(4):
        f = feeds()
        out = sess.run(None, f)
        held.append((f, out, [o.copy() for o in out]))
    for _, out, copies in held:  # every earlier run's outputs unchanged by the runs after it
        for o, c in zip(out, copies):
            np.testing.assert_array_equal(o, c)
    f, out, _ = held[-1]
    ref = _runs(model, MODES[mode], f, monkeypatch, runner=False)[0][-1]
    for o, r in zip(out, ref):
        np.testing.assert_array_equal(o, r)
    monkeypatch.delenv(NO_C_STEPS_ENV, raising=False)
    assert sum(o.base is not None and o.base is out[0].base for o in out) > 1  # one buffer of the run, not copies
    (_, fast), = sess._executor._fast_cache.values()
    del held, out, f
    made = []
    real = np.empty

    def counting(shape, dtype=float, *args, **kwargs):
        if shape == fast.output_bytes and np.dtype(dtype) == np.uint8:
            made.append(shape)
        return real(shape, dtype, *args, **kwargs)

    monkeypatch.setattr(np, "empty", counting)
    for _ in range(6):  # outputs dropped at once: one buffer serves every run
        sess.run(None, feeds())
    previous = sess.run(None, feeds())
    for _ in range(6):  # each run's outputs held through the next one (presents fed back): two alternate
        previous = sess.run(None, feeds())
    monkeypatch.setattr(np, "empty", real)
    assert len(made) <= 2 and 1 <= len(fast._free) <= 3
    assert fast._free and previous[0].base is not None
