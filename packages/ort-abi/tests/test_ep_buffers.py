"""EP contract types: identity, claims and declines, and every DeviceBuffer ownership rule."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

from ort_abi import (
    AllocationError,
    BorrowedFreeError,
    CrossDeviceFreeError,
    CrossEpFreeError,
    Declined,
    Device,
    DoubleFreeError,
    EpIdentity,
    EpInfo,
    ForeignFreeError,
    HostAllocator,
    NullDeviceAllocator,
    Supported,
    TransferError,
    UseAfterFreeError,
    copy_device_to_device,
    copy_device_to_host,
    copy_host_to_device,
)


def test_identity_and_info():
    ident = EpIdentity("CUDAExecutionProvider", "cuda", 1)
    assert str(ident) == "CUDAExecutionProvider(cuda:1)"
    info = EpInfo(ident, {"multi_processor_count": 132})
    assert info.property("multi_processor_count") == 132 and info.property("x") is None and info.name == ident.name


def test_claims_are_honest_and_readable():
    assert Supported(1024).supported and Supported(1024).cost_bytes == 1024
    d = Declined(node="/m/attn", op_type="Attention", domain="com.microsoft", opset=1,
                 rejected="input 0 dtype STRING", ep="CUDAExecutionProvider", accepts="FLOAT, FLOAT16",
                 remedy="cast input 0 to FLOAT16")
    assert not d.supported
    assert str(d) == ("CUDAExecutionProvider declined node '/m/attn' (com.microsoft::Attention (opset 1)): "
                      "rejected input 0 dtype STRING; it accepts FLOAT, FLOAT16; remedy: cast input 0 to FLOAT16")


@pytest.fixture(params=["host", "null"])
def allocator(request):
    return HostAllocator() if request.param == "host" else NullDeviceAllocator()


def test_owned_buffer_is_freed_exactly_once(allocator):
    buf = allocator.alloc(64)
    assert buf.owned and buf.alive and allocator.live_buffers == 1 and allocator.bytes_in_use == 64
    allocator.free(buf)
    assert not buf.alive and allocator.live_buffers == 0 and allocator.bytes_in_use == 0
    with pytest.raises(DoubleFreeError):
        allocator.free(buf)
    assert allocator.free_count == 1 and allocator.peak_bytes == 64


def test_free_across_devices_or_eps_is_an_error():
    host, dev = HostAllocator(), NullDeviceAllocator()
    other_ep_same_device = NullDeviceAllocator(EpIdentity("OtherEP", "null", 0))
    other_instance = NullDeviceAllocator()
    buf = dev.alloc(8)
    with pytest.raises(CrossDeviceFreeError, match="null:0"):
        host.free(buf)
    with pytest.raises(CrossEpFreeError, match="OtherEP"):
        other_ep_same_device.free(buf)
    with pytest.raises(ForeignFreeError):
        other_instance.free(buf)
    assert buf.alive
    dev.free(buf)


def test_borrowed_views_own_nothing(allocator):
    buf = allocator.alloc(32)
    view = buf.view(8, 16)
    assert not view.owned and view.ptr == buf.ptr + 8 and view.nbytes == 16
    with pytest.raises(BorrowedFreeError):
        allocator.free(view)
    allocator.free(buf)
    with pytest.raises(UseAfterFreeError):
        _ = view.ptr
    with pytest.raises(UseAfterFreeError):
        buf.view(0, 1)
    with pytest.raises(ValueError, match="outside"):
        allocator.alloc(4).view(2, 4)


def test_a_raw_pointer_never_extends_life():
    alloc = HostAllocator()
    buf = alloc.alloc(1 << 16)
    raw = buf.ptr
    storage = weakref.ref(buf._handle)
    alloc.free(buf)
    gc.collect()
    assert isinstance(raw, int) and storage() is None  # the memory is gone although `raw` is still held
    with pytest.raises(UseAfterFreeError):
        _ = buf.ptr


def test_raw_pointers_cannot_be_freed():
    with pytest.raises(TypeError, match="raw pointer"):
        HostAllocator().free(12345)


def test_host_and_device_copies_round_trip_through_views():
    dev = NullDeviceAllocator()
    buf = dev.alloc(32)
    data = np.arange(8, dtype=np.float32)
    copy_host_to_device(data[:4], buf.view(0, 16))
    copy_host_to_device(data[4:], buf.view(16, 16))
    out = np.zeros(8, np.float32)
    copy_device_to_host(buf, out)
    np.testing.assert_array_equal(out, data)
    other = dev.alloc(32)
    copy_device_to_device(buf, other)
    back = np.zeros(8, np.float32)
    copy_device_to_host(other, back)
    np.testing.assert_array_equal(back, data)
    with pytest.raises(TransferError, match="not host-accessible"):
        buf.numpy()


@pytest.mark.parametrize("case", ["size", "freed", "readonly", "devices", "noncontig"])
def test_copy_errors(case):
    dev, host = NullDeviceAllocator(), HostAllocator()
    buf = dev.alloc(16)
    if case == "size":
        with pytest.raises(TransferError, match="size mismatch"):
            copy_host_to_device(np.zeros(3, np.float32), buf)
    elif case == "freed":
        dev.free(buf)
        with pytest.raises(UseAfterFreeError):
            copy_device_to_host(buf, np.zeros(16, np.uint8))
    elif case == "readonly":
        ro = np.zeros(16, np.uint8)
        ro.flags.writeable = False
        with pytest.raises(TransferError, match="read-only"):
            copy_device_to_host(buf, ro)
    elif case == "devices":
        with pytest.raises(TransferError, match="devices differ"):
            copy_device_to_device(buf, host.alloc(16))
    else:
        with pytest.raises(TransferError, match="C-contiguous"):
            copy_host_to_device(np.zeros((4, 8), np.uint8)[:, ::2], buf)


def test_host_buffers_are_host_accessible():
    host = HostAllocator()
    buf = host.alloc(8)
    copy_host_to_device(np.arange(8, dtype=np.uint8), buf)
    assert buf.view(2, 3).numpy().tolist() == [2, 3, 4] and buf.device == Device("cpu", 0)


def test_null_device_capacity():
    dev = NullDeviceAllocator(capacity=100)
    a = dev.alloc(60)
    with pytest.raises(AllocationError, match="60 of its capacity 100 are in use"):
        dev.alloc(41)
    dev.free(a)
    dev.free(dev.alloc(100))


def test_provider_subclass_only_overrides_hooks():
    from ort_abi import Allocator

    class Counting(Allocator):
        def __init__(self):
            super().__init__(EpIdentity("CountingEP", "fake", 3))
            self.freed = []

        def _alloc(self, nbytes):
            return nbytes, 1000 + nbytes

        def _free(self, handle):
            self.freed.append(handle)

    a = Counting()
    buf = a.alloc(5)
    assert buf.ptr == 1005 and buf.device == Device("fake", 3)
    a.free(buf)
    with pytest.raises(DoubleFreeError):
        a.free(buf)
    assert a.freed == [5]
    with pytest.raises(TransferError, match="cannot copy"):
        copy_host_to_device(np.zeros(5, np.uint8), a.alloc(5))
    with pytest.raises(ValueError, match="byte count"):
        a.alloc(-1)


def test_declined_keywords_alias_and_required_fields():
    d = Declined(ep="CPUExecutionProvider", node="n", op="Relu", domain="", rejected="input 0 dtype STRING",
                 accepts="FLOAT", remedy="cast")
    assert d.op_type == "Relu" and d.opset is None and "(Relu)" in d.message
    assert d == Declined("n", "Relu", "", None, "input 0 dtype STRING", "CPUExecutionProvider", "FLOAT", "cast")
    with pytest.raises(TypeError, match="missing remedy"):
        Declined("n", "Relu", "", 1, "x", "EP", "FLOAT")
    with pytest.raises(TypeError, match="pass one of them"):
        Declined("n", "Relu", op="Add", rejected="x", ep="EP", accepts="a", remedy="r")


# ---- the optional mapped (host-visible) backing ------------------------------------------------------------
def test_a_mapped_allocator_makes_device_buffers_host_visible_in_place():
    mapped = NullDeviceAllocator(EpIdentity("SimEP", "sim", 0), mapped=True)
    buf = mapped.alloc(16)
    assert mapped.mapped and buf.host_visible
    buf.view(4, 8).numpy()[:] = np.arange(8, dtype=np.uint8)  # written in place, no copy
    out = np.zeros(16, np.uint8)
    copy_device_to_host(buf, out)
    assert out.tolist() == [0] * 4 + list(range(8)) + [0] * 4
    mapped.free(buf)
    opaque = NullDeviceAllocator(EpIdentity("SimEP", "sim", 0))
    other = opaque.alloc(8)
    assert not other.host_visible
    with pytest.raises(TransferError, match="not host-accessible .*not mapped"):
        other.numpy()
    with pytest.raises(ForeignFreeError):
        mapped.free(other)
    opaque.free(other)
