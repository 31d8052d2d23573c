"""The CPU execution provider and a simulated GPU, both registered through the ort-abi registry.

Every in-tree numpy op (`ort_cpu_ep.ops`) is one `KernelRegistry.add_kernel_v2` entry whose state is
its OpImpl, whose estimate function is the op's workspace recipe, and whose kernels declare the same
recipe at Level 2 — the path C and CUDA kernels take too. Kernels from loaded C libraries sit in a
registry consulted first. Claims are honest: a node is taken only if a kernel handles its op, opset,
dtypes and attributes; otherwise the decline says what was rejected, what is accepted and a remedy.

The simulated GPU (tinygrad's null-device idea) is a device whose memory the host cannot read: an
ort_abi NullDeviceAllocator held to the device's budget. The same kernels run on it through explicit
staging copies, so machines without a GPU exercise every device path: placement, boundary copies,
per-device plans, weights uploaded once, values in the device arena, and the budget at run time.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import onnx

import ort_abi
from ort_graph import Graph, Node, is_static
from ort_partition import Declined, Supported

from . import _ckernels
from ._device_kernels import SimulatedCaptureSurface, StagedKernel
from ._ep_passes import SiLUFusionSurface
from ._threads import check_thread_count, intra_op_thread_scope, native_thread_scope, resolve_threads
from .ops import InputInfo, OpImpl, all_ops, op_impls
from .ops._interp import _LATEST, _OPSETS, node_opset
from .ops._registry import _OUTPUT, _WORKSPACE
from .ops._util import same_start

MEMCPY_OPS = ("MemcpyFromHost", "MemcpyToHost", "MemcpyDeviceToDevice")
# elements per operand of the buffers numpy allocates for a broadcasting ufunc call (default 8192: up to
# 128 KiB a call, outside any plan); 1024 costs no measurable time and bounds them to a few KiB
UFUNC_BUFSIZE = 1024
_SCOPED_BUFSIZE = np.lib.NumpyVersion(np.__version__) >= "2.0.0"  # numpy 1.x would set it process-wide


@contextlib.contextmanager
def ufunc_bufsize_scope() -> Iterator[None]:
    """The body runs with numpy's ufunc buffer size `UFUNC_BUFSIZE` (numpy >= 2 scopes it to the block;
    numpy 1.x would set it process-wide, so there it is left alone)."""
    with np.errstate():
        if _SCOPED_BUFSIZE:
            np.setbufsize(UFUNC_BUFSIZE)
        token = _IN_BUFSIZE_SCOPE.set(_SCOPED_BUFSIZE)
        try:
            yield
        finally:
            _IN_BUFSIZE_SCOPE.reset(token)


# True inside ufunc_bufsize_scope (numpy >= 2): a kernel needs no scope of its own (np.getbufsize() costs more)
_IN_BUFSIZE_SCOPE: contextvars.ContextVar[bool] = contextvars.ContextVar("ort_cpu_ep_bufsize_scope", default=False)


_ARRAYS = (np.ndarray, np.generic)  # kernel results the provider places into planned blocks (non-object dtypes)


def _static_shapes(shapes: Sequence[Any]) -> list[tuple[int, ...] | None]:
    out = []
    for s in shapes:
        dims = getattr(s, "dims", s)
        out.append(tuple(dims) if dims is not None and all(isinstance(d, int) and d >= 0 for d in dims) else None)
    return out


def node_input_shapes(node: Node) -> list[tuple[int, ...] | None]:
    g = node.graph
    return [tuple(g.values[n].shape) if n and n in g.values and is_static(g.values[n].shape) else None
            for n in node.inputs]


class NumpyKernel:
    """One node's numpy kernel: compute(ctx) through the ABI context, like a C kernel.

    Runs once per node per run, so what depends only on the node is settled here: the model's opset of the
    node's domain and the op's compute for this node (`OpImpl.bind`: attributes read once where the op does so)."""

    def __init__(self, impl: OpImpl, info: ort_abi.KernelInfo) -> None:
        self.impl, self.node = impl, info.node
        opsets = getattr(info.ep, "opsets", {})
        self.opsets = {("" if d == "ai.onnx" else d): int(v) for d, v in opsets.items()}
        # the opset `node_opset(node)` answers while compute runs (it reads self.opsets, or the latest when empty)
        self._compute = impl.bind(self.node, node_opset(self.node, self.opsets or _LATEST))

    def compute(self, ctx: ort_abi.KernelContext) -> None:
        def workspace(slot_id: int, nbytes: int) -> np.ndarray:
            buf = ctx.preallocated_workspace(slot_id, nbytes)
            return buf if buf is not None else ctx.scratch(nbytes)

        # the scopes of workspace_scope / opset_scope / OpImpl.output, set directly: this runs once per node per run
        ws_token, op_token, out_token = _WORKSPACE.set(workspace), _OPSETS.set(self.opsets), _OUTPUT.set(ctx.output)
        try:
            if _IN_BUFSIZE_SCOPE.get():  # the run's scope set the buffer size (run_scope)
                results = self._compute(list(ctx.inputs))
            else:
                with ufunc_bufsize_scope():
                    results = self._compute(list(ctx.inputs))
        finally:
            _OUTPUT.reset(out_token)
            _OPSETS.reset(op_token)
            _WORKSPACE.reset(ws_token)
        given = ctx.outputs
        for i, r in enumerate(results[: ctx.output_count]):
            if r is given[i] and r is not None:
                continue  # computed into the block output() handed out: checked and placed then
            if isinstance(r, _ARRAYS):
                arr = np.asarray(r)
                if arr.dtype.kind != "O":
                    out = ctx.output(i, arr.shape, arr.dtype)
                    if arr.nbytes and not same_start(out, arr):
                        np.copyto(out, arr)  # a kernel that returned a fresh array (or a view): one copy
                        ctx.counters.copied_outputs += 1
                        ctx.counters.copied_output_bytes += int(arr.nbytes)
                    continue
            ctx.outputs[i] = r  # sequences, optionals, strings: not planned

    def declare_workspace(self, shapes: list[ort_abi.WorkspaceInputShape]) -> list[ort_abi.WorkspaceSlot]:
        token = _OPSETS.set(self.opsets)  # a recipe may depend on the opset (Softmax before 13)
        try:
            slots = self.impl.workspace_bytes(self.node, _static_shapes(shapes))
        finally:
            _OPSETS.reset(token)
        return [ort_abi.WorkspaceSlot(slot, nbytes) for slot, nbytes in slots]


def _estimate_for(impl: OpImpl) -> Callable[[Any, Node, Any], int | None]:
    def estimate(api: Any, node: Node, ep: Any) -> int | None:
        shapes = node_input_shapes(node)
        if any(s is None for s, name in zip(shapes, node.inputs) if name):
            return None
        opsets = getattr(ep, "opsets", None)
        token = _OPSETS.set({("" if d == "ai.onnx" else d): int(v) for d, v in opsets.items()}) if opsets else None
        try:
            return sum(b for _slot, b in impl.workspace_bytes(node, shapes))
        finally:
            if token is not None:
                _OPSETS.reset(token)

    return estimate


def _add_op_kernels(registry: ort_abi.KernelRegistry, ep_name: str, impls: Sequence[OpImpl]) -> None:
    """Add the OpImpls of one op (every one registered for it) to `registry` for `ep_name`, their opset
    ranges made disjoint."""
    for k, impl in enumerate(impls := sorted(impls, key=lambda i: i.since)):
        end = impl.until
        if k + 1 < len(impls):
            nxt = impls[k + 1].since - 1
            end = nxt if end is None else min(end, nxt)
        if end is not None and end < impl.since:
            continue
        kdef = (ort_abi.KernelDefBuilder().op_type(impl.op_type).domain(impl.domain).since_version(impl.since, end)
                .ep(ep_name).build())
        overridden = type(impl).workspace_bytes is not OpImpl.workspace_bytes
        registry.add_kernel_v2(kdef, NumpyKernel, impl, _estimate_for(impl) if overridden else None)


def _by_op() -> dict[tuple[str, str], list[OpImpl]]:
    by_op: dict[tuple[str, str], list[OpImpl]] = {}
    for impl in all_ops():
        by_op.setdefault((impl.domain, impl.op_type), []).append(impl)
    return by_op


def register_numpy_kernels(registry: ort_abi.KernelRegistry, ep_name: str) -> ort_abi.KernelRegistry:
    """Add every in-tree OpImpl to `registry` for `ep_name` (opset ranges made disjoint per op)."""
    for impls in _by_op().values():
        _add_op_kernels(registry, ep_name, impls)
    return registry


class BuiltinKernelRegistry(ort_abi.KernelRegistry):
    """`register_numpy_kernels(KernelRegistry(), ep_name)`, filled per op: an op's kernels are added (and its op
    modules imported, `ort_cpu_ep.ops.load_op`) when it is first looked up; iterating adds every op first."""

    def __init__(self, ep_name: str) -> None:
        super().__init__()
        self.ep_name = ep_name
        self._added: set[tuple[str, str]] = set()  # ops whose kernels are in (marked once they all are)
        self._lock = threading.Lock()  # sessions built in threads: a find never sees an op half added

    def _ensure(self, op_type: str, domain: str) -> None:
        key = ("" if domain == "ai.onnx" else domain, op_type)
        if key not in self._added:
            with self._lock:
                if key not in self._added:
                    _add_op_kernels(self, self.ep_name, op_impls(op_type, key[0]))
                    self._added.add(key)

    def find(self, op_type: str, domain: str, opset: int, ep: str, dtypes: Mapping[str, int] | None = None, *,
             input_types: Sequence[int] | None = None) -> ort_abi.KernelEntry | None:
        self._ensure(op_type, domain)
        return super().find(op_type, domain, opset, ep, dtypes, input_types=input_types)

    def find_shape_entry(self, op_type: str, domain: str, opset: int) -> ort_abi.KernelEntry | None:
        self._ensure(op_type, domain)
        return super().find_shape_entry(op_type, domain, opset)

    def _ensure_all(self) -> None:
        with self._lock:
            for key, impls in _by_op().items():
                if key not in self._added:
                    _add_op_kernels(self, self.ep_name, impls)
                    self._added.add(key)

    def __iter__(self) -> Iterator[ort_abi.KernelEntry]:
        self._ensure_all()
        return super().__iter__()

    def __len__(self) -> int:
        self._ensure_all()
        return super().__len__()


_BUILTIN: dict[str, BuiltinKernelRegistry] = {}


def builtin_registry(ep_name: str) -> ort_abi.KernelRegistry:
    """The numpy kernels of every in-tree op for `ep_name` (`BuiltinKernelRegistry`: added per op as looked up)."""
    if ep_name not in _BUILTIN:
        _BUILTIN[ep_name] = BuiltinKernelRegistry(ep_name)
    return _BUILTIN[ep_name]


class CpuExecutionProvider(SiLUFusionSurface):
    name = "CPUExecutionProvider"
    device_type = "cpu"
    device_id = 0
    device = "cpu"
    allocator: ort_abi.Allocator | None = None  # host memory: numpy arrays

    def __init__(self, graph: Graph, opsets: Mapping[str, int], plugins: ort_abi.KernelRegistry | None = None,
                 *, intra_op_num_threads: int = 0) -> None:
        self.graph = graph
        # threads of the CPU kernels and BLAS during runs (0: the physical cores); see run_scope
        self.intra_op_num_threads = check_thread_count(intra_op_num_threads)
        self.identity = ort_abi.EpIdentity(self.name, self.device_type, self.device_id)  # what estimates receive
        self.device_properties: dict[str, int] = {}
        self.opsets = {("" if d == "ai.onnx" else d): v for d, v in opsets.items()}
        # loaded libraries, then the C kernels (for the nodes they apply to), then the numpy kernels
        self._c_kernels = _ckernels.c_registry() if self.name == _ckernels.EP_NAME else None
        if self.name == _ckernels.EP_NAME:
            _ckernels.notice_once()  # once per process: no C kernels is 100x slower, say so and how to fix it
        c_kernels = [self._c_kernels] if self._c_kernels is not None else []
        self.registries = ([plugins] if plugins is not None else []) + c_kernels + [builtin_registry(self.name)]
        self._claims: dict[Node, Supported | Declined] = {}
        self._entries: dict[tuple, ort_abi.KernelEntry | None] = {}
        # per node, as claims are: auto-fit asks claim, estimate and the budget gate again for every candidate
        self._node_entries: dict[Node, ort_abi.KernelEntry | None] = {}
        self._estimates: dict[Node, int | None] = {}
        self._shared_estimates: dict[tuple, int] = {}  # the C library's estimates by `ort_abi.node_query_key`

    @property
    def threads(self) -> int:
        """The intra-op threads runs use: `intra_op_num_threads`, or the physical cores for 0."""
        return resolve_threads(self.intra_op_num_threads)

    @contextlib.contextmanager
    def run_scope(self) -> Iterator[int]:
        """Entered around each run (`ort_abi.provider_run_scope`): the kernels get `threads` intra-op threads
        (`ort_cpu_ep.intra_op_threads()`) and BLAS is limited to them until the run ends; with numpy >= 2 the
        ufunc buffer size is `UFUNC_BUFSIZE` for the whole run (each kernel then finds it set)."""
        blas, native = self._thread_pools()
        with intra_op_thread_scope(self.intra_op_num_threads, blas=blas, native=native) as threads, \
                ufunc_bufsize_scope():
            yield threads

    def c_run_scope(self) -> native_thread_scope:
        """`run_scope` for a run whose every node is a C kernel (the session's all-C replay): the C kernels get
        the threads `run_scope` gives them; BLAS, the ufunc buffer size and the Python thread count, which only
        numpy kernels read, are left as they are."""
        native = self.__dict__.get("_c_threads")
        if native is None:  # decided once, as the pools are
            n, pool = self.threads, self._thread_pools()[1]
            native = self._c_threads = n if pool is None else max(1, min(n, int(pool)))
        return native_thread_scope(native)

    def _thread_pools(self) -> tuple[int | None, int | None]:
        """(BLAS threads, C kernel threads) for a run, None = all `threads`. OpenBLAS's workers spin after each
        call and OpenMP's between kernels: on a core both want, each waits on the other (measured: a 2-thread
        int4 prefill at hidden 2048 ran no faster than 1 thread, 190 vs 119 ms with one pool). So one pool
        gets the threads: the C kernels where this provider runs a weight GEMM or a convolution in C (MatMulNBits,
        MatMul, Gemm, Conv...; BLAS then only multiplies attention scores), else BLAS (the C attention/norm kernels then run on one
        thread). Decided once, on the nodes placed on this provider (placement is final by the first run)."""
        if "_pools" not in self.__dict__:
            if self.threads <= 1 or self._c_kernels is None:
                self._pools: tuple[int | None, int | None] = (None, None)
            else:
                mine = [n for n in self.graph.nodes if n.ep == self.name]
                c_ops = {n.op_type for n in mine
                         if (e := self.entry(n)) is not None and _ckernels.kernel_language(e) == "C"}
                if not c_ops:
                    self._pools = (None, None)
                else:
                    self._pools = (1, None) if c_ops & _C_WEIGHT_MATMULS else (None, 1)
        return self._pools

    pinned_host_staging = False

    def transfers(self) -> ort_abi.DeviceTransfers:
        """The asynchronous transfer surface, trivially: host memory is the device's, so a copy is done when it
        is issued (`ort_abi.ImmediateTransfers`)."""
        if "_transfers" not in self.__dict__:
            self._transfers = ort_abi.ImmediateTransfers()
        return self._transfers

    def opset(self, node: Node) -> int:
        return self.opsets.get("" if node.domain == "ai.onnx" else node.domain, 1)

    def _bindings(self, node: Node) -> dict[str, int] | None:
        """Type-constraint name -> element type, from the op schema's formal inputs."""
        try:
            schema = onnx.defs.get_schema(node.op_type, self.opset(node), node.domain)
        except onnx.defs.SchemaError:
            return None
        out: dict[str, int] = {}
        for formal, name in zip(schema.inputs, node.inputs):
            v = self.graph.values.get(name) if name else None
            if v is not None and v.dtype and formal.type_str not in out:
                out[formal.type_str] = v.dtype
        return out

    def entry(self, node: Node) -> ort_abi.KernelEntry | None:
        """The registry entry for this node (memoized per node, and by op, domain, input element types and
        whether the C kernel applies)."""
        try:
            return self._node_entries[node]
        except KeyError:
            found = self._node_entries[node] = self._entry(node)
            return found

    def _entry(self, node: Node) -> ort_abi.KernelEntry | None:
        values = self.graph.values
        c_applies = self._c_kernels is not None and _ckernels.c_kernel_applies(node, self.opset(node))
        key = (node.op_type, node.domain, tuple(values[n].dtype if n in values else 0 for n in node.inputs), c_applies)
        if key not in self._entries:
            bindings = self._bindings(node)
            # schema-less (custom) ops: prefer a kernel whose type constraints the inputs meet; else any
            # kernel of the op, which the claim then declines saying which input type it rejects
            typed = [key[2]] if bindings is None else []
            found = None
            for types in [*typed, None]:
                for registry in self.registries:
                    if registry is self._c_kernels and not c_applies:
                        continue
                    found = registry.find(node.op_type, node.domain, self.opset(node), self.name, bindings,
                                          input_types=types)
                    if found is not None:
                        break
                if found is not None:
                    break
            self._entries[key] = found
        return self._entries[key]

    def _inputs(self, node: Node) -> list[InputInfo]:
        infos = []
        for name in node.inputs:
            v = self.graph.values.get(name) if name else None
            infos.append(InputInfo(dtype=v.dtype if v else 0, shape=v.shape if v else None, present=bool(name)))
        return infos

    def _decline(self, node: Node, rejected: str, accepts: str, remedy: str) -> Declined:
        return Declined(ep=self.name, node=node.label, op=node.op_type, domain=node.domain, opset=self.opset(node),
                        rejected=rejected, accepts=accepts, remedy=remedy)

    def claim(self, node: Node) -> Supported | Declined:
        """Memoized per node: auto-fit asks again for every candidate placement."""
        cached = self._claims.get(node)
        if cached is None:
            cached = self._claims[node] = self._claim(node)
        return cached

    def _claim(self, node: Node) -> Supported | Declined:
        if node.op_type in MEMCPY_OPS:
            return Supported(0)
        entry = self.entry(node)
        if entry is None:
            return self._decline(node, f"op {node.qualified_op!r} at opset {self.opset(node)}",
                                 "the ops listed by `ortrun kernels`",
                                 "export the model with ops this provider implements, or load a kernel library for it")
        impl = entry.create_func_state
        if self._c_kernels is not None and not isinstance(impl, OpImpl) and entry in self._c_kernels:
            twin = builtin_registry(self.name).find(node.op_type, node.domain, self.opset(node), self.name)
            impl = twin.create_func_state if twin is not None else None
        inputs = self._inputs(node)
        if isinstance(impl, OpImpl):
            decline = impl.supports(node, inputs, self.opset(node))
            if decline is not None:
                return self._decline(node, decline.rejected, decline.accepts, decline.remedy)
        kdef = entry.kernel_def
        wrong = ort_abi.check_input_types(kdef, [i.dtype for i in inputs],
                                          has_schema=ort_abi.has_onnx_schema(node.op_type, node.domain, self.opset(node)))
        if wrong is not None:
            return self._decline(node, wrong, f"the type constraints of {entry.describe()}",
                                 "cast the input to an accepted type, or load a kernel registered for this type")
        return Supported(self.estimate(node))

    def estimate(self, node: Node) -> int | None:
        """Level-1 workspace estimate (one host path for every kernel language), asked with this EP as
        the estimate's EP handle; None when the kernel has no estimate (the budget then applies the
        design's 1.5x heuristic, `node_cost_for_budget`) or it declined."""
        try:
            return self._estimates[node]
        except KeyError:
            pass
        entry = self.entry(node)
        if entry is None or not entry.has_estimate:
            found = None
        elif self._c_kernels is not None and entry in self._c_kernels:
            found = _ckernels.shared_estimate(self._shared_estimates, entry, node, self)
        else:
            found = ort_abi.estimate_workspace(entry, node, self)
        self._estimates[node] = found
        return found

    def create_kernel(self, node: Node) -> Any:
        if node.op_type in MEMCPY_OPS:
            return ort_abi.CopyKernel()
        entry = self.entry(node)
        if entry is None:
            raise RuntimeError(f"{self.name} has no kernel for {node.qualified_op}; the node should have been declined")
        return entry.create_kernel(ort_abi.KernelInfo.from_node(node, self))


