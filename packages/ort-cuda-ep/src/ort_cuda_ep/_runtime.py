"""The GPU side: a driver context, device memory with explicit ownership, copies and launches.

Only usable where ``discover()`` found a device. Host<->device copies are explicit calls; a
DeviceArray is owned by the CudaRuntime that allocated it and is freed exactly once through it.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np

from ort_abi import (
    AllocationError,
    Allocator,
    Device,
    DeviceBuffer,
    DeviceTensor,
    EpIdentity,
    empty_tensor,
    tensor_from_host,
    tensor_to_host,
)

from ._capture import StreamCapture
from ._compile import KERNEL_SOURCES, KernelCache, default_cache
from ._device import DeviceInfo
from ._errors import CudaEpError, KernelLaunchError

__all__ = ["DeviceArray", "CudaAllocator", "CudaRuntime", "WorkspaceCounters", "Arg", "ptr", "i32", "i64", "f32"]

Arg = tuple[object, object]  # (value, ctypes type)
CUDA_ERROR_OUT_OF_MEMORY = 2
CU_MEMHOSTALLOC_DEVICEMAP = 2  # cuMemHostAlloc flag: map the allocation into the device's address space


def ptr(v: int | DeviceArray | DeviceBuffer | None) -> Arg:
    return (0 if v is None else int(v if isinstance(v, int) else v.ptr), ctypes.c_void_p)


def i32(v: int) -> Arg:
    return (int(v), ctypes.c_int)


def i64(v: int) -> Arg:
    return (int(v), ctypes.c_longlong)


def f32(v: float) -> Arg:
    return (float(v), ctypes.c_float)


DeviceArray = DeviceTensor  # the ABI's typed device tensor; kernels take and return these


class CudaAllocator(Allocator):
    """cuMemAlloc/cuMemFree and explicit cuMemcpy transfers, under ort_abi's ownership rules.

    `mapped=True`: pinned host memory mapped into the device (`cuMemHostAlloc(CU_MEMHOSTALLOC_DEVICEMAP)`,
    the kernels' pointer from `cuMemHostGetDevicePointer`), host-visible in place (`DeviceBuffer.numpy()`);
    an AllocationError where the driver binding has no cuMemHostAlloc."""

    def __init__(self, runtime: CudaRuntime, ep: EpIdentity, *, mapped: bool = False) -> None:
        super().__init__(ep, Device("cuda", runtime.device.ordinal))
        self._rt = runtime
        self.mapped = mapped

    def _alloc(self, nbytes: int) -> tuple[Any, int]:
        self._rt.capture.refuse(f"a {nbytes}-byte device allocation")
        self._rt.activate()
        if self.mapped:
            return self._alloc_mapped(nbytes)
        result = self._rt._driver.cuMemAlloc(max(nbytes, 1))
        if int(result[0]) == CUDA_ERROR_OUT_OF_MEMORY:
            free, total = self._rt.memory_info()
            raise AllocationError(
                f"cuda:{self._rt.device.ordinal} is out of memory: cuMemAlloc of {nbytes} bytes failed with "
                f"{free} of {total} bytes free (cuMemGetInfo); lower the budget below the free memory, or free "
                "device memory held by other processes")
        p = int(_check(result, f"cuMemAlloc({nbytes})"))
        return p, p

    def _alloc_mapped(self, nbytes: int) -> tuple[Any, int]:
        driver = self._rt._driver
        if not hasattr(driver, "cuMemHostAlloc") or not hasattr(driver, "cuMemHostGetDevicePointer"):
            raise AllocationError(f"cuda:{self._rt.device.ordinal}: this driver binding has no cuMemHostAlloc / "
                                  "cuMemHostGetDevicePointer, so mapped (host-visible) memory is unavailable; use the "
                                  "device allocator")
        result = driver.cuMemHostAlloc(max(nbytes, 1), CU_MEMHOSTALLOC_DEVICEMAP)
        if int(result[0]) != 0:
            raise AllocationError(f"cuda:{self._rt.device.ordinal}: cuMemHostAlloc of {nbytes} mapped bytes failed "
                                  f"(error {int(result[0])}); pinned host memory is limited: lower the request")
        host = int(result[1])
        try:
            device_ptr = int(_check(driver.cuMemHostGetDevicePointer(host, 0), "cuMemHostGetDevicePointer"))
        except Exception:
            driver.cuMemFreeHost(host)
            raise
        return (host, nbytes), device_ptr

    def _host_view(self, handle: Any, offset: int, nbytes: int) -> np.ndarray:
        host, size = handle
        if offset < 0 or offset + nbytes > size:
            raise ValueError(f"mapped view [{offset}, {offset + nbytes}) is outside the {size}-byte allocation")
        if nbytes == 0:
            return np.empty(0, np.uint8)
        return np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(host + offset))

    def _free(self, handle: Any) -> None:
        if self.mapped:
            _check(self._rt._driver.cuMemFreeHost(handle[0]), "cuMemFreeHost")
            return
        _check(self._rt._driver.cuMemFree(handle), "cuMemFree")

    def _write(self, handle: Any, offset: int, src: np.ndarray) -> None:
        if src.nbytes and self.mapped:
            self._rt.capture.refuse(f"a {src.nbytes}-byte host write to mapped memory")
            self._host_view(handle, offset, src.nbytes)[...] = src
            return
        if src.nbytes:
            self._rt.capture.refuse(f"a {src.nbytes}-byte host-to-device copy")
            _check(self._rt._driver.cuMemcpyHtoD(handle + offset, src, src.nbytes), "cuMemcpyHtoD")

    def _read(self, handle: Any, offset: int, dst: np.ndarray) -> None:
        if dst.nbytes and self.mapped:
            self._rt.capture.refuse(f"a {dst.nbytes}-byte host read of mapped memory")
            self._rt.synchronize()  # the kernels' writes are done
            dst[...] = self._host_view(handle, offset, dst.nbytes)
            return
        if dst.nbytes:
            self._rt.capture.refuse(f"a {dst.nbytes}-byte device-to-host copy")
            self._rt.synchronize()
            _check(self._rt._driver.cuMemcpyDtoH(dst, handle + offset, dst.nbytes), "cuMemcpyDtoH")


@attrs.define
class WorkspaceCounters:
    """Which workspace each kernel call got, and the bytes it really used."""

    planned: int = 0
    scratch: int = 0
    bytes_used: int = 0
    last: dict[str, tuple[str, int]] = attrs.field(factory=dict)  # node -> (source, bytes)

    def record(self, node: str, source: str, nbytes: int) -> None:
        if source == "planned":
            self.planned += 1
        elif source == "scratch":
            self.scratch += 1
        self.bytes_used += nbytes
        self.last[node] = (source, nbytes)


def _check(result, what: str):
    err, *values = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        from cuda.bindings import driver

        _, name = driver.cuGetErrorName(err)
        raise KernelLaunchError(f"{what} failed: {name.decode() if isinstance(name, bytes) else name}")
    return values[0] if len(values) == 1 else (tuple(values) if values else None)


class CudaRuntime:
    """One device's primary context, its loaded kernels and its allocations."""

    def __init__(self, device: DeviceInfo, cache: KernelCache | None = None, identity: EpIdentity | None = None,
                 driver: Any = None) -> None:
        if driver is None:  # tests pass a recording stand-in; production uses the real binding
            from cuda.bindings import driver

        self.device = device
        self.cache = cache or default_cache()
        self._driver = driver
        self._dev = _check(driver.cuDeviceGet(device.ordinal), "cuDeviceGet")
        self._ctx = _check(driver.cuDevicePrimaryCtxRetain(self._dev), "cuDevicePrimaryCtxRetain")
        self._modules: dict[str, object] = {}
        self._functions: dict[tuple[str, str], object] = {}
        self.counters = WorkspaceCounters()
        self.capture = StreamCapture(self)  # the Capture surface: CUDA graphs
        self.activate()
        self.allocator = CudaAllocator(self, identity or EpIdentity("CUDAExecutionProvider", "cuda", device.ordinal))
        self._mapped: CudaAllocator | None = None
        self._transfers: Any = None

    @property
    def transfers(self) -> Any:
        """The asynchronous transfer surface (`ort_abi.DeviceTransfers`): a copy stream, events, pinned staging."""
        if self._transfers is None:
            from ._transfers import CudaTransfers

            self._transfers = CudaTransfers(self)
        return self._transfers

    @property
    def mapped_allocator(self) -> CudaAllocator:
        """The mapped (host-visible, pinned) allocator of this device, made on first use."""
        if self._mapped is None:
            self._mapped = CudaAllocator(self, self.allocator.ep, mapped=True)
        return self._mapped

    @property
    def driver(self) -> Any:
        return self._driver

    def check(self, result: Any, what: str) -> Any:
        """The values of a driver call's result, or KernelLaunchError naming the call and the error."""
        return _check(result, what)

    @property
    def arch(self) -> str:
        return self.device.profile.arch

    def memory_info(self) -> tuple[int | None, int | None]:
        """(free, total) bytes of the device per cuMemGetInfo; (None, None) when the driver cannot say."""
        try:
            free, total = _check(self._driver.cuMemGetInfo(), "cuMemGetInfo")
            return int(free), int(total)
        except Exception:
            return None, None

    def activate(self) -> None:
        _check(self._driver.cuCtxSetCurrent(self._ctx), "cuCtxSetCurrent")

    # -- memory: every allocation is an ort_abi DeviceBuffer from self.allocator -------------------
    def empty(self, shape: Sequence[int], dtype=np.float32) -> DeviceArray:
        return empty_tensor(self.allocator, shape, dtype)

    def release(self, arr: DeviceArray) -> None:
        self.allocator.free(arr.buffer)

    def to_device(self, host: np.ndarray) -> DeviceArray:
        """Explicit host -> device copy into a new owned array."""
        return tensor_from_host(self.allocator, host)

    def to_host(self, arr: DeviceArray) -> np.ndarray:
        """Explicit device -> host copy (waits for the work queued before it)."""
        return tensor_to_host(arr)

    # -- kernels ----------------------------------------------------------------------------------
    def function(self, source: str, entry: str):
        key = (source, entry)
        fn = self._functions.get(key)
        if fn is None:
            if entry not in KERNEL_SOURCES[source].entry_points:
                raise CudaEpError(f"{entry!r} is not an entry point of {source!r}")
            mod = self._modules.get(source)
            if mod is None:
                cubin = self.cache.get(source, self.arch).cubin
                self.activate()
                mod = _check(self._driver.cuModuleLoadData(cubin), f"cuModuleLoadData({source})")
                self._modules[source] = mod
            fn = _check(self._driver.cuModuleGetFunction(mod, entry.encode()), f"cuModuleGetFunction({entry})")
            self._functions[key] = fn
        return fn

    def launch(self, source: str, entry: str, grid: Sequence[int], block: Sequence[int], args: Sequence[Arg],
               shared_bytes: int = 0) -> None:
        gx, gy, gz = (list(grid) + [1, 1])[:3]
        bx, by, bz = (list(block) + [1, 1])[:3]
        if min(gx, gy, gz) <= 0:
            return  # nothing to do for an empty launch
        if gy > 65535 or gz > 65535 or gx > 2**31 - 1:
            raise KernelLaunchError(f"grid {tuple(grid)!r} for {entry!r} exceeds the CUDA grid limits")
        fn = self.function(source, entry)
        values = tuple(a[0] for a in args)
        types = tuple(a[1] for a in args)
        self.activate()
        stream = self.capture.stream if self.capture.active else 0  # a capture records instead of running
        _check(self._driver.cuLaunchKernel(fn, gx, gy, gz, bx, by, bz, shared_bytes, stream, (values, types), 0),
               f"cuLaunchKernel({entry})")
        if self.capture.active:
            self.capture.launches += 1

    def synchronize(self) -> None:
        _check(self._driver.cuCtxSynchronize(), "cuCtxSynchronize")

    def close(self) -> None:
        if self._transfers is not None:
            self._transfers.close()
        self.capture.close()
        for mod in self._modules.values():
            self._driver.cuModuleUnload(mod)
        self._modules.clear()
        self._functions.clear()
        self._driver.cuDevicePrimaryCtxRelease(self._dev)
