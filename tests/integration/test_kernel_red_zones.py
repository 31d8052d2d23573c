"""A misbehaving C kernel library (`c/scribble.c`, com.example::Scribble, y = x + 1, armed once per run through
`scribble_arm`) under red zones: a write before its output, just past it or 4 KiB past it, a write through its
const input (a feed or a weight), and success without its output each end the run in a typed error naming the
node, the caller's feed is never changed, and the next run is right. Success without the output, and a request
for an output with a negative dimension, are KernelRunErrors naming the node in every runner path, red zones or
not (the replay of C steps included: the kernel is called once, the run is not retried in Python). The fuzz class writes at random offsets and lengths
around the output or the input, within the guarded distance: every case is a typed error naming the node or
a correct run."""

from __future__ import annotations

import collections
import ctypes
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

import ort_abi
import ort_memplan
from ort_session import ConstInputWrittenError, InferenceSession, RedZoneError
from ort_session._errors import KernelRunError
from ort_session._executor import NO_C_STEPS_ENV
from ort_session._ort_errors import Fail

CLEAN, OUTPUT, INPUT, NOTHING, NEGATIVE = 0, 1, 2, 3, 4
RED_ZONE = 64
NBYTES = 4 * 8 * 4  # x and y: float32[4, 8]
X = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
W = np.arange(32, dtype=np.float32).reshape(4, 8)
PRE_ALLOCATE = "session.pre_allocate_execution_buffers"


def _model(source: str = "x", batch: int | str = 4):
    """source -> Scribble ("scribble") -> y -> Add(y, x) ("after") -> z; source "w" is a weight."""
    inits = [helper.make_tensor("w", TensorProto.FLOAT, [4, 8], W.ravel().tolist())] if source == "w" else []
    nodes = [helper.make_node("Scribble", [source], ["y"], name="scribble", domain="com.example"),
             helper.make_node("Add", ["y", "x"], ["z"], name="after")]
    graph = helper.make_graph(nodes, "scribble", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 8])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [batch, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])


def _want(source: str = "x") -> np.ndarray:
    return (W if source == "w" else X) + 1 + X


@pytest.fixture(scope="module")
def arm(scribble_lib):
    lib = ctypes.CDLL(str(scribble_lib))  # the library the sessions load: one copy, one armed state
    lib.scribble_arm.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    lib.scribble_arm.restype = None
    yield lib.scribble_arm
    lib.scribble_arm(CLEAN, 0, 0)


def _session(lib, source: str = "x", **options):
    return InferenceSession(_model(source), {"kernel_libraries": [str(lib)], **options})


def _run_clean(sess, source: str = "x") -> None:
    feed = X.copy()
    np.testing.assert_allclose(sess.run(None, {"x": feed})[0], _want(source), rtol=1e-6)
    np.testing.assert_array_equal(feed, X)


@pytest.mark.parametrize("pre_allocate", ["1", "0"], ids=["pre-allocated", "per-run-buffers"])
@pytest.mark.parametrize(("offset", "length", "block", "side", "distance"), [
    (-1, 1, "y", "before", (1, 1)),
    (NBYTES, 1, "y", "after", (1, 1)),
    (NBYTES + 4096, 1, None, "after", None),  # far past: past every guard, into the buffer's end margin
], ids=["1-byte-before", "1-byte-past", "4KiB-past"])
def test_writes_outside_the_output_name_the_node_and_the_side(scribble_lib, arm, pre_allocate, offset, length,
                                                              block, side, distance):
    sess = _session(scribble_lib, red_zones=RED_ZONE, **{PRE_ALLOCATE: pre_allocate})
    _run_clean(sess)
    arm(OUTPUT, offset, length)
    with pytest.raises(ort_memplan.RedZoneViolation, match="node 'scribble' \\(step 0\\) wrote") as e:
        sess.run(None, {"x": X.copy()})
    assert (e.value.node, e.value.side) == ("scribble", side)
    assert isinstance(e.value, RedZoneError) and isinstance(e.value, Fail)  # a session error users catch as ORT's
    if block is not None:
        assert (e.value.block, e.value.distance) == (block, distance)
        assert f"{'before the start' if side == 'before' else 'past the end'} of 'y'" in str(e.value)
    else:
        assert e.value.block == "<planned buffer>" and "end margin" in str(e.value)
    _run_clean(sess)  # the guards are refilled: the next run is right


