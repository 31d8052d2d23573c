"""Device buffers with explicit ownership (003), allocators, and explicit host<->device copies.

Rules, each enforced here:
  * an owned buffer is made by one allocator and freed exactly once, by that allocator;
  * freeing it through another device's or EP's allocator is an error;
  * a borrowed view (`buf.view(...)`) owns nothing: freeing it is an error, using it after its owner
    was freed is an error;
  * a raw pointer (`buf.ptr`, an int) never extends the owner's life: freeing releases the memory.
There is no automatic free on garbage collection (a device free may need a context and a stream)."""

from __future__ import annotations

import itertools
from typing import Any

import attrs
import numpy as np

from ._ep import EpIdentity
from ._errors import (
    AllocationError,
    BorrowedFreeError,
    CrossDeviceFreeError,
    CrossEpFreeError,
    DoubleFreeError,
    ForeignFreeError,
    TransferError,
    UseAfterFreeError,
)


@attrs.frozen
class Device:
    """A memory device: type ('cpu', 'cuda', 'null', ...) and index."""

    type: str
    id: int = 0

    @property
    def host_accessible(self) -> bool:
        return self.type == "cpu"

    def __str__(self) -> str:
        return f"{self.type}:{self.id}"


class DeviceBuffer:
    """`nbytes` of memory on `device`. Owned (made by `allocator`) or a borrowed view of an owned one."""

    def __init__(self, *, allocator: Allocator, handle: Any, address: int, nbytes: int,
                 owner: DeviceBuffer | None = None, offset: int = 0) -> None:
        self.allocator = allocator
        self._handle = handle
        self._address = address
        self.nbytes = nbytes
        self.owner = owner
        self.offset = offset
        self._freed = False

    @property
    def owned(self) -> bool:
        return self.owner is None

    @property
    def root(self) -> DeviceBuffer:
        return self if self.owner is None else self.owner.root

    @property
    def device(self) -> Device:
        return self.allocator.device

    @property
    def ep(self) -> EpIdentity:
        return self.allocator.ep

    @property
    def alive(self) -> bool:
        return not self.root._freed

    def _check_alive(self, what: str) -> None:
        if not self.alive:
            kind = "owned buffer" if self.owned else "view, whose owning buffer"
            raise UseAfterFreeError(f"{what} on a freed {kind} ({self.nbytes} bytes on {self.device}, {self.ep.name}); "
                                    "keep the owner alive until every use is done")

    @property
    def ptr(self) -> int:
        """The raw address, as an int: it never keeps the memory alive."""
        self._check_alive("ptr")
        return self._address

    def view(self, offset: int = 0, nbytes: int | None = None) -> DeviceBuffer:
        """A borrowed view of [offset, offset+nbytes): owns nothing, dies with the owner."""
        self._check_alive("view")
        n = self.nbytes - offset if nbytes is None else nbytes
        if offset < 0 or n < 0 or offset + n > self.nbytes:
            raise ValueError(f"view [{offset}, {offset + n}) is outside the buffer of {self.nbytes} bytes")
        return DeviceBuffer(allocator=self.allocator, handle=None, address=self._address + offset, nbytes=n,
                            owner=self, offset=self.offset + offset)

    @property
    def host_visible(self) -> bool:
        """Host memory, or device memory mapped into the host (an allocator with `mapped=True`)."""
        return self.device.host_accessible or self.allocator.mapped

    def numpy(self) -> np.ndarray:
        """A uint8 array over host-visible memory (host memory, or a mapped allocation: writes are seen by
        the device without a copy); other device memory is opaque on the host."""
        self._check_alive("numpy")
        if self.device.host_accessible:
            base = self.root._handle
            return base[self.offset:self.offset + self.nbytes]
        if self.allocator.mapped:
            return self.allocator._host_view(self.root._handle, self.offset, self.nbytes)
        raise TransferError(f"buffer on {self.device} is not host-accessible (its allocator is not mapped); copy it "
                            "with copy_device_to_host, or allocate it from a mapped allocator")

    def __repr__(self) -> str:
        state = "freed" if not self.alive else ("owned" if self.owned else "view")
        return f"DeviceBuffer({self.nbytes} B on {self.device}, {self.ep.name}, {state})"


