"""The asynchronous transfer surface: the CPU/null device copies at once; the simulated device defers a
copy until something is ordered after it, refuses out-of-order accesses by address range, and keeps a
timeline in which a copy overlaps the kernels on the other stream."""

import numpy as np
import pytest

import ort_abi


def _bytes(buf):
    out = np.empty(buf.nbytes, np.uint8)
    ort_abi.copy_device_to_host(buf, out)
    return out


def test_immediate_transfers_copy_when_issued_and_have_no_pinned_memory():
    alloc = ort_abi.NullDeviceAllocator()
    buf = alloc.alloc(16)
    t = ort_abi.transfers_for(object())  # a provider without transfers(): the immediate surface
    assert isinstance(t, ort_abi.ImmediateTransfers) and not t.pinned
    t.copy_async(np.arange(16, dtype=np.uint8), buf, t.stream("copy"))
    np.testing.assert_array_equal(_bytes(buf), np.arange(16))
    with pytest.raises(ort_abi.TransferError, match="pinned"):
        t.staging(16)


def test_transfers_for_looks_through_a_wrapper():
    sim = ort_abi.SimulatedTransfers(1e9)

    class Inner:
        def transfers(self):
            return sim

    class Wrapper:
        inner = Inner()

    assert ort_abi.transfers_for(Wrapper()) is sim


def _sim(nbytes=64):
    alloc = ort_abi.NullDeviceAllocator()
    buf = alloc.alloc(nbytes)
    t = ort_abi.SimulatedTransfers(h2d_bandwidth=1e9)
    return buf, t, t.stream("copy")


def test_a_simulated_copy_lands_only_once_a_stream_waits_on_its_event():
    buf, t, copy = _sim()
    t.copy_async(np.full(64, 7, np.uint8), buf, copy)
    event = t.record(copy)
    assert _bytes(buf).max() == 0  # still in flight
    t.wait(t.compute, event)
    np.testing.assert_array_equal(_bytes(buf), np.full(64, 7))
    t.kernel_reads([buf], "node n")  # ordered after the copy: fine


def test_a_kernel_reading_a_copy_in_flight_is_refused_by_address_range():
    buf, t, copy = _sim()
    t.copy_async(np.ones(32, np.uint8), buf.view(32, 32), copy)
    t.kernel_reads([buf.view(0, 32)], "node a")  # other bytes of the same buffer: not touched by the copy
    with pytest.raises(ort_abi.StreamOrderError, match="node b.*has not completed"):
        t.kernel_reads([buf.view(16, 32)], "node b")


@pytest.mark.parametrize("wait", [True, False])
def test_a_copy_over_bytes_a_kernel_read_must_wait_for_the_kernel(wait):
    buf, t, copy = _sim()
    t.copy_async(np.ones(64, np.uint8), buf, copy)
    t.wait(t.compute, t.record(copy))
    t.kernel_reads([buf], "node n")
    if wait:
        t.wait(copy, t.record(t.compute))
        t.copy_async(np.zeros(64, np.uint8), buf, copy)
    else:
        with pytest.raises(ort_abi.StreamOrderError, match="overwrites.*node n"):
            t.copy_async(np.zeros(64, np.uint8), buf, copy)


def test_the_host_waiting_on_an_event_completes_the_copy():
    buf, t, copy = _sim()
    t.copy_async(np.full(64, 3, np.uint8), buf, copy)
    t.host_wait(t.record(copy))
    np.testing.assert_array_equal(_bytes(buf), np.full(64, 3))
    assert t.hazards.pending == []


def test_the_timeline_overlaps_a_copy_with_the_kernels_before_the_wait():
    buf, t, copy = _sim(1000)
    t.copy_async(np.zeros(1000, np.uint8), buf, copy)  # 1 us at 1 GB/s
    ready = t.record(copy)
    t.work(t.compute, 3e-6, "layer 0")  # runs while the copy is in flight
    t.wait(t.compute, ready)
    t.work(t.compute, 2e-6, "layer 1")
    d = t.timeline.to_dict()
    assert d["overlap_seconds"] == pytest.approx(1e-6)
    assert d["seconds"] == pytest.approx(5e-6) and d["serial_seconds"] == pytest.approx(6e-6)
    # a kernel that must wait for a copy starts when the copy ends
    t.copy_async(np.zeros(1000, np.uint8), buf, copy)  # after the last copy: [1us, 2us] ... no wait on compute
    late = t.record(copy)
    t.wait(t.compute, late)
    assert t.timeline.at("compute") == pytest.approx(5e-6)  # that copy ended at 2 us, before the compute did
