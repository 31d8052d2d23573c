"""close() never frees memory under a running kernel: it waits for runs in flight (or refuses after its
timeout), then frees the session's memory and shuts its execution providers down. Threads are
synchronized with events only; every wait is bounded."""

import threading
import warnings

import numpy as np
import pytest

import ort_abi
from ort_graph import zoo
from ort_session import InferenceSession, SessionError
from ort_session._cuda import CudaProvider
from ort_session._errors import SessionBusyError

CFG = zoo.DecoderConfig(layers=2, hidden=32, vocab=64)
DIMS = {"batch": 1, "sequence": 4, "past_sequence": 0}
SIM = ["SimulatedGPUExecutionProvider", "CPUExecutionProvider"]
BOUND = 30  # seconds: a bound for every wait, never reached when the code is right


def _session(options=None):
    opts = {"session.name_based_layer_assignment": "gpu(layers.0/, layers.1/)", "free_dimension_overrides": DIMS,
            **(options or {})}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return InferenceSession(zoo.decoder(CFG), opts, providers=SIM)


def _feeds():
    return zoo.decoder_inputs(CFG, 1, 4, 0)


class BlockedRun:
    """A run in another thread that stops after its first node until `release` is set."""

    def __init__(self, sess):
        self.entered, self.release = threading.Event(), threading.Event()
        self.result, self.error = None, None

        def progress(done, total):
            if done == 1:
                self.entered.set()
                assert self.release.wait(BOUND)

        def body():
            try:
                self.result = sess.run(None, _feeds(), progress=progress)
            except BaseException as e:  # reported to the test thread
                self.error = e

        self.thread = threading.Thread(target=body)
        self.thread.start()
        assert self.entered.wait(BOUND)

    def finish(self):
        self.release.set()
        self.thread.join(BOUND)
        assert not self.thread.is_alive() and self.error is None
        return self.result


@pytest.mark.parametrize("options", [{}, {"session.pre_allocate_execution_buffers": "1"}], ids=["per-run", "pre-allocated"])
def test_close_during_a_run_refuses_after_its_timeout_and_frees_nothing(options):
    sess = _session(options)
    reference = sess.run(None, _feeds())
    device = sess.memory.allocators["simgpu"]
    run = BlockedRun(sess)
    in_use = device.bytes_in_use
    with pytest.raises(SessionBusyError, match=r"1 run\(s\) in flight.*nothing was freed"):
        sess.close(timeout=0.01)
    assert device.bytes_in_use == in_use and device.bytes_in_use > 0
    for got, want in zip(run.finish(), reference):  # the run finished on intact weights
        np.testing.assert_array_equal(got, want)
    sess.run(None, _feeds())  # the refused close left the session open
    sess.close()
    assert device.bytes_in_use == 0 and device.live_buffers == 0


def test_close_waits_for_the_run_in_flight_then_frees_and_refuses_new_runs():
    sess = _session()
    reference = _session().run(None, _feeds())
    device = sess.memory.allocators["simgpu"]
    run = BlockedRun(sess)
    waiting = threading.Event()
    wait_for = sess._runs.wait_for

    def announce(predicate, timeout=None):  # close() is about to wait for the run
        waiting.set()
        return wait_for(predicate, timeout)

    sess._runs.wait_for = announce
    closer_errors = []
    closer = threading.Thread(target=lambda: _capture(closer_errors, sess.close, BOUND))
    closer.start()
    assert waiting.wait(BOUND)
    with pytest.raises(SessionError, match="closed"):  # closing: new runs are refused at once
        sess.run(None, _feeds())
    assert device.bytes_in_use > 0  # still waiting: nothing freed under the running kernel
    for got, want in zip(run.finish(), reference):
        np.testing.assert_array_equal(got, want)
    closer.join(BOUND)
    assert not closer.is_alive() and closer_errors == []
    assert device.bytes_in_use == 0 and device.live_buffers == 0


def _capture(errors, fn, *args):
    try:
        fn(*args)
    except BaseException as e:
        errors.append(e)


def test_close_shuts_the_providers_down(monkeypatch):
    sess = _session()
    closed = []
    for provider in sess.providers:
        monkeypatch.setattr(provider, "close", lambda p=provider: closed.append(p.name), raising=False)
    sess.close()
    sess.close()  # idempotent: the providers are shut down once
    assert closed == ["SimulatedGPUExecutionProvider", "CPUExecutionProvider"]


def test_the_simulated_gpu_reports_what_is_left_allocated_at_close():
    sess = _session()
    leaked = sess.memory.allocators["simgpu"].alloc(100)  # memory nobody freed
    with pytest.raises(SessionError, match="closing the execution providers failed.*1 buffer.*100 bytes") as info:
        sess.close()
    assert isinstance(info.value.__cause__, ort_abi.LeakError)
    leaked.allocator.free(leaked)


def test_the_cuda_provider_releases_its_runtime_at_close():
    class Inner:
        closed = 0

        def close(self):
            self.closed += 1

    inner = Inner()
    provider = CudaProvider(inner, None, {})
    ort_abi.close_provider(provider)
    assert inner.closed == 1
