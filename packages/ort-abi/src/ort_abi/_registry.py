"""One registry for every kernel language, and the ONE host path for Level-1 and Level-2 calls."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import attrs

from ._errors import AbiError, DuplicateKernelError, KernelError, RegistrationError
from ._hostapi import HOST_API
from ._kerneldef import KernelDef, normalize_domain
from ._shapefunc import TypeCheckedKernel, check_input_types, has_onnx_schema
from ._status import ErrorCode
from ._workspace import WorkspaceInputShape, WorkspaceSlot, validate_slots

_log = logging.getLogger("ort_abi")


@attrs.define(eq=False)
class KernelEntry:
    """A registered kernel: definition, create function and its state, optional Level-1 estimate.

    `language` is 'python' or 'c'; `library` the C library path (None in-tree). `declares_workspace`
    says whether its kernels implement the Level-2 declaration: known up front for a Python kernel
    class, learned at the first creation otherwise (None = not known yet). `shape_func` is the
    optional output-shape callback (see `_shapefunc`)."""

    kernel_def: KernelDef
    create_func: Callable[[Any, Any], Any]
    create_func_state: Any = None
    estimate_func: Callable[[Any, Any, Any], Any] | None = None
    language: str = "python"
    library: str | None = None
    declares_workspace: bool | None = None
    shape_func: Callable[[Any, Any, Any], Any] | None = None

    @property
    def op_type(self) -> str:
        return self.kernel_def.op_type

    @property
    def domain(self) -> str:
        return self.kernel_def.domain

    @property
    def ep(self) -> str:
        return self.kernel_def.ep

    @property
    def has_estimate(self) -> bool:
        return self.estimate_func is not None

    def create_kernel(self, info: Any) -> Any:
        """Create a kernel for one node: `create_func(create_func_state, info)`."""
        kernel = self.create_func(self.create_func_state, info)
        if kernel is None or not callable(getattr(kernel, "compute", None)):
            raise KernelError(ErrorCode.FAIL, f"create function of {self.kernel_def.describe()} returned {kernel!r}; "
                              "it must return an object with compute(ctx)",
                              node=getattr(info, "node_name", None), library=self.library, operation="create")
        self.declares_workspace = _kernel_declares(kernel)
        d = self.kernel_def
        if d.type_constraints and not has_onnx_schema(d.op_type, d.domain):
            return TypeCheckedKernel(kernel, d, self.library, getattr(info, "node_name", None))
        return kernel

    def describe(self) -> str:
        src = self.library or "python"
        return f"{self.kernel_def.describe()} [{src}]"


def _kernel_declares(kernel: Any) -> bool:
    flag = getattr(kernel, "has_declaration", None)
    if isinstance(flag, bool):
        return flag
    return callable(getattr(kernel, "declare_workspace", None))


class KernelRegistry:
    """Kernels by (EP, domain, op type, opset range, types). C libraries add to it through the
    OrtKernelApi table; Python code calls `add_kernel_v2` directly with callables in the same roles."""

    def __init__(self) -> None:
        self._entries: list[KernelEntry] = []
        self._by_op: dict[tuple[str, str], list[KernelEntry]] = {}  # (domain, op_type) -> entries, for find()

    def add_kernel_v2(self, kernel_def: KernelDef, create_func: Callable[[Any, Any], Any],
                      create_func_state: Any = None, estimate_func: Callable[[Any, Any, Any], Any] | None = None,
                      *, language: str = "python", library: str | None = None,
                      shape_func: Callable[[Any, Any, Any], Any] | None = None) -> KernelEntry:
        """Register a kernel. `create_func(state, info: KernelInfo) -> kernel` where kernel has
        `compute(ctx)` and optionally `declare_workspace(shapes) -> list[WorkspaceSlot]`;
        `estimate_func(api, node, ep) -> int` bytes (None or raising = no estimate);
        `shape_func(api, node, input_shapes) -> list[OutputShape | None]` the node's output shapes,
        asked during shape resolution for ops ONNX does not know (the C ABI's OrtKernelOutputShapeFunc)."""
        if not isinstance(kernel_def, KernelDef):
            raise RegistrationError(f"kernel_def must be a KernelDef (use KernelDefBuilder().build()), got {kernel_def!r}")
        if not callable(create_func):
            raise RegistrationError(f"create_func for {kernel_def.describe()} must be callable, got {create_func!r}")
        if estimate_func is not None and not callable(estimate_func):
            raise RegistrationError(f"estimate_func for {kernel_def.describe()} must be callable or None, "
                                    f"got {estimate_func!r}")
        if shape_func is not None and not callable(shape_func):
            raise RegistrationError(f"shape_func for {kernel_def.describe()} must be callable or None, got {shape_func!r}")
        for other in self._by_op.get((kernel_def.domain, kernel_def.op_type), ()):
            if other.kernel_def.overlaps(kernel_def):
                raise DuplicateKernelError(
                    f"duplicate registration: {kernel_def.describe()} from {library or 'python'} overlaps "
                    f"{other.describe()}; narrow the opset range or type constraints, or use another registry"
                )
        declares = None
        if language == "python" and isinstance(create_func, type):
            declares = callable(getattr(create_func, "declare_workspace", None))
        entry = KernelEntry(kernel_def, create_func, create_func_state, estimate_func, language, library, declares,
                            shape_func)
        self._entries.append(entry)
        self._by_op.setdefault((kernel_def.domain, kernel_def.op_type), []).append(entry)
        return entry

    def add_kernel(self, kernel_def: KernelDef, create_func: Callable[[Any, Any], Any],
                   create_func_state: Any = None, **kw: Any) -> KernelEntry:
        """Version-1 registration: no Level-1 estimate."""
        return self.add_kernel_v2(kernel_def, create_func, create_func_state, None, **kw)

    def remove(self, entry: KernelEntry) -> None:
        self._entries.remove(entry)
        self._by_op[(entry.kernel_def.domain, entry.kernel_def.op_type)].remove(entry)

    def find(self, op_type: str, domain: str, opset: int, ep: str,
             dtypes: Mapping[str, int] | None = None, *,
             input_types: Sequence[int] | None = None) -> KernelEntry | None:
        """The entry for this op at this opset on this EP (newest since-version wins); `dtypes`
        optionally binds type-constraint names to element types (ops with an ONNX schema);
        `input_types` (element type per input) filters by the schema-less binding of
        `check_input_types` (custom ops). None when nothing matches."""
        best = None
        for entry in self._by_op.get((normalize_domain(domain), op_type), ()):
            if input_types is not None and check_input_types(entry.kernel_def, input_types, has_schema=False):
                continue
            if entry.kernel_def.matches(op_type, domain, opset, ep, dtypes):
                if best is None or entry.kernel_def.since_version_start > best.kernel_def.since_version_start:
                    best = entry
        return best

    def find_shape_entry(self, op_type: str, domain: str, opset: int) -> KernelEntry | None:
        """An entry for this op at this opset, on any EP, that has an output-shape callback."""
        for entry in self._by_op.get((normalize_domain(domain), op_type), ()):
            if entry.shape_func is not None and entry.kernel_def.covers(opset):
                return entry
        return None

    def __iter__(self) -> Iterator[KernelEntry]:
        return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)


