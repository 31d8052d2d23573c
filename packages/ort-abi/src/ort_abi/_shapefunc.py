"""Output-shape callbacks (ABI v3): what a kernel says its node's outputs are, for shape resolution.

The Python role is `shape_func(api, node, input_shapes) -> list[OutputShape | None]` (one per output;
None or a short list: not known). C libraries register an `OrtKernelOutputShapeFunc` with
KernelRegistry_AddKernelV3; `_ckernel.CShapeFunc` puts it in the same role. `output_shapes_hook`
turns registries into the `output_shapes` hook `ort_graph.resolve_shapes` takes.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Sequence
from typing import Any

import attrs

from ._errors import KernelError
from ._hostapi import HOST_API
from ._status import ErrorCode
from ._workspace import workspace_input_shapes

_log = logging.getLogger("ort_abi")
MAX_OUTPUT_RANK = 16  # == ORT_OUTPUT_SHAPE_MAX_RANK in the header (a test checks they agree)


def _as_dims(dims) -> tuple:
    """`OutputShape.dims` as a tuple. A Python function rather than `tuple` itself: attrs reads a converter's
    signature at class creation, and a builtin's is parsed from its text by `tokenize`, whose first use
    compiles its regexes (~5 ms of every process's import)."""
    return tuple(dims)


@attrs.frozen
class OutputShape:
    """One output: its element type (0: keep the declared one) and dims (-1 for an unknown extent)."""

    elem_type: int = 0
    dims: tuple[int, ...] = attrs.field(default=(), converter=_as_dims)

    def __attrs_post_init__(self) -> None:
        if len(self.dims) > MAX_OUTPUT_RANK or any(not isinstance(d, int) or d < -1 for d in self.dims):
            raise ValueError(f"output shape dims must be at most {MAX_OUTPUT_RANK} integers >= -1 (-1 = unknown), "
                             f"got {self.dims!r}")
        if not isinstance(self.elem_type, int) or self.elem_type < 0:
            raise ValueError(f"output elem_type must be an ONNX element type >= 0, got {self.elem_type!r}")

    def as_graph_type(self) -> tuple[int, tuple[int | None, ...]]:
        return self.elem_type, tuple(None if d < 0 else d for d in self.dims)


def infer_output_shapes(entry: Any, node: Any) -> list[OutputShape | None] | None:
    """The entry's output shapes for `node` (an ort_graph Node whose inputs are resolved as far as they
    go), one per output (None where it does not know), or None when the entry has no callback or it
    failed (a failure is logged as a warning naming the node; shape resolution goes on without it)."""
    fn = getattr(entry, "shape_func", None)
    if fn is None:
        return None
    try:
        result = fn(HOST_API, node, workspace_input_shapes(node))
    except KernelError as e:
        _log.warning("output-shape callback of %s failed for node %r: %s", entry.describe(), node.name, e)
        return None
    except Exception as e:  # a callback bug must not stop shape resolution; it is loud, though
        _log.warning("output-shape callback of %s raised for node %r: %r", entry.describe(), node.name, e)
        return None
    if result is None:
        return None
    out: list[OutputShape | None] = []
    for k, item in enumerate(list(result)[: len(node.outputs)]):
        if item is None or isinstance(item, OutputShape):
            out.append(item)
            continue
        _log.warning("output-shape callback of %s returned %r for output %d of node %r; expected an OutputShape "
                     "or None (ignored)", entry.describe(), item, k, node.name)
        out.append(None)
    return out + [None] * (len(node.outputs) - len(out))


def output_shapes_hook(registries: Sequence[Any], opsets: Any) -> Any:
    """`ort_graph.resolve_shapes(..., output_shapes=hook)`: for a node ONNX does not know, the first
    registered kernel (any EP) of its op with an output-shape callback answers."""
    opsets = {("" if d == "ai.onnx" else d): int(v) for d, v in dict(opsets or {}).items()}

    def hook(node: Any, input_types: Any) -> list[Any] | None:
        domain = "" if node.domain == "ai.onnx" else node.domain
        for registry in registries:
            entry = registry.find_shape_entry(node.op_type, domain, opsets.get(domain, 1))
            if entry is None:
                continue
            shapes = infer_output_shapes(entry, node)
            if shapes is None:
                return None
            return [(0, None) if s is None else s.as_graph_type() for s in shapes]
        return None

    return hook


class OutputMismatchError(KernelError):
    """A kernel asked for an output of another shape or element type than the session planned."""

    def __init__(self, message: str, *, node: str | None, index: int) -> None:
        self.index = index
        super().__init__(ErrorCode.INVALID_ARGUMENT, message, node=node, operation="KernelContext_GetOutput")


class InputTypeError(KernelError):
    """A kernel would receive an input of an element type its kernel definition does not allow."""

    def __init__(self, message: str, *, node: str | None, library: str | None) -> None:
        super().__init__(ErrorCode.INVALID_ARGUMENT, message, node=node, library=library, operation="compute")


def planned_outputs(node: Any) -> list[tuple[tuple[Any, ...] | None, int]]:
    """(planned shape or None, planned element type or 0) per output of an ort_graph Node, from its
    graph's resolved values; what `KernelContext(planned_outputs=...)` checks requests against."""
    values = node.graph.values
    out = []
    for name in node.outputs:
        v = values.get(name) if name else None
        out.append((None, 0) if v is None else (None if v.shape is None else tuple(v.shape), int(v.dtype or 0)))
    return out


def check_planned_output(planned: tuple[Any, int] | None, index: int, shape: tuple[int, ...], dtype: Any,
                         node: str | None) -> None:
    """Raise OutputMismatchError when `shape`/`dtype` contradict the planned output: a static planned
    extent must match exactly, a symbolic or unknown one accepts any value."""
    if planned is None:
        return
    planned_shape, planned_type = planned
    if (planned_shape is None or planned_shape == shape) and (not planned_type or _ONNX_TYPE.get(dtype) == planned_type):
        return  # the common case, decided by two lookups: the request is exactly what was planned
    problems = []
    if planned_shape is not None and (len(planned_shape) != len(shape) or any(
            isinstance(p, int) and p != d for p, d in zip(planned_shape, shape))):
        problems.append(f"shape {list(shape)!r} but the plan has {_fmt(planned_shape)}")
    if planned_type:
        requested = _ONNX_TYPE.get(dtype)
        if requested is None:
            requested = _onnx_type(dtype)
        if requested != planned_type:
            from ort_graph import dtype_name

            problems.append(f"element type {getattr(dtype, 'name', dtype)!s} but the plan has {dtype_name(planned_type)}")
    if problems:
        raise OutputMismatchError(
            f"output {index} requested with {' and '.join(problems)}; the kernel must produce what shape "
            "inference planned (fix the kernel, its output-shape callback or the model's value_info for this output)",
            node=node, index=index)


_ONNX_TYPE: dict[Any, int] = {}  # requested dtype -> its ONNX element type (-1: none); checked once per output per run


def _onnx_type(dtype: Any) -> int:
    from ort_graph import from_numpy_dtype

    try:
        found = from_numpy_dtype(dtype)
    except Exception:  # noqa: BLE001 - a dtype ONNX has no number for is a mismatch too
        found = -1
    try:
        _ONNX_TYPE[dtype] = found
    except TypeError:  # an unhashable dtype-like: not cached
        pass
    return found


def _fmt(shape: Sequence[Any]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def check_input_types(kernel_def: Any, input_types: Sequence[int], *, has_schema: bool) -> str | None:
    """The first input whose element type a schema-less op's kernel definition does not allow, as
    'input k dtype DOUBLE (constraint T allows FLOAT)', or None. Ops with an ONNX schema bind their
    constraints through it (KernelRegistry.find); here: 'T<k>' binds input k, any other name binds
    every input no 'T<k>' binds. Element type 0 (unknown) is not judged."""
    if has_schema or not kernel_def.type_constraints:
        return None
    from ort_graph import dtype_name

    cons = kernel_def.constraints
    positional = {int(n[1:]): n for n in cons if len(n) > 1 and n[0] == "T" and n[1:].isdigit()}
    general = [n for n in cons if n not in positional.values()]
    for k, elem in enumerate(input_types):
        if not elem:
            continue
        names = [positional[k]] if k in positional else general
        for name in names:
            if elem not in cons[name]:
                allowed = ", ".join(dtype_name(t) for t in cons[name])
                return f"input {k} dtype {dtype_name(elem)} (type constraint {name!r} allows {allowed})"
    return None


@functools.lru_cache(maxsize=4096)
def has_onnx_schema(op_type: str, domain: str, opset: int | None = None) -> bool:
    """Whether onnx knows a schema of this op (at `opset`); cached: auto-fit asks per node and trial."""
    import onnx

    domain = "" if domain == "ai.onnx" else domain
    try:
        if opset is None:
            return bool(onnx.defs.has(op_type, domain))
        onnx.defs.get_schema(op_type, opset, domain)
        return True
    except onnx.defs.SchemaError:
        return False


class TypeCheckedKernel:
    """A kernel of a schema-less op whose definition has type constraints: its inputs' element types
    are checked at every compute, so a kernel registered for FLOAT is never handed DOUBLE."""

    def __init__(self, kernel: Any, kernel_def: Any, library: str | None, node: str | None) -> None:
        self._kernel, self._def, self._library, self._node = kernel, kernel_def, library, node
        self._allowed: set[tuple[Any, ...]] = set()  # input dtypes already checked and allowed

    def compute(self, ctx: Any) -> None:
        dtypes = tuple(getattr(a, "dtype", None) for a in ctx.inputs)
        try:
            known = dtypes in self._allowed  # the check depends on the dtypes alone: made once per combination
        except TypeError:  # an unhashable dtype-like: checked every time
            known = False
        if not known:
            self._check(dtypes)
            with contextlib.suppress(TypeError):
                self._allowed.add(dtypes)
        self._kernel.compute(ctx)

    def _check(self, dtypes: tuple[Any, ...]) -> None:
        from ort_graph import from_numpy_dtype

        types = []
        for dt in dtypes:
            try:
                types.append(from_numpy_dtype(dt) if dt is not None else 0)
            except Exception:  # noqa: BLE001 - a type without an ONNX number cannot satisfy a constraint
                types.append(-1)
        bad = check_input_types(self._def, types, has_schema=False)
        if bad is not None:
            raise InputTypeError(f"{self._def.describe()} would receive {bad}; the node should have been "
                                 "declined at placement, cast the input or register a kernel for this type",
                                 node=self._node, library=self._library)

    def __getattr__(self, name: str) -> Any:  # declare_workspace, release, has_declaration, ...
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._kernel, name)

    def __repr__(self) -> str:
        return f"TypeCheckedKernel({self._kernel!r})"

