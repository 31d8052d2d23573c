"""A recording stand-in for ``cuda.bindings.driver``, for tests of the CUDA EP's plumbing on machines
without a GPU: memory is host-backed and bounds-checked (a pointer outside every live allocation
fails the call), copies and launches are recorded, kernels do not execute. Not for production."""

from __future__ import annotations

import ctypes

import numpy as np

__all__ = ["RecordingDriver", "fake_device"]


def fake_device(profile: str = "a100", driver_version: int = 13000):
    """A DeviceInfo for `profile` as discovery would report it (for monkeypatching ``discover``)."""
    from ._device import DeviceInfo
    from ._profiles import get_profile

    p = get_profile(profile)
    return DeviceInfo(0, p.display_name, p, driver_version)


class RecordingDriver:
    def __init__(self):
        self.memory: dict[int, bytearray] = {}
        self.next = 0x10000
        self.calls: list[tuple] = []
        self.pointers: list[int] = []  # every pointer argument of every launch, in order
        self.modules: dict[int, bytes] = {}

    def _ok(self, *values):
        return (0, *values)

    def cuDeviceGet(self, ordinal):
        return self._ok(ordinal)

    def cuDevicePrimaryCtxRetain(self, dev):
        return self._ok("ctx")

    def cuDevicePrimaryCtxRelease(self, dev):
        return self._ok()

    def cuCtxSetCurrent(self, ctx):
        return self._ok()

    def cuCtxSynchronize(self):
        return self._ok()

    def cuMemAlloc(self, n):
        p = self.next
        self.next += (n + 255) // 256 * 256 + 256
        self.memory[p] = bytearray(n)
        return self._ok(p)

    def cuMemFree(self, p):
        assert p in self.memory, "free of an unknown pointer"
        del self.memory[p]
        return self._ok()

    def _find(self, p):
        for base, mem in self.memory.items():
            if base <= p < base + max(len(mem), 1):
                return mem, p - base
        raise AssertionError(f"pointer {p:#x} is not allocated")

    def cuMemcpyHtoD(self, dst, src, n):
        mem, off = self._find(dst)
        mem[off:off + n] = np.asarray(src).reshape(-1).view(np.uint8).tobytes()[:n]
        self.calls.append(("HtoD", n))
        return self._ok()

    def cuMemcpyDtoH(self, dst, src, n):
        mem, off = self._find(src)
        np.asarray(dst).reshape(-1).view(np.uint8)[:n] = np.frombuffer(bytes(mem[off:off + n]), np.uint8)
        self.calls.append(("DtoH", n))
        return self._ok()

    def cuModuleLoadData(self, image):
        assert bytes(image[:4]) == b"\x7fELF"
        h = len(self.modules) + 1
        self.modules[h] = bytes(image)
        return self._ok(h)

    def cuModuleGetFunction(self, mod, name):
        assert name in self.modules[mod], f"{name!r} not in the loaded cubin"
        return self._ok((mod, name.decode()))

    def cuModuleUnload(self, mod):
        return self._ok()

    def cuLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, shmem, stream, params, extra):
        values, types = params
        assert len(values) == len(types) and all(t in (ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong, ctypes.c_float)
                                                 for t in types)
        for v, t in zip(values, types, strict=True):
            if t is ctypes.c_void_p and v:
                self._find(v)  # every pointer argument points into live memory
                self.pointers.append(int(v))
        self.calls.append(("launch", fn[1], (gx, gy, gz), (bx, by, bz)))
        return self._ok()

    # events, for gpu_check.py's timing loop (every kernel 'takes' 0.5 ms)
    def cuEventCreate(self, flags):
        return self._ok(object())

    def cuEventRecord(self, ev, stream):
        return self._ok()

    def cuEventSynchronize(self, ev):
        return self._ok()

    def cuEventElapsedTime(self, a, b):
        return self._ok(0.5)

    def cuEventDestroy(self, ev):
        return self._ok()
