"""Test doubles for the CUDA EP's plumbing on machines without a GPU (not for production):

- ``RecordingDriver``: a stand-in for ``cuda.bindings.driver``; memory is host-backed and bounds-checked
  (a pointer outside every live allocation fails the call), copies and launches are recorded, kernels
  do not execute. A whole session can run on it. Stream capture records the launches into a graph
  (``cuStreamBeginCapture`` .. ``cuStreamEndCapture``) and ``cuGraphLaunch`` replays them in order.
- ``RecordingRuntime``: a stand-in for ``CudaRuntime`` over host-backed device memory; every launch is
  checked against the kernel's ``.cu`` signature and recorded (``launches``); ``resolve(ptr)`` maps a
  device address back to its host backing, so tests can emulate a kernel's semantics on the recorded
  arguments.
- ``emulate_gqa``: gqa.cu's three kernels transliterated to numpy (same index math, block/split/chunk
  structure and float32 arithmetic), run on the arguments of a recorded launch.
"""

from __future__ import annotations

import ctypes
import functools
import re
from typing import Any

import numpy as np

from ort_abi import EpIdentity, HazardTracker, NullDeviceAllocator

from ._driver_streams import AsyncCopies
from ._emulate_gqa import emulate_gqa

__all__ = ["EmulatingDriver", "EmulatingRuntime", "RecordingDriver", "RecordingRuntime", "SIGNATURES", "emulate_gqa", "fake_device", "install_driver",
           "kernel_signatures", "run_with_reference"]

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

    def array_at(self, pointer: int, dtype) -> np.ndarray:
        """The device memory from `pointer` to the end of its allocation, as a writable 1-D `dtype` array."""
        handle, offset = self.resolve(pointer)
        return _tail(handle, offset, dtype)

    def launch(self, source: str, entry: str, grid, block, args, shared_bytes: int = 0) -> None:
        from ._compile import KERNEL_SOURCES

        assert entry in KERNEL_SOURCES[source].entry_points, f"{entry!r} is not an entry point of {source!r}"
        assert [t for _, t in args] == SIGNATURES[entry], f"{entry}: argument types differ from the .cu signature"
        self.launches.append((entry, tuple(grid), tuple(block), [v for v, _ in args]))


class EmulatingRuntime(RecordingRuntime):
    """A RecordingRuntime whose launches also run, in numpy, as the kernels do: the data-movement,
    where/isnan, reduction, unary/binary, matmul, softmax, norm, MatMulNBits, MultiHeadAttention
    (``_emulate``), GroupQueryAttention (``emulate_gqa``), Conv and PackedAttention
    (``_emulate_conv_packed``) kernels, i.e. every kernel.
    Every read and write is bounds-checked against its allocation."""

    def launch(self, source: str, entry: str, grid, block, args, shared_bytes: int = 0) -> None:
        super().launch(source, entry, grid, block, args, shared_bytes)
        _emulate_launch(entry, [v for v, _ in args], tuple(grid), self.resolve, self.array_at)


def _emulate_launch(entry: str, values: list[Any], grid: tuple[int, ...], resolve: Any, array_at: Any) -> None:
    from ._emulate import (
        COMPUTE_PREFIXES,
        SIMPLE_PREFIXES,
        emulate_attention,
        emulate_compute,
        emulate_simple,
    )
    from ._emulate_conv_packed import CONV_PACKED_PREFIXES, emulate_conv, emulate_packed_attention

    if entry.startswith("gqa_"):
        emulate_gqa(entry, values, array_at)
    elif entry.startswith("conv2d_"):
        emulate_conv(entry, values, (list(grid) + [1, 1])[:3], resolve)  # type: ignore[arg-type]
    elif entry.startswith(CONV_PACKED_PREFIXES):
        emulate_packed_attention(entry, values, (list(grid) + [1, 1])[:3], resolve)  # type: ignore[arg-type]
    elif entry.startswith("attn_"):
        emulate_attention(entry, values, resolve)
    elif entry.startswith(SIMPLE_PREFIXES):
        emulate_simple(entry, values, resolve)
    elif entry.startswith(COMPUTE_PREFIXES):
        emulate_compute(entry, values, (list(grid) + [1, 1])[:3], resolve)
    else:
        raise AssertionError(f"no emulation for {entry!r}")