# C kernels that, where they run, take the threads from BLAS: the weights' GEMMs, convolutions included (a CNN has
# no numpy matmul for BLAS's threads to serve: with them left out its C Convs ran on one thread at any count)
_C_WEIGHT_MATMULS = {"MatMulNBits", "MatMul", "FusedMatMul", "Gemm", "Conv", "FusedConv", "ConvTranspose"}


class SimulatedGpuExecutionProvider(SimulatedCaptureSurface, CpuExecutionProvider):
    """A device with its own memory, standing in for a GPU: the CPU kernels, staged through copies."""

    name = "SimulatedGPUExecutionProvider"
    device_type = "gpu"
    device = "simgpu"
    pinned_host_staging = False  # transfers() copies from pageable host memory

    def __init__(self, graph: Graph, opsets: Mapping[str, int], plugins: ort_abi.KernelRegistry | None = None,
                 *, intra_op_num_threads: int = 0) -> None:
        super().__init__(graph, opsets, plugins, intra_op_num_threads=intra_op_num_threads)
        self.registries = ([plugins] if plugins is not None else []) + [builtin_registry(self.name)]
        self.allocator = ort_abi.NullDeviceAllocator(ort_abi.EpIdentity(self.name, "simgpu", 0))

    def create_kernel(self, node: Node) -> Any:
        kernel = super().create_kernel(node)
        return kernel if node.op_type in MEMCPY_OPS else StagedKernel(kernel, self.capture, self.transfers)

    def transfers(self) -> ort_abi.SimulatedTransfers:
        """The asynchronous transfer surface (003): a copy stream whose copies complete only once something
        is ordered after them, checked by address range, on a simulated timeline at the stand-in
        host-to-device bandwidth (`ort_partition.SIMULATED_DEVICE`). No pinned host memory."""
        if "_transfers" not in self.__dict__:
            from ort_partition import SIMULATED_DEVICE

            self._transfers = ort_abi.SimulatedTransfers(SIMULATED_DEVICE.h2d_bandwidth)
        return self._transfers

    @property
    def mapped_allocator(self) -> ort_abi.Allocator:
        """The optional mapped (host-visible) backing: the simulated device's memory, readable in place."""
        if "_mapped" not in self.__dict__:
            self._mapped = ort_abi.NullDeviceAllocator(ort_abi.EpIdentity(self.name, "simgpu", 0), mapped=True)
        return self._mapped

    def close(self) -> None:
        """Shut the device down: everything its sessions allocated must have been freed by now."""
        alloc = self.allocator
        if alloc.live_buffers:
            raise ort_abi.LeakError(
                f"{self.name} shut down with {alloc.live_buffers} buffer(s) ({alloc.bytes_in_use} bytes) still "
                "allocated; every weight, execution buffer and run value must be freed before its provider closes")