@pytest.mark.parametrize("pre_allocate", ["1", "0"], ids=["pre-allocated", "per-run-buffers"])
@pytest.mark.parametrize("source", ["x", "w"], ids=["feed", "weight"])
def test_a_write_through_a_const_input_names_the_node_and_the_input(scribble_lib, arm, pre_allocate, source):
    sess = _session(scribble_lib, source, red_zones=RED_ZONE, **{PRE_ALLOCATE: pre_allocate})
    _run_clean(sess, source)
    feed = X.copy()
    arm(INPUT, 4, 8)
    with pytest.raises(ort_memplan.ConstInputWritten,
                       match=f"node 'scribble' \\(step 0\\) wrote through its const input '{source}'") as e:
        sess.run(None, {"x": feed})
    assert (e.value.node, e.value.input_name) == ("scribble", source)
    assert isinstance(e.value, ConstInputWrittenError) and isinstance(e.value, KernelRunError)
    np.testing.assert_array_equal(feed, X)  # the kernel wrote the run's copy, never the caller's array
    _run_clean(sess, source)  # nor the session's weight


@pytest.mark.parametrize("options", [
    {"red_zones": RED_ZONE, PRE_ALLOCATE: "1"},
    {PRE_ALLOCATE: "1"},  # the C step runner
    {},  # per-run buffers of the static plan, the C step runner
    {"python_context": True},  # every step through its Python context
], ids=["red-zones", "pre-allocated-c-steps", "static-plan-c-steps", "python-context"])
def test_success_without_the_output_is_a_kernel_run_error(scribble_lib, arm, monkeypatch, options):
    options = dict(options)
    if options.pop("python_context", False):
        monkeypatch.setenv(NO_C_STEPS_ENV, "1")
    sess = _session(scribble_lib, **options)
    _run_clean(sess)
    arm(NOTHING, 0, 0)
    with pytest.raises(KernelRunError, match="node 'scribble' \\(com.example::Scribble\\) .*returned success "
                                             "without producing its output 0 'y'"):
        sess.run(None, {"x": X})
    _run_clean(sess)
    if os.environ.get(NO_C_STEPS_ENV) != "1" and "red_zones" not in options:
        assert sess.last_run_stats.c_steps == 2


@pytest.mark.filterwarnings("ignore::ort_graph.ShapeResolutionWarning")  # a symbolic batch: traced, then cached
def test_success_without_the_output_in_traced_and_cached_layouts_and_a_python_kernel(scribble_lib, arm):
    sess = InferenceSession(_model(batch="batch"), {"kernel_libraries": [str(scribble_lib)]})
    assert not sess.memory.static
    arm(NOTHING, 0, 0)
    with pytest.raises(KernelRunError, match="node 'scribble' .*without producing its output 0 'y'"):
        sess.run(None, {"x": X})  # the first run of the shape key traces
    _run_clean(sess)
    _run_clean(sess)
    assert sess.last_run_stats.layout == "cached pattern"
    arm(NOTHING, 0, 0)
    with pytest.raises(KernelRunError, match="node 'scribble' .*without producing its output 0 'y'"):
        sess.run(None, {"x": X})
    sess = InferenceSession(_model(), {"kernel_libraries": [str(scribble_lib)]})
    after = next(n for n in sess.order if n.name == "after")
    sess.kernels[after.index].compute = lambda ctx: None  # a Python compute that produces nothing
    with pytest.raises(KernelRunError, match="node 'after' \\(Add\\) .*without producing its output 0 'z'"):
        sess.run(None, {"x": X})


