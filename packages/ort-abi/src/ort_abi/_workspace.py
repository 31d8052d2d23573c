"""Level-2 workspace types: the input shapes a kernel declares from, and the slots it declares."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from ._errors import WorkspaceDeclarationError

MAX_SLOTS = 8  # == ORT_WORKSPACE_MAX_SLOTS in the header (a test checks they agree)


class InputState(enum.IntEnum):
    """Mirror of OrtWorkspaceInputState."""

    MISSING = 0
    SHAPED = 1
    UNSHAPED = 2


@attrs.frozen
class WorkspaceInputShape:
    """One positional input: missing, present with a shape (-1 per unknown extent), or present
    without a shape (rank unknown). Rank 0 and zero extents are kept as they are."""

    state: InputState
    dims: tuple[int, ...] | None = None
    elem_type: int = 0

    def __attrs_post_init__(self) -> None:
        if self.state == InputState.SHAPED:
            if self.dims is None or any(not isinstance(d, int) or d < -1 for d in self.dims):
                raise ValueError(f"a shaped input needs integer dims >= -1 (-1 = unknown), got {self.dims!r}")
        elif self.dims is not None:
            raise ValueError(f"a {self.state.name.lower()} input has no dims, got {self.dims!r}")

    @classmethod
    def missing(cls) -> WorkspaceInputShape:
        return cls(InputState.MISSING)

    @classmethod
    def shaped(cls, dims: Iterable[int | str | None], elem_type: int = 0) -> WorkspaceInputShape:
        """Symbolic or None extents become -1."""
        return cls(InputState.SHAPED, tuple(d if isinstance(d, int) and d >= 0 else -1 for d in dims), elem_type)

    @classmethod
    def unshaped(cls, elem_type: int = 0) -> WorkspaceInputShape:
        return cls(InputState.UNSHAPED, None, elem_type)

    @property
    def present(self) -> bool:
        return self.state != InputState.MISSING

    @property
    def has_shape(self) -> bool:
        return self.state == InputState.SHAPED

    @property
    def is_static(self) -> bool:
        return self.state == InputState.SHAPED and all(d >= 0 for d in self.dims or ())

    @property
    def rank(self) -> int | None:
        return len(self.dims) if self.dims is not None else None


def _input_states(node: Any) -> list[tuple[InputState, tuple[int, ...] | None, int]]:
    """(state, dims, elem_type) of each positional input of an ort_graph Node, as `workspace_input_shapes` gives them."""
    graph = node.graph
    out: list[tuple[InputState, tuple[int, ...] | None, int]] = []
    for name in node.inputs:
        if not name:
            out.append((InputState.MISSING, None, 0))
            continue
        value = graph.values.get(name) if graph is not None else None
        tensor = graph.initializers.get(name) if graph is not None else None
        dtype = (value.dtype if value is not None else 0) or (tensor.dtype if tensor is not None else 0)
        shape = value.shape if value is not None else None
        if shape is None and tensor is not None:
            shape = tuple(tensor.dims)
        out.append((InputState.UNSHAPED, None, dtype) if shape is None else
                   (InputState.SHAPED, tuple(d if isinstance(d, int) and d >= 0 else -1 for d in shape), dtype))
    return out


def workspace_input_shapes(node: Any) -> list[WorkspaceInputShape]:
    """The WorkspaceInputShape of each positional input of an ort_graph Node, from its graph's values
    (initializers use their dims; symbolic or None extents become -1)."""
    return [WorkspaceInputShape(state, dims, elem_type) for state, dims, elem_type in _input_states(node)]


_SCALARS = (int, float, str, bool)


def _attr_key(value: Any) -> str | None:
    """`repr` of a number, a string or a list of them (exact, and 1, 1.0 and True differ as the typed getters
    tell them apart); None for anything else (a tensor, a graph, a numpy scalar)."""
    if type(value) in _SCALARS:
        return repr(value)
    if type(value) in (list, tuple) and all(type(v) in _SCALARS for v in value):
        return repr(value)
    return None


def node_query_key(node: Any) -> tuple | None:
    """Everything the host API's node queries answer except the node's name (and the EP): the op type, the
    domain, each input as `workspace_input_shapes` gives it, the output count and the attribute values. Two
    nodes with equal keys look alike to an estimate that asks nothing else, so its result can be shared; None
    when an attribute holds a value the key does not cover."""
    attributes = []
    for name, a in node.attributes.items():
        value = _attr_key(a.value)
        if value is None:
            return None
        attributes.append((name, value))
    return (node.op_type, node.domain, tuple(_input_states(node)), len(node.outputs), tuple(attributes))

@attrs.frozen
class WorkspaceSlot:
    """One workspace buffer a kernel instance needs: a kernel-chosen id and its size in bytes."""

    slot_id: int
    size_bytes: int


def validate_slots(slots: Sequence[Any], *, owner: str) -> list[WorkspaceSlot]:
    """Check a declaration: WorkspaceSlot items, ids unique in [0, MAX_SLOTS), sizes >= 0."""
    if len(slots) > MAX_SLOTS:
        raise WorkspaceDeclarationError(f"{owner} declared {len(slots)} workspace slots, more than the maximum "
                                        f"{MAX_SLOTS}; merge buffers into fewer slots")
    seen: set[int] = set()
    out = []
    for slot in slots:
        if not isinstance(slot, WorkspaceSlot):
            raise WorkspaceDeclarationError(f"{owner} declared {slot!r}; return WorkspaceSlot(slot_id, size_bytes) items")
        if not isinstance(slot.slot_id, int) or not 0 <= slot.slot_id < MAX_SLOTS:
            raise WorkspaceDeclarationError(f"{owner} declared slot id {slot.slot_id!r}; ids must be in [0, {MAX_SLOTS})")
        if slot.slot_id in seen:
            raise WorkspaceDeclarationError(f"{owner} declared slot id {slot.slot_id!r} twice; ids are unique per kernel")
        if not isinstance(slot.size_bytes, int) or slot.size_bytes < 0:
            raise WorkspaceDeclarationError(f"{owner} declared slot {slot.slot_id} with size {slot.size_bytes!r}; "
                                            "sizes are byte counts >= 0")
        seen.add(slot.slot_id)
        out.append(slot)
    return out
