"""Weight streaming through the CUDA EP on the emulating driver (real cubins, launches executed in numpy):
a decoder whose weights exceed the budget several times streams its layers through two slots, matches the
CPU-only run, stays within the budget, and each run copies exactly the planned streamed bytes host->device
on top of the boundary copies."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import ort_abi
from ort_graph import zoo
from ort_session import InferenceSession
from ort_session._streaming_run import WeightStreamer

ort_cuda_ep = pytest.importorskip("ort_cuda_ep", reason="ort-cuda-ep is not installed")
from ort_cuda_ep.testing import EmulatingDriver, install_driver  # noqa: E402

CFG = zoo.DecoderConfig(layers=4, hidden=64, vocab=256)
DIMS = {"batch": 1, "sequence": 8, "past_sequence": 0}
WEIGHTS = sum(t.nbytes for t in zoo.decoder(CFG).graph.initializers.values())


@pytest.fixture
def driver(monkeypatch):
    return install_driver(monkeypatch, EmulatingDriver())


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


def _streamed(budget=WEIGHTS // 3):
    return _quiet(InferenceSession, zoo.decoder(CFG), {"free_dimension_overrides": DIMS, "budgets": f"cuda:{budget}",
                                                      "session.weight_streaming": "on"},
                  providers=["CUDAExecutionProvider", "CPUExecutionProvider"])


def test_streamed_layers_on_the_emulated_cuda_device_match_the_cpu_run(driver):
    feeds = zoo.decoder_inputs(CFG, 1, 8, 0)
    want = _quiet(InferenceSession, zoo.decoder(CFG), {"free_dimension_overrides": DIMS}).run(None, feeds)
    sess = _streamed()
    plan = sess.placement.streaming
    assert plan is not None and len(plan.layers) >= 2
    for _ in range(2):
        before = len(driver.calls)
        for a, b in zip(sess.run(None, feeds), want):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
        calls = driver.calls[before:]
        to_device = sum(c[1] for c in calls if c[0] == "HtoD")
        boundary = sess.plan.copies().get("to_device", {}).get("bytes", 0)
        assert to_device == boundary  # the boundary copies stay synchronous
        streamed = [c for c in calls if c[0] == "HtoDAsync"]  # the weights: cuMemcpyHtoDAsync, from pinned memory
        assert sum(c[1] for c in streamed) == sess.plan.copies()["streamed"]["bytes"]
        assert len(streamed) == plan.copies()["count"]
        assert all(c[2] != 0 and c[3] for c in streamed) and len({c[2] for c in streamed}) == 1
        # the kernels' stream (0) waits on a copy event once per streamed layer; the copy stream on the kernels'
        # once per reused slot and once at the start of the run
        waits = [c[1] for c in calls if c[0] == "wait_event"]
        assert waits.count(0) == len(plan.layers)
        assert waits.count(streamed[0][2]) == max(0, len(plan.layers) - plan.slots) + 1
    assert sess.last_run_stats.streamed_bytes == plan.copies()["bytes"]
    use = sess.device_memory()["cuda:0"]
    assert use["peak"] <= use["capacity"] == WEIGHTS // 3
    # the pinned staging (one buffer per slot) is host memory: counted by the plan, not in the device's budget
    assert plan.pinned and plan.copies()["pinned_host_bytes"] == plan.slots * plan.slot_bytes > 0
    assert sess._executor.streamer.pinned_bytes == plan.pinned_bytes
    assert sum(c[1] for c in driver.calls if c[0] == "host_alloc") >= plan.pinned_bytes
    sess.close()
    assert driver.memory == {} and driver.hazards.pending == []


def test_a_kernel_reading_a_slot_before_its_copy_is_caught_on_the_emulated_device(driver, monkeypatch):
    sess = _streamed()
    monkeypatch.setattr(WeightStreamer, "_copied", lambda self, j: None)
    with pytest.raises(ort_abi.StreamOrderError):
        sess.run(None, zoo.decoder_inputs(CFG, 1, 8, 0))
    sess.close()
    assert driver.memory == {}


@pytest.mark.parametrize(("cpu", "streams"), [("1e8,1e8", True), ("1e18,1e18", False)])
def test_auto_streams_only_where_the_model_predicts_a_faster_run(driver, cpu, streams):
    opts = {"free_dimension_overrides": DIMS, "budgets": f"cuda:{WEIGHTS // 3}",
            "session.weight_streaming_cpu_profile": cpu}
    auto = _quiet(InferenceSession, zoo.decoder(CFG), opts, providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    off = _quiet(InferenceSession, zoo.decoder(CFG), {**opts, "session.weight_streaming": "off"},
                 providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    assert (auto.placement.streaming is not None) is streams
    if streams:
        times = auto.placement.streaming.times
        assert times["with streaming"] < times["partial offload"]
        assert auto.placement.streaming.cpu.flops == 1e8
    else:
        assert auto.placement.ep_of == off.placement.ep_of  # placed exactly as without streaming
    auto.close()
    off.close()


def test_the_gpu_check_streamed_case_passes_on_the_emulating_driver(driver):
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[2] / "packages" / "ort-cuda-ep" / "gpu_check.py"
    spec = importlib.util.spec_from_file_location("gpu_check", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    row = _quiet(mod.streamed_session, CFG, 8)
    assert row["ok"] and row["streamed_layers"] >= 2 and row["peak"] <= row["budget"]
    assert row["copy_stream"] and row["pinned_host_bytes"] > 0 and row["serial_median_ms"] > 0
    assert driver.memory == {}


@pytest.mark.parametrize(("skip", "message"), [("_copied", "has not completed"), ("_slot_free", "overwrites")])
def test_the_emulating_driver_catches_a_wrong_order_the_guard_let_through(driver, monkeypatch, skip, message):
    from ort_session import KernelRunError

    sess = _streamed()
    monkeypatch.setattr(ort_abi.OrderGuard, "read", lambda self, region, stream, reader: None)
    monkeypatch.setattr(ort_abi.OrderGuard, "write", lambda self, region, stream, writer: stream.issue())
    monkeypatch.setattr(WeightStreamer, skip, lambda self, j: None)
    with pytest.raises((ort_abi.StreamOrderError, KernelRunError)) as info:
        sess.run(None, zoo.decoder_inputs(CFG, 1, 8, 0))
    err = info.value if isinstance(info.value, ort_abi.StreamOrderError) else info.value.__cause__
    assert isinstance(err, ort_abi.StreamOrderError) and message in str(err)
    sess.close()
    assert driver.memory == {}


def test_cuda_transfers_defer_the_copy_until_the_kernels_stream_waits(driver):
    ep = ort_cuda_ep.CudaExecutionProvider()
    t = ep.transfers()
    assert isinstance(t, ort_abi.DeviceTransfers) and t.pinned and t.compute.handle == 0
    dst = ep.runtime.allocator.alloc(64)
    staging = t.staging(64)
    staging[...] = np.arange(64, dtype=np.uint8)
    copy = t.stream("copy")
    assert copy.handle != 0 and ("stream_create", 1) in driver.calls  # CU_STREAM_NON_BLOCKING
    t.copy_async(staging, dst, copy)
    ready = t.record(copy)
    assert bytes(driver.memory[dst.ptr]) == bytes(64)  # in flight: nothing has landed yet
    t.wait(t.compute, ready)
    assert bytes(driver.memory[dst.ptr]) == bytes(range(64))
    t.end_run()
    assert ("HtoDAsync", 64, copy.handle, True) in driver.calls
    ep.runtime.allocator.free(dst)
    ep.close()  # the copy stream and the pinned staging go with the runtime
    assert driver.memory == {} and driver.mapped == set()


def test_the_plan_counts_the_pinned_staging_as_host_memory(driver):
    sess = _streamed()
    plan = sess.placement.streaming
    staged = sess.plan.to_dict()["copies"]["streamed"]["pinned_host_bytes"]
    assert staged == plan.slots * plan.slot_bytes == sess._executor.streamer.pinned_bytes  # made at initialization
    assert "pinned host memory" in sess.plan.to_table()
    assert sess.device_memory()["cuda:0"]["peak"] <= WEIGHTS // 3  # not in the device's budget
    sess.close()
    assert driver.mapped == set()


def test_pinned_memory_refused_fails_initialization_and_frees_everything(driver, monkeypatch):
    monkeypatch.setattr(driver, "cuMemHostAlloc", lambda n, flags: (2, None))  # CUDA_ERROR_OUT_OF_MEMORY
    with pytest.raises(ort_abi.AllocationError, match="cuMemHostAlloc"):
        _streamed()
    assert driver.memory == {}