@pytest.mark.filterwarnings("ignore::ort_graph.ShapeResolutionWarning")  # the symbolic batch: traced, then cached
@pytest.mark.parametrize(("batch", "options"), [
    (4, {PRE_ALLOCATE: "1"}),  # the C step runner, then the replay of its steps
    (4, {}),  # per-run buffers of the static plan
    (4, {"red_zones": RED_ZONE, PRE_ALLOCATE: "1"}),
    (4, {"python_context": True}),  # every step through its Python context
    ("batch", {}),  # an unplanned output: a symbolic batch is traced, then runs a cached pattern
], ids=["pre-allocated-c-steps", "static-plan-c-steps", "red-zones", "python-context", "unplanned"])
def test_a_negative_output_dimension_is_a_kernel_run_error_naming_the_node(scribble_lib, arm, monkeypatch, batch,
                                                                          options):
    options = dict(options)
    python_context = options.pop("python_context", False)
    if python_context:
        monkeypatch.setenv(NO_C_STEPS_ENV, "1")
    sess = InferenceSession(_model(batch=batch), {"kernel_libraries": [str(scribble_lib)], **options})
    assert sess.memory.static == (batch == 4)
    for _ in range(3):  # the first run of the shapes, then the replayed / cached runs
        handles = ort_abi.live_handles()
        arm(NEGATIVE, -3, 0)  # Scribble asks for y of shape [-3, 8]
        with pytest.raises(KernelRunError, match=r"node 'scribble' \(com.example::Scribble\) .*output 0 requested "
                                                 r"with shape \[-3, 8\]: a negative dimension"):
            sess.run(None, {"x": X})  # a retried kernel (disarmed by its first call) would have succeeded
        _run_clean(sess)  # the session stays usable: the next run is right
        assert ort_abi.live_handles() == handles  # no context or value handle of the failed run is left
    if batch == 4 and not python_context and "red_zones" not in options:
        assert sess.last_run_stats.c_steps == 2  # the failure did not send later runs off the C steps


# ---- fuzz: random writes around the output or the input, inside the guarded distance ----------------------
FUZZ = settings(derandomize=True, max_examples=50, deadline=10_000, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@st.composite
def _writes(draw):
    mode = draw(st.sampled_from([OUTPUT, OUTPUT, INPUT, INPUT, NOTHING, CLEAN]))
    offset = draw(st.integers(-RED_ZONE, NBYTES + RED_ZONE - 1))
    length = draw(st.integers(1, min(RED_ZONE, NBYTES + RED_ZONE - offset)))
    return mode, offset, length


def _expected(mode: int, offset: int, length: int) -> tuple[str, str | None, str | None]:
    """(error kind or "ok", block, side) the case must end in."""
    end = offset + length
    outside = "before" if offset < 0 else "after" if end > NBYTES else None
    if mode == CLEAN or (mode == OUTPUT and outside is None):
        return "ok", None, None  # inside its own output, then overwritten by the result: a correct run
    if mode == NOTHING:
        return "missing", None, None
    block = "y" if mode == OUTPUT else "x"
    return ("guard", block, outside) if outside is not None else ("input", None, None)


@pytest.fixture(scope="module")
def fuzz_session(scribble_lib):
    return _session(scribble_lib, red_zones=RED_ZONE, **{PRE_ALLOCATE: "1"})


@FUZZ
@given(case=_writes())
def test_random_writes_around_outputs_and_inputs_are_caught_or_harmless(fuzz_session, arm, case, fuzz_cases,
                                                                       fuzz_counts):
    fuzz_cases.add("kernel writes")
    mode, offset, length = case
    kind, block, side = _expected(mode, offset, length)
    fuzz_counts.setdefault("kernel writes (test_kernel_red_zones.py)", collections.Counter())[kind] += 1
    feed = X.copy()
    arm(mode, offset, length)
    try:
        out = fuzz_session.run(None, {"x": feed})[0]
    except ort_memplan.RedZoneViolation as e:
        assert (kind, e.node, e.block, e.side) == ("guard", "scribble", block, side), case
        end = offset + length  # the flipped bytes outside the block, counted from its edge (1: right next to it)
        want = (1 - min(end, 0), -offset) if side == "before" else (max(offset, NBYTES) - NBYTES + 1, end - NBYTES)
        assert e.distance == want, case
    except ort_memplan.ConstInputWritten as e:
        assert (kind, e.node, e.input_name) == ("input", "scribble", "x"), case
    except KernelRunError as e:
        assert kind == "missing" and "node 'scribble'" in str(e), case
    else:
        assert kind == "ok", case
        np.testing.assert_allclose(out, _want(), rtol=1e-6)
    finally:
        arm(CLEAN, 0, 0)
    np.testing.assert_array_equal(feed, X)
    _run_clean(fuzz_session)
