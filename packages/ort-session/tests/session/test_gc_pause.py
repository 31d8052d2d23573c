"""Session construction runs with the cyclic garbage collector paused (`_gc_pause.collector_paused`): it is off
while the session is built, back on afterwards whether construction succeeds or fails, left off when the
process had turned it off, and restored only once the last of nested or concurrent pauses ends."""

from __future__ import annotations

import gc
import threading

import onnx
import pytest
from onnx import TensorProto, helper

from ort_session import InferenceSession, ModelLoadFailedError
from ort_session._gc_pause import collector_paused


def _model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


@pytest.fixture
def collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


def test_construction_pauses_the_collector_and_turns_it_back_on(collector_on, monkeypatch):
    seen = []
    import ort_session._session as session_module

    real = session_module.required_inputs

    def spy(graph):
        seen.append(gc.isenabled())
        return real(graph)

    monkeypatch.setattr(session_module, "required_inputs", spy)
    InferenceSession(_model())
    assert seen == [False]
    assert gc.isenabled()


def test_a_failed_construction_turns_it_back_on(collector_on):
    with pytest.raises(ModelLoadFailedError):
        InferenceSession(b"not a model")
    assert gc.isenabled()


def test_a_collector_the_process_turned_off_stays_off(collector_on):
    gc.disable()
    InferenceSession(_model())
    assert not gc.isenabled()


def test_nested_and_concurrent_pauses_restore_it_once_the_last_ends(collector_on):
    inner_started, outer_may_end = threading.Event(), threading.Event()
    states = {}

    def other_thread():
        with collector_paused():
            inner_started.set()
            assert outer_may_end.wait(30)
        states["after_inner"] = gc.isenabled()

    with collector_paused():
        with collector_paused():
            pass
        states["nested_end"] = gc.isenabled()
        t = threading.Thread(target=other_thread)
        t.start()
        assert inner_started.wait(30)
    states["outer_end"] = gc.isenabled()  # the other thread's pause still runs
    outer_may_end.set()
    t.join(30)
    assert states == {"nested_end": False, "outer_end": False, "after_inner": True}
    assert gc.isenabled()