def estimate_workspace(entry: KernelEntry, node: Any, ep: Any) -> int | None:
    """Level 1: the entry's workspace estimate in bytes for `node` (an ort_graph Node with resolved
    shapes) on `ep`, or None when the entry has no estimate or it declined (raised / returned None /
    returned an error status)."""
    if entry.estimate_func is None:
        return None
    try:
        value = entry.estimate_func(HOST_API, node, ep)
    except KernelError as e:
        _log.info("no workspace estimate for node %r from %s: %s", getattr(node, "name", node), entry.describe(), e)
        return None
    except Exception as e:  # a Python estimate bug must not stop partitioning; it is loud, though
        _log.warning("workspace estimate of %s raised for node %r: %r", entry.describe(), getattr(node, "name", node), e)
        return None
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        _log.warning("workspace estimate of %s returned %r for node %r; expected bytes >= 0 (ignored)",
                     entry.describe(), value, getattr(node, "name", node))
        return None
    return int(value)


def declare_workspace(kernel: Any, shapes: Sequence[WorkspaceInputShape], *,
                      node: str | None = None) -> list[WorkspaceSlot] | None:
    """Level 2: the kernel's declared slots for these input shapes, or None when the kernel has no
    declaration (Python: no `declare_workspace`, or it returned None; C: NULL entry or an ABI version
    before it). None means: skip it in planning, the kernel falls back to scratch at run time.
    A failing declaration raises KernelError / WorkspaceDeclarationError."""
    fn = getattr(kernel, "declare_workspace", None)
    if fn is None:
        return None
    try:
        result = fn(list(shapes))
    except AbiError:
        raise
    except Exception as e:
        raise KernelError(ErrorCode.RUNTIME_EXCEPTION, f"declare_workspace raised {e!r}", node=node,
                          operation="declare_workspace") from e
    if result is None:
        return None
    return validate_slots(list(result), owner=f"kernel for node {node!r}" if node else repr(kernel))


def release_kernel(kernel: Any) -> None:
    """Release a kernel that has a `release()` (C kernels do; Python kernels usually do not)."""
    fn = getattr(kernel, "release", None)
    if callable(fn):
        fn()