def run_with_reference(op: str, inputs: list[Any], attrs: dict[str, Any] | None = None, opset: int = 17,
                       n_outputs: int = 1) -> tuple[list[np.ndarray], list[np.ndarray], EmulatingRuntime]:
    """One ai.onnx op through its launch code on an EmulatingRuntime (host inputs stay numpy arrays, other
    inputs are uploaded) and through onnx.reference; returns (ours, reference, runtime)."""
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    from ort_abi import DeviceTensor, tensor_from_host, tensor_to_host

    from ._launch import ScratchOnly, compute
    from ._ops import find_spec

    rt = EmulatingRuntime()
    spec = find_spec(op, "", opset)
    if spec is None:
        raise AssertionError(f"no CUDA kernel for {op!r} at opset {opset}")
    args = [None if a is None else (np.asarray(a) if i in spec.host_inputs else tensor_from_host(rt.allocator, np.asarray(a)))
            for i, a in enumerate(inputs)]

    def new(i: int, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        return np.empty(shape, dtype) if i in spec.host_outputs else rt.empty(shape, dtype)

    outs = compute(rt, spec, "n", args, attrs or {}, ScratchOnly(rt), n_outputs, out=new)
    ours = [tensor_to_host(o) if isinstance(o, DeviceTensor) else o for o in outs]
    names = [f"i{k}" if a is not None else "" for k, a in enumerate(inputs)]
    node = helper.make_node(op, names, [f"y{k}" for k in range(n_outputs)], **(attrs or {}))
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(np.asarray(a).dtype), None)
           for n, a in zip(names, inputs) if n]
    outs_info = [helper.make_tensor_value_info(f"y{k}", 0, None) for k in range(n_outputs)]
    model = helper.make_model(helper.make_graph([node], "g", ins, outs_info), opset_imports=[helper.make_opsetid("", opset)])
    ref = ReferenceEvaluator(model).run(None, {n: np.asarray(a) for n, a in zip(names, inputs) if n})
    return ours, list(ref), rt


