"""CUDA graphs (the Capture surface) on the recording/emulating stand-ins for cuda.bindings.driver: a capture
records launches into its stream without running them, end instantiates and launches the graph once, a
replay launches the recorded kernels again, and host work inside the capture is refused with the reason."""

from __future__ import annotations

import numpy as np
import pytest

import ort_abi
from ort_cuda_ep.testing import EmulatingDriver


@pytest.fixture
def ep(recording_ep):
    return recording_ep  # tests/conftest.py: RecordingDriver


def _kinds(ep):
    return [c[0] for c in ep.runtime.driver.calls]


def test_the_cuda_ep_has_the_capture_surface(ep):
    assert isinstance(ep, ort_abi.CaptureCapable) and ort_abi.capture_refusal(ep) is None


def test_capture_records_then_end_launches_once_and_replay_again(ep):
    rt = ep.runtime
    a = rt.to_device(np.arange(8, dtype=np.float32))
    y = rt.empty((8,), np.float32)
    ep.begin_capture()
    from ort_cuda_ep._launch import ScratchOnly, compute
    from ort_cuda_ep._ops import find_spec

    compute(rt, find_spec("Relu", "", 17), "relu", [a], {}, ScratchOnly(rt), 1, out=lambda i, s, d: y)
    assert _kinds(ep)[-2:] == ["begin_capture", "capture"]  # recorded, not launched
    graph = ep.end_capture()
    assert graph.launches == 1 and _kinds(ep)[-3:] == ["end_capture", "graph_launch", "launch"]
    graph.replay()
    assert _kinds(ep)[-2:] == ["graph_launch", "launch"]
    graph.release()
    with pytest.raises(ort_abi.CaptureError, match="released"):
        graph.replay()
    rt.release(a)
    rt.release(y)


@pytest.mark.parametrize(("work", "reason"), [
    (lambda rt: rt.to_device(np.ones(4, np.float32)), "a 16-byte device allocation"),
    (lambda rt, buf=None: rt.to_host(rt._probe), "a 16-byte device-to-host copy"),
])
def test_host_work_inside_a_capture_is_refused_and_abort_ends_it(ep, work, reason):
    rt = ep.runtime
    rt._probe = rt.to_device(np.ones(4, np.float32))
    ep.begin_capture()
    with pytest.raises(ort_abi.CaptureError, match="inside the captured region") as info:
        work(rt)
    assert info.value.reason == reason
    ep.abort_capture()
    assert rt.driver.capturing is None and not rt.capture.active
    np.testing.assert_array_equal(rt.to_host(rt._probe), 1)  # after the abort, copies work again
    rt.release(rt._probe)


def test_a_replay_on_the_emulating_driver_recomputes_from_the_current_inputs(monkeypatch, cache):
    from ort_cuda_ep import CudaExecutionProvider, CudaRuntime
    from ort_cuda_ep._launch import ScratchOnly, compute
    from ort_cuda_ep._ops import find_spec
    from ort_cuda_ep.testing import fake_device

    fake = fake_device("a100")
    monkeypatch.setattr("ort_cuda_ep._ep.discover", lambda device_id=0: fake)
    ep = CudaExecutionProvider(cache=cache)
    ep._runtime = rt = CudaRuntime(fake, cache, ep.identity, driver=EmulatingDriver())
    x = rt.to_device(np.array([-1, 2, -3, 4], np.float32))
    y = rt.empty((4,), np.float32)
    ep.begin_capture()
    compute(rt, find_spec("Relu", "", 17), "relu", [x], {}, ScratchOnly(rt), 1, out=lambda i, s, d: y)
    np.testing.assert_array_equal(rt.driver.array_at(y.buffer.ptr, np.float32), 0)  # recorded, not run yet
    graph = ep.end_capture()
    np.testing.assert_array_equal(rt.to_host(y), [0, 2, 0, 4])
    ort_abi.copy_host_to_device(np.array([5, -6, 7, -8], np.float32), x.buffer)  # new inputs, same address
    graph.replay()
    np.testing.assert_array_equal(rt.to_host(y), [5, 0, 7, 0])
    graph.release()
    ep.close()


# ---- the optional mapped (host-visible) backing: cuMemHostAlloc with CU_MEMHOSTALLOC_DEVICEMAP --------------
def test_mapped_memory_is_written_by_the_host_in_place_and_read_by_kernels(monkeypatch, cache):
    from ort_cuda_ep import CudaExecutionProvider, CudaRuntime
    from ort_cuda_ep._launch import ScratchOnly, compute
    from ort_cuda_ep._ops import find_spec
    from ort_cuda_ep.testing import fake_device

    fake = fake_device("a100")
    monkeypatch.setattr("ort_cuda_ep._ep.discover", lambda device_id=0: fake)
    ep = CudaExecutionProvider(cache=cache)
    ep._runtime = rt = CudaRuntime(fake, cache, ep.identity, driver=EmulatingDriver())
    mapped = ep.mapped_allocator
    assert mapped.mapped and not ep.allocator.mapped
    x = ort_abi.DeviceTensor(mapped.alloc(16), (4,), np.float32)
    y = ort_abi.DeviceTensor(mapped.alloc(16), (4,), np.float32)
    x.buffer.numpy().view(np.float32)[:] = [-1, 2, -3, 4]  # the host writes in place: no copy call
    compute(rt, find_spec("Relu", "", 17), "relu", [x], {}, ScratchOnly(rt), 1, out=lambda i, s, d: y)
    assert y.buffer.numpy().view(np.float32).tolist() == [0, 2, 0, 4]  # the kernel's write, seen in place
    assert [c[0] for c in rt.driver.calls] == ["host_alloc", "host_alloc", "launch"]
    with pytest.raises(ort_abi.ForeignFreeError):
        ep.allocator.free(x.buffer)  # a mapped buffer goes back through the mapped allocator only
    mapped.free(x.buffer)
    mapped.free(y.buffer)
    assert rt.driver.mapped == set() and rt.driver.memory == {}
    ep.close()


def test_a_driver_without_cuMemHostAlloc_refuses_mapped_memory(recording_ep, monkeypatch):
    monkeypatch.delattr(type(recording_ep.runtime.driver), "cuMemHostAlloc")
    with pytest.raises(ort_abi.AllocationError, match="no cuMemHostAlloc"):
        recording_ep.mapped_allocator.alloc(8)
