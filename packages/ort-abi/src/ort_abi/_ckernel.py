"""C kernels behind the Python roles: create function, estimate function, kernel object."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from typing import Any

from . import ABI_FLAG_RELEASES_PACKED_INPUTS
from ._errors import AbiError, AbiVersionMismatchError, KernelError, WorkspaceDeclarationError
from ._fast_context import fast_contexts
from ._ffi import require_c
from ._shapefunc import MAX_OUTPUT_RANK, OutputShape
from ._status import ErrorCode, check
from ._views import ContextView, EpView, InfoView, NodeView, ValueView, close_handle, open_handle
from ._workspace import MAX_SLOTS, InputState, WorkspaceInputShape, WorkspaceSlot

_log = logging.getLogger("ort_abi")


def _host_version() -> tuple[int, int, int]:
    _, lib = require_c("C kernels")
    return lib.ORT_KERNEL_ABI_VERSION, lib.ORT_KERNEL_ABI_MIN_VERSION, lib.ORT_KERNEL_ABI_VERSION_WORKSPACE


def lib_prepack_version() -> int:
    _, lib = require_c("C kernels")
    return lib.ORT_KERNEL_ABI_VERSION_PREPACK


class CEstimateFunc:
    """An `OrtKernelWorkspaceEstimateFunc` in the Python role `estimate_func(api, node, ep) -> int`.
    The C function receives the host's OrtKernelApi table whatever `api` is passed."""

    def __init__(self, fn: Any, library: str | None) -> None:
        self.fn = fn
        self.library = library

    def __call__(self, api: Any, node: Any, ep: Any) -> int:
        ffi, lib = require_c("C workspace estimates")
        node_h = open_handle("OrtNode", NodeView(node))
        try:
            ep_h = open_handle("OrtEp", EpView(ep)) if ep is not None else ffi.NULL
        except TypeError as e:  # the estimate still runs (it may not need the EP), but say why it gets NULL
            _log.warning("workspace estimate for node %r from %r gets a NULL OrtEp: %s",
                         getattr(node, "name", node), self.library, e)
            ep_h = ffi.NULL
        out = ffi.new("size_t*")
        try:
            status = self.fn(lib.ort_abi_host_api(), node_h, ep_h, out)
        finally:
            close_handle("OrtNode", node_h)
            if ep_h != ffi.NULL:
                close_handle("OrtEp", ep_h)
        check(status, node=getattr(node, "name", None), library=self.library, operation="workspace estimate")
        return int(out[0])


class CShapeFunc:
    """An `OrtKernelOutputShapeFunc` in the Python role `shape_func(api, node, input_shapes)`."""

    def __init__(self, fn: Any, library: str | None) -> None:
        self.fn = fn
        self.library = library

    def __call__(self, api: Any, node: Any, input_shapes: Sequence[WorkspaceInputShape]) -> list[OutputShape | None]:
        ffi, lib = require_c("C output-shape callbacks")
        c_shapes, keep = _c_input_shapes(ffi, input_shapes)
        n_out = len(node.outputs)
        outs = ffi.new("OrtOutputShape[]", max(n_out, 1))
        for k in range(n_out):
            outs[k].state = int(InputState.UNSHAPED)
        node_h = open_handle("OrtNode", NodeView(node))
        try:
            status = self.fn(lib.ort_abi_host_api(), node_h, c_shapes, len(input_shapes), outs, n_out)
        finally:
            close_handle("OrtNode", node_h)
        del keep
        check(status, node=getattr(node, "name", None), library=self.library, operation="output-shape callback")
        result: list[OutputShape | None] = []
        for k in range(n_out):
            o = outs[k]
            if o.state == InputState.UNSHAPED:
                result.append(None)
                continue
            if o.state != InputState.SHAPED or o.rank > MAX_OUTPUT_RANK:
                raise KernelError(ErrorCode.INVALID_ARGUMENT,
                                  f"output {k}: state {int(o.state)} rank {int(o.rank)}; set state SHAPED (or leave "
                                  f"UNSHAPED) and rank <= ORT_OUTPUT_SHAPE_MAX_RANK ({MAX_OUTPUT_RANK})",
                                  node=getattr(node, "name", None), library=self.library,
                                  operation="output-shape callback")
            try:
                result.append(OutputShape(int(o.elem_type), tuple(int(o.dims[i]) for i in range(o.rank))))
            except ValueError as e:
                raise KernelError(ErrorCode.INVALID_ARGUMENT, f"output {k}: {e}", node=getattr(node, "name", None),
                                  library=self.library, operation="output-shape callback") from e
        return result