class Allocator:
    """Base allocator: public `alloc`/`free` implement the ownership rules once; a provider
    overrides `_alloc(nbytes) -> (handle, address)`, `_free(handle)` and, for transfers,
    `_write(handle, offset, src: np.ndarray)` / `_read(handle, offset, dst: np.ndarray)` (uint8, 1-D).

    `capacity` (bytes, None for no limit) caps the bytes live at once: an allocation beyond it raises
    AllocationError before the provider is asked, so a session can hold a device to its budget.

    `mapped` (003's optional mapped backing): buffers live in host memory mapped into the device's address
    space (pinned, device-accessible), so the host reads and writes them in place (`DeviceBuffer.numpy()`)
    while kernels use `ptr`. A provider that offers it overrides `_host_view(handle, offset, nbytes)`."""

    mapped = False

    def __init__(self, ep: EpIdentity, device: Device | None = None, *, capacity: int | None = None) -> None:
        self.ep = ep
        self.device = device or Device(ep.device_type, ep.device_id)
        self.capacity = capacity
        self._live: dict[int, DeviceBuffer] = {}
        self.bytes_in_use = 0
        self.peak_bytes = 0
        self.alloc_count = 0
        self.free_count = 0

    def alloc(self, nbytes: int) -> DeviceBuffer:
        if isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)) or nbytes < 0:
            raise ValueError(f"allocation size must be a byte count >= 0, got {nbytes!r}")
        if self.capacity is not None and self.bytes_in_use + int(nbytes) > self.capacity:
            raise AllocationError(
                f"{self.ep.name} on {self.device} cannot allocate {int(nbytes)} bytes: {self.bytes_in_use} of its "
                f"capacity {self.capacity} are in use; free buffers, lower the request or raise the capacity "
                "(for a session: its device budget)")
        handle, address = self._alloc(int(nbytes))
        buf = DeviceBuffer(allocator=self, handle=handle, address=address, nbytes=int(nbytes))
        self._live[id(buf)] = buf
        self.alloc_count += 1
        self.bytes_in_use += int(nbytes)
        self.peak_bytes = max(self.peak_bytes, self.bytes_in_use)
        return buf

    def free(self, buf: DeviceBuffer) -> None:
        if not isinstance(buf, DeviceBuffer):
            raise TypeError(f"free expects a DeviceBuffer, got {buf!r}; a raw pointer cannot be freed")
        if not buf.owned:
            raise BorrowedFreeError(f"{buf!r} is a borrowed view and owns nothing; free its owning buffer instead")
        if buf.allocator is not self:
            if buf.device != self.device:
                raise CrossDeviceFreeError(f"{buf!r} was made on {buf.device} but freed by the allocator of {self.device} "
                                           f"({self.ep.name}); free it with the allocator that made it")
            if buf.ep != self.ep:
                raise CrossEpFreeError(f"{buf!r} was made by {buf.ep.name} but freed by {self.ep.name}'s allocator; "
                                       "free it with the allocator that made it")
            raise ForeignFreeError(f"{buf!r} was made by another {self.ep.name} allocator instance; free it there")
        if buf._freed:
            raise DoubleFreeError(f"{buf!r} was already freed; an owned buffer is freed exactly once")
        self._free(buf._handle)
        buf._freed = True
        buf._handle = None
        self._live.pop(id(buf), None)
        self.free_count += 1
        self.bytes_in_use -= buf.nbytes

    @property
    def live_buffers(self) -> int:
        return len(self._live)

    # -- provider hooks ---------------------------------------------------------------------------
    def _alloc(self, nbytes: int) -> tuple[Any, int]:
        raise NotImplementedError(f"{type(self).__name__} must implement _alloc(nbytes) -> (handle, address)")

    def _free(self, handle: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement _free(handle)")

    def _write(self, handle: Any, offset: int, src: np.ndarray) -> None:
        raise TransferError(f"{type(self).__name__} on {self.device} cannot copy from the host")

    def _read(self, handle: Any, offset: int, dst: np.ndarray) -> None:
        raise TransferError(f"{type(self).__name__} on {self.device} cannot copy to the host")

    def _host_view(self, handle: Any, offset: int, nbytes: int) -> np.ndarray:
        raise TransferError(f"{type(self).__name__} on {self.device} has no mapped (host-visible) backing")


class HostAllocator(Allocator):
    """Host memory from numpy (uint8 arrays); host-accessible."""

    def __init__(self, ep: EpIdentity | None = None) -> None:
        super().__init__(ep or EpIdentity("CPUExecutionProvider", "cpu", 0))

    def _alloc(self, nbytes: int) -> tuple[Any, int]:
        arr = np.empty(nbytes, dtype=np.uint8)
        return arr, int(arr.ctypes.data)

    def _free(self, handle: Any) -> None:
        pass  # dropping the last reference (the buffer's handle) releases the memory

    def _write(self, handle: Any, offset: int, src: np.ndarray) -> None:
        handle[offset:offset + src.nbytes] = src

    def _read(self, handle: Any, offset: int, dst: np.ndarray) -> None:
        dst[...] = handle[offset:offset + dst.nbytes]


class NullDeviceAllocator(Allocator):
    """A pretend device for CPU-only tests of provider logic: opaque addresses (not host-accessible),
    optional capacity (AllocationError beyond it), and host-side numpy backing so copies round-trip."""

    def __init__(self, ep: EpIdentity | None = None, *, capacity: int | None = None, mapped: bool = False) -> None:
        super().__init__(ep or EpIdentity("NullExecutionProvider", "null", 0), capacity=capacity)
        self._next = itertools.count(1)
        self.mapped = bool(mapped)  # the numpy backing doubles as the host mapping

    def _alloc(self, nbytes: int) -> tuple[Any, int]:
        return np.zeros(nbytes, np.uint8), 0x7F0000000000 + next(self._next) * 0x100000

    def _free(self, handle: Any) -> None:
        pass

    def _write(self, handle: Any, offset: int, src: np.ndarray) -> None:
        handle[offset:offset + src.nbytes] = src

    def _read(self, handle: Any, offset: int, dst: np.ndarray) -> None:
        dst[...] = handle[offset:offset + dst.nbytes]

    def _host_view(self, handle: Any, offset: int, nbytes: int) -> np.ndarray:
        if not self.mapped:
            return super()._host_view(handle, offset, nbytes)
        return handle[offset:offset + nbytes]


def _host_bytes(arr: np.ndarray, writable: bool) -> np.ndarray:
    if not isinstance(arr, np.ndarray) or not arr.flags.c_contiguous:
        raise TransferError(f"host side of a copy must be a C-contiguous ndarray, got {type(arr).__name__}")
    if writable and not arr.flags.writeable:
        raise TransferError("destination array is read-only; pass a writable array")
    return arr.reshape(-1).view(np.uint8)


def _check_sizes(src_n: int, dst_n: int) -> None:
    if src_n != dst_n:
        raise TransferError(f"copy size mismatch: source has {src_n} bytes, destination {dst_n}; sizes must match")


def copy_host_to_device(src: np.ndarray, dst: DeviceBuffer) -> None:
    """Copy a host array's bytes into a device buffer (owned or view) of the same size."""
    dst._check_alive("copy_host_to_device")
    data = _host_bytes(src, writable=False)
    _check_sizes(data.nbytes, dst.nbytes)
    dst.root.allocator._write(dst.root._handle, dst.offset, data)


def copy_device_to_host(src: DeviceBuffer, dst: np.ndarray) -> None:
    """Copy a device buffer's bytes into a host array of the same size."""
    src._check_alive("copy_device_to_host")
    data = _host_bytes(dst, writable=True)
    _check_sizes(src.nbytes, data.nbytes)
    src.root.allocator._read(src.root._handle, src.offset, data)


def copy_device_to_device(src: DeviceBuffer, dst: DeviceBuffer) -> None:
    """Copy between two buffers of one device (staged through the host for providers without a
    native path). Buffers on different devices: copy to the host, then to the other device."""
    src._check_alive("copy_device_to_device")
    dst._check_alive("copy_device_to_device")
    if src.device != dst.device:
        raise TransferError(f"copy_device_to_device from {src.device} to {dst.device}: devices differ; "
                            "use copy_device_to_host then copy_host_to_device")
    _check_sizes(src.nbytes, dst.nbytes)
    staging = np.empty(src.nbytes, dtype=np.uint8)
    copy_device_to_host(src, staging)
    copy_host_to_device(staging, dst)
