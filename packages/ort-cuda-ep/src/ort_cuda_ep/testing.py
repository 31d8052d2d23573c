"""Test doubles for the CUDA EP's plumbing on machines without a GPU (not for production):

- ``RecordingDriver``: a stand-in for ``cuda.bindings.driver``; memory is host-backed and bounds-checked
  (a pointer outside every live allocation fails the call), copies and launches are recorded, kernels
  do not execute. A whole session can run on it.
- ``RecordingRuntime``: a stand-in for ``CudaRuntime`` over host-backed device memory; every launch is
  checked against the kernel's ``.cu`` signature and recorded (``launches``); ``resolve(ptr)`` maps a
  device address back to its host backing, so tests can emulate a kernel's semantics on the recorded
  arguments.
"""

from __future__ import annotations

import ctypes
import functools
import re
from typing import Any

import numpy as np

from ort_abi import EpIdentity, NullDeviceAllocator

__all__ = ["RecordingDriver", "RecordingRuntime", "SIGNATURES", "fake_device", "kernel_signatures"]

_CTYPE = {"ptr": ctypes.c_void_p, "int": ctypes.c_int, "long long": ctypes.c_longlong, "float": ctypes.c_float}


@functools.cache
def kernel_signatures() -> dict[str, list[type]]:
    """Entry point -> ctypes of its parameters, parsed from the ``.cu`` sources."""
    from ._compile import KERNEL_SOURCES

    out = {}
    for src in KERNEL_SOURCES.values():
        text = src.text()
        for entry in src.entry_points:
            m = re.search(r"\b" + entry + r"\s*\(([^)]*)\)", text)
            if m is None:
                raise AssertionError(f"entry point {entry!r} not found in {src.file}")
            types = []
            for param in m.group(1).split(","):
                p = " ".join(param.replace("__restrict__", "").split())
                types.append(_CTYPE["ptr"] if "*" in p else _CTYPE[p.rsplit(" ", 1)[0].replace("const ", "")])
            out[entry] = types
    return out


SIGNATURES = kernel_signatures()


class _AddressedAllocator(NullDeviceAllocator):
    """Host-backed device memory with disjoint address ranges, resolvable back to the backing array."""

    def __init__(self) -> None:
        super().__init__(EpIdentity("CUDAExecutionProvider", "cuda", 0))
        self._bases: dict[int, np.ndarray] = {}
        self._top = 0x10000

    def _alloc(self, nbytes: int) -> tuple[Any, int]:
        handle = np.zeros(nbytes, np.uint8)
        address = self._top
        self._top += (nbytes + 511) // 256 * 256 + 256
        self._bases[address] = handle
        return handle, address

    def _free(self, handle: Any) -> None:
        for address, h in list(self._bases.items()):
            if h is handle:
                del self._bases[address]

    def resolve(self, pointer: int) -> tuple[np.ndarray, int]:
        for base, handle in self._bases.items():
            if base <= pointer <= base + handle.nbytes:
                return handle, pointer - base
        raise AssertionError(f"pointer {pointer:#x} is not in any live allocation")


class RecordingRuntime:
    """A CudaRuntime stand-in: allocations from host-backed device memory; launches checked and recorded."""

    def __init__(self, profile: str = "a100") -> None:
        from ._runtime import WorkspaceCounters

        self.allocator = _AddressedAllocator()
        self.device = fake_device(profile)
        self.counters = WorkspaceCounters()
        self.launches: list[tuple[str, tuple[int, ...], tuple[int, ...], list[Any]]] = []

    def empty(self, shape, dtype=np.float32):
        from ort_abi import empty_tensor

        return empty_tensor(self.allocator, shape, dtype)

    def to_device(self, host: np.ndarray):
        from ort_abi import tensor_from_host

        return tensor_from_host(self.allocator, host)

    def to_host(self, arr) -> np.ndarray:
        from ort_abi import tensor_to_host

        return tensor_to_host(arr)

    def release(self, arr) -> None:
        self.allocator.free(arr.buffer)

    def resolve(self, pointer: int) -> tuple[np.ndarray, int]:
        return self.allocator.resolve(pointer)

    def launch(self, source: str, entry: str, grid, block, args, shared_bytes: int = 0) -> None:
        from ._compile import KERNEL_SOURCES

        assert entry in KERNEL_SOURCES[source].entry_points, f"{entry!r} is not an entry point of {source!r}"
        assert [t for _, t in args] == SIGNATURES[entry], f"{entry}: argument types differ from the .cu signature"
        self.launches.append((entry, tuple(grid), tuple(block), [v for v, _ in args]))


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
        self.capacity: int | None = None  # device bytes; cuMemAlloc beyond them fails out of memory
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

    def cuMemGetInfo(self):
        used = sum(len(m) for m in self.memory.values())
        total = self.capacity if self.capacity is not None else 80 << 30
        return self._ok(total - used, total)

    def cuMemAlloc(self, n):
        if self.capacity is not None and sum(len(m) for m in self.memory.values()) + n > self.capacity:
            return (2, None)  # CUDA_ERROR_OUT_OF_MEMORY
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