def _c_input_shapes(ffi: Any, shapes: Sequence[WorkspaceInputShape]) -> tuple[Any, list[Any]]:
    """The OrtWorkspaceInputShape array for `shapes`, plus the dims arrays it points into (keep alive)."""
    c_shapes = ffi.new("OrtWorkspaceInputShape[]", max(len(shapes), 1))
    keep = []
    for i, s in enumerate(shapes):
        c_shapes[i].state = int(s.state)
        c_shapes[i].elem_type = int(s.elem_type)
        if s.dims is not None:
            dims = ffi.new("int64_t[]", list(s.dims) or [0])
            keep.append(dims)
            c_shapes[i].dims, c_shapes[i].rank = dims, len(s.dims)
    return c_shapes, keep


class CCreateFunc:
    """An `OrtKernelCreateFunc` in the Python role `create_func(state, info) -> kernel`."""

    def __init__(self, fn: Any, library: str | None) -> None:
        self.fn = fn
        self.library = library

    def __call__(self, state: Any, info: Any) -> CKernel:
        ffi, _ = require_c("C kernels")
        info_h = open_handle("OrtKernelInfo", InfoView(info))
        out = ffi.new("OrtKernelImpl**")
        try:
            status = self.fn(ffi.NULL if state is None else state, info_h, out)
        finally:
            close_handle("OrtKernelInfo", info_h)
        check(status, node=info.node_name, library=self.library, operation="create")
        if out[0] == ffi.NULL:
            raise KernelError(ErrorCode.FAIL, "create function returned success but no kernel (*kernel_out is NULL)",
                              node=info.node_name, library=self.library, operation="create")
        return CKernel(out[0], library=self.library, node=info.node_name)


def check_compute(status: Any, ctx: Any, *, node: str | None, library: str | None) -> None:
    """Raise for a finished Compute call: the host's refusal of an output request when there was one
    (whatever the kernel returned), else the kernel's error status; nothing when both are clean."""
    violations = getattr(ctx, "violations", None)
    if violations:  # the host refused an output request: fail with it, whatever the kernel returned
        try:
            check(status, node=node, library=library, operation="compute")
        except KernelError:
            pass  # (the kernel's status is released; the typed refusal says more)
        violation = violations[0]
        violation.library = library
        raise violation
    check(status, node=node, library=library, operation="compute")


def _release_impl(impl: Any) -> None:
    impl.Release(impl)


