"""What a kernel sees: `KernelInfo` at creation, `KernelContext` during compute (any kernel language)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import attrs
import numpy as np

from ._shapefunc import OutputMismatchError, check_planned_output

_MISSING = object()


class OutputAllocator(Protocol):
    """Makes the array for output `index`: C-contiguous, exactly `shape` and `dtype`. The session
    plugs in one that hands out planned buffers; the default allocates with numpy."""

    def __call__(self, index: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray: ...


def numpy_output_allocator(index: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    return np.empty(shape, dtype=dtype)


@attrs.define
class ContextCounters:
    """What compute calls cost in memory. Share one instance across the contexts of a run to total it.
    `allocations` counts arrays the context itself allocated (default-allocator outputs and scratch)."""

    allocations: int = 0
    workspace_from_plan: int = 0
    workspace_misses: int = 0
    scratch_fallbacks: int = 0
    scratch_bytes: int = 0
    # outputs a kernel computed elsewhere and had copied into the array `output()` handed it
    copied_outputs: int = 0
    copied_output_bytes: int = 0


def _elem_type_of(dtype: np.dtype) -> int:
    from ort_graph import from_numpy_dtype

    return from_numpy_dtype(dtype)


def _numpy_dtype(elem_type_or_dtype: Any) -> np.dtype:
    if type(elem_type_or_dtype) is int:
        found = _DTYPES.get(elem_type_or_dtype)
        if found is not None:
            return found
    if isinstance(elem_type_or_dtype, (int, np.integer)) and not isinstance(elem_type_or_dtype, bool):
        from ort_graph import to_numpy_dtype

        found = to_numpy_dtype(int(elem_type_or_dtype))
        _DTYPES[int(elem_type_or_dtype)] = found
        return found
    return np.dtype(elem_type_or_dtype)


_DTYPES: dict[int, np.dtype] = {}  # ONNX element type -> numpy dtype, asked per output per compute


@attrs.frozen(eq=False)
class KernelInfo:
    """What a create function knows about its node: name, op, attributes (python values), input and
    output counts and element types (0 unknown), the EP, and the ort_graph Node when there is one."""

    node_name: str
    op_type: str
    domain: str = ""
    attributes: Mapping[str, Any] = attrs.field(factory=dict)
    input_count: int = 0
    output_count: int = 1
    input_types: tuple[int, ...] = ()
    output_types: tuple[int, ...] = ()
    ep: Any = None
    node: Any = None

    @classmethod
    def from_node(cls, node: Any, ep: Any = None) -> KernelInfo:
        graph = node.graph

        def elem(name: str) -> int:
            if not name or graph is None:
                return 0
            v = graph.values.get(name)
            if v is not None and v.dtype:
                return v.dtype
            t = graph.initializers.get(name)
            return t.dtype if t is not None else 0

        return cls(node.name, node.op_type, node.domain, {n: a.value for n, a in node.attributes.items()},
                   len(node.inputs), len(node.outputs), tuple(elem(n) for n in node.inputs),
                   tuple(elem(n) for n in node.outputs), ep, node)

    def attr(self, name: str, default: Any = _MISSING) -> Any:
        if name in self.attributes:
            return self.attributes[name]
        if default is _MISSING:
            raise KeyError(f"node {self.node_name!r} ({self.op_type}) has no attribute {name!r}; "
                           f"it has {sorted(self.attributes)!r}; pass a default")
        return default


def check_output_shape(index: int, shape: tuple[int, ...], node: str | None = None) -> None:
    """ValueError (an INVALID_ARGUMENT status across the ABI) for a requested output shape with a negative extent,
    naming the output and, when known, the node."""
    if shape and min(shape) < 0:
        who = f"node {node!r}: " if node else ""
        raise ValueError(f"{who}output {index} requested with shape {list(shape)}: a negative dimension; every extent "
                         "must be >= 0 (a kernel sizing its output from an input smaller than its window gets one: "
                         "fix the kernel's shape arithmetic, or give larger inputs)")


class KernelContext:
    """Inputs, outputs, scratch and planned workspace for one compute call.

    `inputs`: numpy arrays (None for an omitted optional input). `output_types`: ONNX element types
    (or numpy dtypes) of the outputs; an output without a known type takes input 0's dtype.
    `workspace`: slot id -> uint8 array (or DeviceBuffer) planned for this node (None: nothing planned).
    Device kernels pass device tensors as inputs, an output allocator that returns device tensors
    (objects with .shape and .dtype) and a `scratch_allocator` (an ort_abi Allocator).
    `planned_outputs`: (shape or None, element type or 0) per output as the session planned it
    (`ort_abi.planned_outputs(node)`); a request that contradicts it raises OutputMismatchError, and
    is kept in `violations` so a C kernel that drops the error status still fails."""

    def __init__(self, inputs: Sequence[np.ndarray | None], *, output_count: int | None = None,
                 output_types: Sequence[Any] | None = None, output_allocator: OutputAllocator | None = None,
                 workspace: Mapping[int, Any] | None = None, counters: ContextCounters | None = None,
                 node_name: str | None = None, scratch_allocator: Any = None,
                 planned_outputs: Sequence[tuple[Any, int] | None] | None = None) -> None:
        # numpy arrays (host kernels), device tensors (objects with .shape/.dtype) or sequence values:
        # passed through exactly as given
        self.inputs: list[Any] = list(inputs)
        self.output_types = list(output_types or [])
        n_out = output_count if output_count is not None else max(len(self.output_types), 1)
        self.outputs: list[np.ndarray | None] = [None] * n_out
        self._allocator: Callable[..., np.ndarray] = output_allocator or numpy_output_allocator
        self._default_allocator = output_allocator is None
        self.workspace = dict(workspace or {})
        self.counters = counters if counters is not None else ContextCounters()
        self.node_name = node_name
        self._scratch_allocator = scratch_allocator
        self._scratch: list[Any] = []
        self.planned_outputs = list(planned_outputs) if planned_outputs is not None else None
        self.violations: list[Exception] = []

    @property
    def input_count(self) -> int:
        return len(self.inputs)

    @property
    def output_count(self) -> int:
        return len(self.outputs)

    def input(self, index: int) -> np.ndarray | None:
        if not 0 <= index < len(self.inputs):
            raise IndexError(f"input index {index!r} out of range: node {self.node_name!r} has {len(self.inputs)} inputs")
        return self.inputs[index]

    def output_dtype(self, index: int) -> np.dtype:
        if index < len(self.output_types) and self.output_types[index] not in (None, 0):
            return _numpy_dtype(self.output_types[index])
        first = next((a for a in self.inputs if getattr(a, "dtype", None) is not None), None)
        if first is None:
            raise ValueError(f"output {index} of node {self.node_name!r} has no declared type and there is no input "
                             "to take it from; pass output_types to KernelContext")
        return first.dtype

    def output(self, index: int, shape: Sequence[int], dtype: Any = None) -> np.ndarray:
        """The array for output `index`, allocated on first request (same shape/dtype afterwards)."""
        if not 0 <= index < len(self.outputs):
            raise IndexError(f"output index {index!r} out of range: node {self.node_name!r} has {len(self.outputs)} outputs")
        shape = tuple(map(int, shape))
        check_output_shape(index, shape, self.node_name)
        dt = (dtype if isinstance(dtype, np.dtype) else
              self.output_dtype(index) if dtype is None else _numpy_dtype(dtype))
        existing = self.outputs[index]
        if existing is not None and existing.shape == shape and existing.dtype == dt:
            return existing  # checked against the plan when it was first requested
        if self.planned_outputs is not None and index < len(self.planned_outputs):
            try:
                check_planned_output(self.planned_outputs[index], index, shape, dt, self.node_name)
            except OutputMismatchError as e:
                self.violations.append(e)
                raise
        if existing is not None:
            raise ValueError(f"output {index} was already allocated as {existing.shape} {existing.dtype}, "
                             f"now requested as {shape} {dt}; request each output once")
        arr = self._allocator(index, shape, dt)
        if type(arr) is np.ndarray:
            ok = arr.shape == shape and arr.dtype == dt and arr.flags.c_contiguous
        else:
            ok = (tuple(getattr(arr, "shape", ())) == shape and getattr(arr, "dtype", None) == dt
                  and not isinstance(arr, (list, tuple, np.ndarray)))
        if not ok:
            raise TypeError(f"output allocator returned {type(arr).__name__} "
                            f"{getattr(arr, 'shape', None)!r} {getattr(arr, 'dtype', None)!r} for output {index}; "
                            f"it must return a C-contiguous ndarray (or a device tensor) of shape {shape} and dtype {dt}")
        if self._default_allocator:
            self.counters.allocations += 1
        self.outputs[index] = arr
        return arr

    def scratch(self, nbytes: int) -> Any:
        """The unplanned fallback: a fresh uint8 host array, or a DeviceBuffer from `scratch_allocator`
        when one was given (freed by `close()`). Valid until the context is closed or dropped."""
        if not isinstance(nbytes, (int, np.integer)) or nbytes < 0:
            raise ValueError(f"scratch size must be a byte count >= 0, got {nbytes!r}")
        if self._scratch_allocator is not None:
            buf = self._scratch_allocator.alloc(int(nbytes))
        else:
            buf = np.empty(int(nbytes), dtype=np.uint8)
        self._scratch.append(buf)
        self.counters.allocations += 1
        self.counters.scratch_fallbacks += 1
        self.counters.scratch_bytes += int(nbytes)
        return buf

    def close(self) -> None:
        """Free device scratch buffers (host scratch is simply dropped)."""
        scratch, self._scratch = self._scratch, []
        if self._scratch_allocator is not None:
            for buf in scratch:
                self._scratch_allocator.free(buf)

    def preallocated_workspace(self, slot_id: int, requested_bytes: int) -> Any:
        """The planned buffer for `slot_id` (first `requested_bytes` of it), or None when nothing was
        planned for the slot or the request exceeds what was declared: then use `scratch`."""
        buf = self.workspace.get(int(slot_id))
        if buf is None or requested_bytes > buf.nbytes or requested_bytes < 0:
            self.counters.workspace_misses += 1
            return None
        self.counters.workspace_from_plan += 1
        if isinstance(buf, np.ndarray):
            return buf.reshape(-1).view(np.uint8)[: int(requested_bytes)]
        return buf.view(0, int(requested_bytes))  # a DeviceBuffer: a borrowed view of the planned slot