def _tail(raw: np.ndarray, offset: int, dtype) -> np.ndarray:
    item = np.dtype(dtype).itemsize
    assert offset % item == 0, f"a {np.dtype(dtype)} pointer at byte offset {offset} is misaligned"
    return raw[offset: offset + (raw.nbytes - offset) // item * item].view(dtype)


def install_driver(monkeypatch: Any, driver: Any, profile: str = "a100") -> Any:
    """Make every CudaExecutionProvider created from now on (e.g. by a session) discover a `profile` GPU
    and run on `driver` (a RecordingDriver); `monkeypatch` is pytest's fixture. Returns `driver`."""
    import ort_cuda_ep._ep as ep_module

    from ._runtime import CudaRuntime

    monkeypatch.setattr(ep_module, "discover", lambda device_id=0: fake_device(profile))
    monkeypatch.setattr(ep_module, "CudaRuntime",
                        lambda device, cache, identity: CudaRuntime(device, cache, identity, driver=driver))
    return driver


def fake_device(profile: str = "a100", driver_version: int = 13000):
    """A DeviceInfo for `profile` as discovery would report it (for monkeypatching ``discover``)."""
    from ort_partition import get_profile

    from ._device import DeviceInfo

    p = get_profile(profile)
    return DeviceInfo(0, p.display_name, p, driver_version)


class RecordingDriver(AsyncCopies):
    def __init__(self):
        self.memory: dict[int, bytearray] = {}
        self.next = 0x10000
        self.calls: list[tuple] = []
        self.pointers: list[int] = []  # every pointer argument of every launch, in order
        self.capacity: int | None = None  # device bytes; cuMemAlloc beyond them fails out of memory
        self.modules: dict[int, bytes] = {}
        self.capturing: Any = None  # the stream a capture is open on
        self.mapped: set[int] = set()  # cuMemHostAlloc'd addresses
        self._graph: list[tuple] = []  # the launches it recorded so far
        # asynchronous copies complete only once something is ordered after them (an event waited on, a
        # synchronize); a launch reading, or a copy overwriting, bytes out of order is a StreamOrderError
        self.hazards = HazardTracker()

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
        self.hazards.synchronize()
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
        assert p in self.memory and p not in self.mapped, "cuMemFree of an unknown (or a mapped host) pointer"
        del self.memory[p]
        return self._ok()

    # mapped (pinned, device-visible) host memory: real host bytes, at the same address for host and device (UVA)
    def cuMemHostAlloc(self, n, flags):
        assert flags & 2, "mapped memory needs CU_MEMHOSTALLOC_DEVICEMAP"
        buf = (ctypes.c_char * n)()
        p = ctypes.addressof(buf)
        self.memory[p] = buf
        self.mapped.add(p)
        self.calls.append(("host_alloc", n))
        return self._ok(p)

    def cuMemHostGetDevicePointer(self, p, flags):
        assert p in self.mapped, "not a mapped host allocation"
        return self._ok(p)

    def cuMemFreeHost(self, p):
        assert p in self.mapped, "cuMemFreeHost of an unknown pointer"
        self.mapped.discard(p)
        del self.memory[p]
        return self._ok()

    def _find(self, p):
        for base, mem in self.memory.items():
            if base <= p < base + max(len(mem), 1):
                return mem, p - base
        raise AssertionError(f"pointer {p:#x} is not allocated")

    def array_at(self, pointer: int, dtype) -> np.ndarray:
        """The memory from `pointer` to the end of its allocation, as a writable 1-D `dtype` array."""
        mem, offset = self._find(pointer)
        return _tail(np.frombuffer(mem, np.uint8), offset, dtype)

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
        if self.capturing is not None and stream == self.capturing:  # recorded into the graph, not run
            self._graph.append((fn, gx, gy, gz, bx, by, bz, shmem, params, extra))
            self.calls.append(("capture", fn[1]))
            return self._ok()
        assert self.capturing is None or stream != 0, "a launch on the legacy stream while a capture is open"
        self.hazards.launch(stream, [(None, int(v), int(v) + 1) for v, t in zip(values, types, strict=True)
                                     if t is ctypes.c_void_p and v], f"kernel {fn[1]!r}")
        self.calls.append(("launch", fn[1], (gx, gy, gz), (bx, by, bz)))
        return self._ok()

    # CUDA graphs: a capture records the launches into its stream; a graph launch replays them in order
    def cuStreamCreate(self, flags):
        self.calls.append(("stream_create", flags))
        return self._ok(f"stream{sum(c[0] == 'stream_create' for c in self.calls)}")

    def cuStreamDestroy(self, stream):
        return self._ok()

    def cuStreamSynchronize(self, stream):
        self.hazards.complete(self.hazards.record(stream))
        return self._ok()

    def cuStreamBeginCapture(self, stream, mode):
        assert self.capturing is None, "a second capture while one is open"
        assert stream != 0, "the legacy stream cannot be captured"
        self.capturing, self._graph = stream, []
        self.calls.append(("begin_capture", stream))
        return self._ok()

    def cuStreamEndCapture(self, stream):
        assert stream == self.capturing, "end of a capture that is not open on this stream"
        self.capturing = None
        self.calls.append(("end_capture", len(self._graph)))
        return self._ok(list(self._graph))

    def cuGraphInstantiate(self, graph, flags):
        return self._ok(("exec", tuple(graph)))

    def cuGraphLaunch(self, executable, stream):
        _, launches = executable
        self.calls.append(("graph_launch", len(launches)))
        for fn, gx, gy, gz, bx, by, bz, shmem, params, extra in launches:
            self.cuLaunchKernel(fn, gx, gy, gz, bx, by, bz, shmem, stream, params, extra)
        return self._ok()

    def cuGraphExecDestroy(self, executable):
        self.calls.append(("graph_destroy",))
        return self._ok()

    def cuGraphDestroy(self, graph):
        return self._ok()

    def resolve(self, pointer: int) -> tuple[np.ndarray, int]:
        mem, offset = self._find(pointer)
        return np.frombuffer(mem, np.uint8), offset



class EmulatingDriver(RecordingDriver):
    """A RecordingDriver whose launches also run in numpy as the kernels do (every kernel): a whole
    session on it computes real outputs, so a model split across the "device" and the CPU can be compared
    with a CPU-only run without a GPU."""

    def cuLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, shmem, stream, params, extra):
        result = super().cuLaunchKernel(fn, gx, gy, gz, bx, by, bz, shmem, stream, params, extra)
        if self.capturing is not None and stream == self.capturing:
            return result  # recorded: it runs when the graph is launched
        _emulate_launch(fn[1], list(params[0]), (gx, gy, gz), self.resolve, self.array_at)
        return result