class CKernel:
    """A C `OrtKernelImpl` with the Python kernel interface: `compute(ctx)`, `declare_workspace(shapes)`
    (None when the kernel predates ABI v2 or its entry is NULL) and `release()` (exactly once)."""

    def __init__(self, impl: Any, *, library: str | None, node: str | None) -> None:
        ffi, _ = require_c("C kernels")
        host, oldest, ws_version = _host_version()
        self.library, self.node = library, node
        version = int(impl.ort_version_supported)
        if not oldest <= version <= host or impl.Compute == ffi.NULL or impl.Release == ffi.NULL:
            if impl.Release != ffi.NULL and oldest <= version:
                impl.Release(impl)
            if not oldest <= version <= host:
                raise AbiVersionMismatchError(
                    f"kernel for node {node!r} from {library!r} reports ort_version_supported={version}, but this host "
                    f"accepts {oldest}..{host}; set it to ORT_KERNEL_ABI_VERSION and rebuild against this header")
            raise KernelError(ErrorCode.INVALID_ARGUMENT, "OrtKernelImpl has a NULL Compute or Release; both are required",
                              node=node, library=library, operation="create")
        self.abi_version = version
        self._impl = impl
        self._pool = fast_contexts(*require_c("C kernels"))
        self.has_declaration = version >= ws_version and impl.DeclareWorkspaceRequirements != ffi.NULL
        self.has_prepack = (version >= lib_prepack_version() and impl.DeclarePrePackedBytes != ffi.NULL
                            and impl.PrePackWeightInto != ffi.NULL)
        # it computes without an input it packed: the host may release the initializer (ORT_KERNEL_FLAG_...)
        self.releases_packed = self.has_prepack and bool(impl.flags & ABI_FLAG_RELEASES_PACKED_INPUTS)
        self._packed: dict[int, Any] = {}  # input index -> the host buffer its packed copy lives in (until release)
        # released once: by `release`, or when the kernel is collected (not at interpreter exit); a flag and
        # `__del__` rather than a weakref.finalize, which costs ~240 B a kernel (one kernel per node)
        self._alive = True

    @property
    def released(self) -> bool:
        return not self._alive

    def __del__(self) -> None:
        if getattr(self, "_alive", False) and not sys.is_finalizing():
            self._alive = False
            _release_impl(self._impl)

    def _live_impl(self, what: str) -> Any:
        if self.released:
            raise AbiError(f"{what} on the released C kernel for node {self.node!r}; create a new kernel")
        return self._impl

    def compute(self, ctx: Any) -> None:
        impl = self._live_impl("compute")
        if getattr(ctx, "node_name", None) is None:
            ctx.node_name = self.node
        view = ContextView(ctx)
        pool = self._pool
        ctx_h = pool.open(view) if pool is not None else None
        if ctx_h is not None:  # reads answered in C (`_fast_context`)
            try:
                status = impl.Compute(impl, ctx_h)
            finally:
                pool.close(view)
                view.close()
        else:
            ctx_h = open_handle("OrtKernelContext", view)
            try:
                status = impl.Compute(impl, ctx_h)
            finally:
                close_handle("OrtKernelContext", ctx_h)
        check_compute(status, ctx, node=self.node, library=self.library)

    def declare_workspace(self, shapes: Sequence[WorkspaceInputShape]) -> list[WorkspaceSlot] | None:
        impl = self._live_impl("declare_workspace")
        if not self.has_declaration:
            return None
        ffi, _ = require_c("C workspace declarations")
        c_shapes, keep = _c_input_shapes(ffi, shapes)
        slots = ffi.new("OrtWorkspaceSlot[]", MAX_SLOTS)
        count = ffi.new("size_t*")
        status = impl.DeclareWorkspaceRequirements(impl, c_shapes, len(shapes), slots, MAX_SLOTS, count)
        del keep
        check(status, node=self.node, library=self.library, operation="DeclareWorkspaceRequirements")
        if count[0] > MAX_SLOTS:
            raise WorkspaceDeclarationError(
                f"kernel for node {self.node!r} from {self.library!r} reported {int(count[0])} slots, more than the "
                f"capacity {MAX_SLOTS} it was given; write at most max_slots entries")
        return [WorkspaceSlot(int(slots[i].slot_id), int(slots[i].size_bytes)) for i in range(count[0])]

    def declare_prepacked(self, shapes: Sequence[WorkspaceInputShape], index: int) -> int:
        """Bytes the kernel will pack for constant input `index` (DeclarePrePackedBytes; 0 before ABI v5)."""
        impl = self._live_impl("declare_prepacked")
        if not self.has_prepack:
            return 0
        ffi, _ = require_c("C pre-packing")
        c_shapes, keep = _c_input_shapes(ffi, shapes)
        out = ffi.new("size_t*")
        status = impl.DeclarePrePackedBytes(impl, c_shapes, len(shapes), index, out)
        del keep
        check(status, node=self.node, library=self.library, operation="DeclarePrePackedBytes")
        return int(out[0])

    def prepack(self, index: int, array: Any, buffer: Any) -> bool:
        """PrePackWeightInto with the initializer `array` and the host's `buffer` (kept while the kernel lives)."""
        impl = self._live_impl("prepack")
        if not self.has_prepack:
            return False
        ffi, _ = require_c("C pre-packing")
        value = open_handle("OrtValue", ValueView(array, writable=False))
        is_packed = ffi.new("int*")
        try:
            status = impl.PrePackWeightInto(impl, value, index, ffi.from_buffer(buffer, require_writable=True),
                                            buffer.nbytes, is_packed)
        finally:
            close_handle("OrtValue", value)
        check(status, node=self.node, library=self.library, operation="PrePackWeightInto")
        if is_packed[0]:
            self._packed[index] = buffer
        return bool(is_packed[0])

    def release(self) -> None:
        """Call the kernel's Release (once; later calls do nothing), then drop its packed buffers."""
        if self._alive:
            self._alive = False
            _release_impl(self._impl)
            self._packed.clear()

    def __enter__(self) -> CKernel:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"CKernel(node={self.node!r}, library={self.library!r}, abi={self.abi_version})"
