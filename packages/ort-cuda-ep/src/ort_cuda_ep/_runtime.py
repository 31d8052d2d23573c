"""The GPU side: a driver context, device memory with explicit ownership, copies and launches.

Only usable where ``discover()`` found a device. Host<->device copies are explicit calls; a
DeviceArray is owned by the CudaRuntime that allocated it and is freed exactly once through it.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Sequence

import attrs
import numpy as np

from ._compile import KERNEL_SOURCES, KernelCache, default_cache
from ._device import DeviceInfo
from ._errors import CudaEpError, KernelLaunchError

__all__ = ["DeviceArray", "CudaRuntime", "WorkspaceCounters", "Arg", "ptr", "i32", "i64", "f32"]

Arg = tuple[object, object]  # (value, ctypes type)


def ptr(v: int | DeviceArray | None) -> Arg:
    return (0 if v is None else int(v.ptr if isinstance(v, DeviceArray) else v), ctypes.c_void_p)


def i32(v: int) -> Arg:
    return (int(v), ctypes.c_int)


def i64(v: int) -> Arg:
    return (int(v), ctypes.c_longlong)


def f32(v: float) -> Arg:
    return (float(v), ctypes.c_float)


@attrs.define(eq=False)
class DeviceArray:
    """A tensor in device memory. ``owned`` arrays are freed exactly once by their runtime;
    views (``owned=False``) borrow memory and free nothing."""

    ptr: int
    shape: tuple[int, ...]
    dtype: np.dtype
    runtime: CudaRuntime | None = attrs.field(repr=False)
    owned: bool = True
    freed: bool = False

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def view(self, shape: Sequence[int]) -> DeviceArray:
        """A borrowed view with another shape over the same bytes."""
        new = DeviceArray(self.ptr, tuple(int(d) for d in shape), self.dtype, self.runtime, owned=False)
        if new.nbytes != self.nbytes:
            raise CudaEpError(f"view shape {tuple(shape)!r} does not cover the {self.nbytes} bytes of {self.shape!r}")
        return new


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

    def __init__(self, device: DeviceInfo, cache: KernelCache | None = None) -> None:
        from cuda.bindings import driver

        self.device = device
        self.cache = cache or default_cache()
        self._driver = driver
        self._dev = _check(driver.cuDeviceGet(device.ordinal), "cuDeviceGet")
        self._ctx = _check(driver.cuDevicePrimaryCtxRetain(self._dev), "cuDevicePrimaryCtxRetain")
        self._modules: dict[str, object] = {}
        self._functions: dict[tuple[str, str], object] = {}
        self._live: dict[int, int] = {}  # ptr -> bytes, owned allocations not yet freed
        self._lock = threading.Lock()
        self.counters = WorkspaceCounters()
        self.activate()

    @property
    def arch(self) -> str:
        return self.device.profile.arch

    def activate(self) -> None:
        _check(self._driver.cuCtxSetCurrent(self._ctx), "cuCtxSetCurrent")

    # -- memory -----------------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> int:
        self.activate()
        p = int(_check(self._driver.cuMemAlloc(max(int(nbytes), 1)), f"cuMemAlloc({nbytes})"))
        with self._lock:
            self._live[p] = int(nbytes)
        return p

    def free(self, p: int) -> None:
        with self._lock:
            if p not in self._live:
                raise CudaEpError(f"free of pointer {p:#x} that this runtime does not own (double free, or another EP's memory)")
            del self._live[p]
        _check(self._driver.cuMemFree(p), "cuMemFree")

    def empty(self, shape: Sequence[int], dtype=np.float32) -> DeviceArray:
        dt = np.dtype(dtype)
        shape = tuple(int(d) for d in shape)
        return DeviceArray(self.alloc(int(np.prod(shape, dtype=np.int64)) * dt.itemsize), shape, dt, self)

    def release(self, arr: DeviceArray) -> None:
        if not arr.owned:
            raise CudaEpError("release of a borrowed view: free the array that owns the memory instead")
        if arr.runtime is not self:
            raise CudaEpError("release through a runtime that did not allocate the array (cross-device or cross-EP free)")
        if arr.freed:
            raise CudaEpError(f"double free of device array {arr.shape!r} at {arr.ptr:#x}")
        self.free(arr.ptr)
        arr.freed = True

    def live_bytes(self) -> int:
        return sum(self._live.values())

    def to_device(self, host: np.ndarray) -> DeviceArray:
        host = np.ascontiguousarray(host)
        arr = self.empty(host.shape, host.dtype)
        if host.nbytes:
            _check(self._driver.cuMemcpyHtoD(arr.ptr, host, host.nbytes), "cuMemcpyHtoD")
        return arr

    def to_host(self, arr: DeviceArray) -> np.ndarray:
        out = np.empty(arr.shape, arr.dtype)
        if out.nbytes:
            self.synchronize()
            _check(self._driver.cuMemcpyDtoH(out, arr.ptr, out.nbytes), "cuMemcpyDtoH")
        return out

    def memset(self, p: int, nbytes: int) -> None:
        if nbytes:
            _check(self._driver.cuMemsetD8(p, 0, nbytes), "cuMemsetD8")

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
        _check(self._driver.cuLaunchKernel(fn, gx, gy, gz, bx, by, bz, shared_bytes, 0, (values, types), 0),
               f"cuLaunchKernel({entry})")

    def synchronize(self) -> None:
        _check(self._driver.cuCtxSynchronize(), "cuCtxSynchronize")

    def close(self) -> None:
        for mod in self._modules.values():
            self._driver.cuModuleUnload(mod)
        self._modules.clear()
        self._functions.clear()
        self._driver.cuDevicePrimaryCtxRelease(self._dev)
