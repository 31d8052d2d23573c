"""The transfer surface's stream model: a reader must be ordered after the copy it reads, a copy after
the readers of what it overwrites; events between streams order them, issue time does not."""

import numpy as np
import pytest

import ort_abi


def _setup():
    alloc = ort_abi.NullDeviceAllocator(capacity=1024)
    buf = alloc.alloc(64)
    return alloc, buf, ort_abi.Stream("compute"), ort_abi.Stream("copy"), ort_abi.OrderGuard()


def test_a_read_after_waiting_on_the_copy_event_passes_and_sees_the_bytes():
    alloc, buf, compute, copy, guard = _setup()
    src = np.arange(64, dtype=np.uint8)
    event = ort_abi.copy_host_to_device_async(src, buf, copy, guard, "slot 0", "copy A")
    compute.wait(event)
    guard.read("slot 0", compute, "node n")
    out = np.empty(64, np.uint8)
    ort_abi.copy_device_to_host(buf, out)
    np.testing.assert_array_equal(out, src)
    alloc.free(buf)


def test_a_read_without_waiting_is_refused():
    _alloc, buf, compute, copy, guard = _setup()
    ort_abi.copy_host_to_device_async(np.zeros(64, np.uint8), buf, copy, guard, "slot 0", "copy A")
    with pytest.raises(ort_abi.StreamOrderError, match="not known to have completed"):
        guard.read("slot 0", compute, "node n")


def test_waiting_on_an_earlier_copy_does_not_cover_a_later_one():
    _alloc, buf, compute, copy, guard = _setup()
    first = ort_abi.copy_host_to_device_async(np.zeros(64, np.uint8), buf, copy, guard, "slot 0", "copy A")
    compute.wait(first)
    guard.read("slot 0", compute, "node n")
    copy.wait(compute.record())
    ort_abi.copy_host_to_device_async(np.ones(64, np.uint8), buf, copy, guard, "slot 0", "copy B")
    with pytest.raises(ort_abi.StreamOrderError):
        guard.read("slot 0", compute, "node m")


@pytest.mark.parametrize("wait", [True, False])
def test_an_overwrite_must_wait_for_the_readers(wait):
    _alloc, buf, compute, copy, guard = _setup()
    compute.wait(ort_abi.copy_host_to_device_async(np.zeros(64, np.uint8), buf, copy, guard, "slot 0", "copy A"))
    guard.read("slot 0", compute, "node n")
    if wait:
        copy.wait(compute.record())
        ort_abi.copy_host_to_device_async(np.ones(64, np.uint8), buf, copy, guard, "slot 0", "copy B")
    else:
        with pytest.raises(ort_abi.StreamOrderError, match="may still read"):
            ort_abi.copy_host_to_device_async(np.ones(64, np.uint8), buf, copy, guard, "slot 0", "copy B")


def test_regions_are_independent():
    _alloc, buf, compute, copy, guard = _setup()
    compute.wait(ort_abi.copy_host_to_device_async(np.zeros(32, np.uint8), buf.view(0, 32), copy, guard, "slot 0", "A"))
    guard.read("slot 0", compute, "node n")
    # slot 1 has no readers: its copy needs no wait, and slot 0 stays readable
    ort_abi.copy_host_to_device_async(np.zeros(32, np.uint8), buf.view(32, 32), copy, guard, "slot 1", "B")
    guard.read("slot 0", compute, "node m")
