"""onnxruntime habits, each checked against onnxruntime itself in the same test: run_async, get_device, the
default logger's severity and verbosity, get_modelmeta().version, its exception classes by name, and an
unknown provider name."""

from __future__ import annotations

import logging
import threading
import warnings

import numpy as np
import pytest
from onnx import helper

import ort_session
from ort_session import InferenceSession

ort = pytest.importorskip("onnxruntime")


def _reshape_model(version: int | None = None) -> bytes:
    g = helper.make_graph([helper.make_node("Reshape", ["x", "s"], ["y"], name="/reshape")], "g",
                          [helper.make_tensor_value_info("x", 1, [4]), helper.make_tensor_value_info("s", 7, [1])],
                          [helper.make_tensor_value_info("y", 1, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    if version is not None:
        m.model_version = version
    return m.SerializeToString()


def _async(sess, feeds, user_data):
    done, got = threading.Event(), {}

    def callback(outputs, data, err):
        got.update(outputs=outputs, data=data, err=err, thread=threading.current_thread())
        done.set()

    assert sess.run_async(None, feeds, callback, user_data) is None  # returns at once
    assert done.wait(30)
    return got


def test_run_async_calls_back_with_outputs_or_the_error_as_onnxruntime():
    model = _reshape_model()
    good = {"x": np.arange(4, dtype=np.float32), "s": np.array([4])}
    bad = {"x": np.arange(4, dtype=np.float32), "s": np.array([3])}
    peer = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = InferenceSession(model)
    for sess in (peer, ours):
        ok = _async(sess, good, "ud")
        assert ok["data"] == "ud" and ok["err"] == "" and isinstance(ok["outputs"], list)
        np.testing.assert_array_equal(ok["outputs"][0], good["x"])
        assert ok["thread"] is not threading.main_thread()
        failed = _async(sess, bad, "ud2")
        assert failed["outputs"] == [] and failed["data"] == "ud2" and failed["err"]
        # feed names are checked before it returns, as a ValueError
        with pytest.raises(ValueError):
            sess.run_async(None, {"zz": good["x"]}, lambda *a: None, None)
    assert "/reshape" in failed["err"] or "Reshape" in failed["err"]


def test_get_device_answers_as_onnxruntime_on_this_machine():
    assert ort_session.get_device() in ("CPU", "GPU")
    if "CUDAExecutionProvider" not in ort.get_available_providers() and not ort_session._ort_api.cuda_device_count():
        assert ort_session.get_device() == ort.get_device() == "CPU"


def test_logger_severity_and_verbosity_set_the_project_loggers(monkeypatch):
    import ort_session._ort_module as mod

    monkeypatch.setattr(mod, "_state", {"severity": 2, "verbosity": 0})
    try:
        for level, want in ((0, logging.DEBUG), (1, logging.INFO), (3, logging.ERROR), (4, logging.CRITICAL)):
            ort.set_default_logger_severity(level)  # the peer takes the same values
            ort_session.set_default_logger_severity(level)
            assert all(logging.getLogger(n).level == want for n in mod.LOGGERS)
        ort_session.set_default_logger_severity(0)
        ort.set_default_logger_verbosity(3)
        ort_session.set_default_logger_verbosity(3)
        assert logging.getLogger("ort_abi").level == logging.DEBUG - 3
        for bad in (5, -1, "2", True):
            with pytest.raises(ort_session.InvalidArgument, match="expected an int from 0 to 4"):
                ort_session.set_default_logger_severity(bad)
    finally:
        ort.set_default_logger_severity(2)
        ort.set_default_logger_verbosity(0)
        for name in mod.LOGGERS:
            logging.getLogger(name).setLevel(logging.NOTSET)


@pytest.mark.parametrize("version", [None, 0, 7])
def test_modelmeta_version_as_onnxruntime(version):
    model = _reshape_model(version)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).get_modelmeta().version
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert InferenceSession(model).get_modelmeta().version == want


def test_every_onnxruntime_exception_class_has_a_namesake():
    from onnxruntime.capi import onnxruntime_pybind11_state as theirs

    from ort_session.capi import onnxruntime_pybind11_state as ours

    names = [n for n in dir(theirs) if isinstance(getattr(theirs, n), type) and issubclass(getattr(theirs, n), Exception)]
    assert names
    for name in names:
        assert issubclass(getattr(ours, name), Exception) and getattr(ort_session, name) is getattr(ours, name)
    # ours stay subclasses of them: an onnxruntime-style except clause catches a missing feed
    sess = InferenceSession(_reshape_model())
    with pytest.raises(ours.InvalidArgument):
        sess.run(None, {})


def test_an_unknown_provider_is_skipped_with_a_warning_as_onnxruntime():
    model = _reshape_model()
    given = ["FooExecutionProvider", "CPUExecutionProvider"]
    with pytest.warns(UserWarning, match="FooExecutionProvider"):
        peer = ort.InferenceSession(model, providers=given)
    with pytest.warns(ort_session.UnknownProviderWarning, match="'FooExecutionProvider' is not one of the available"):
        ours = InferenceSession(model, providers=given)
    assert peer.get_providers() == ["CPUExecutionProvider"] == ours.get_providers()
    feeds = {"x": np.arange(4, dtype=np.float32), "s": np.array([4])}
    np.testing.assert_array_equal(ours.run(None, feeds)[0], peer.run(None, feeds)[0])
    # a near miss names the closest provider
    with pytest.warns(ort_session.UnknownProviderWarning, match="did you mean 'CPUExecutionProvider'"):
        InferenceSession(model, providers=["CPUExecutionProvidr"])
