"""The host's queries, in Python. C estimate/create/compute functions reach the SAME functions through
the OrtKernelApi table (`_host_c.py`); Python kernels get a `HostApi` object with them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ._ep import ep_info
from ._workspace import InputState, WorkspaceInputShape, workspace_input_shapes

_MISSING = object()


class AttributeError_(LookupError):
    """Internal: an attribute is absent or of another kind (the C side gets ORT_INVALID_ARGUMENT)."""


_KIND_CHECKS = {  # whether a value is of the kind a getter asks for (only the asked kind is checked)
    "int": lambda value: isinstance(value, int) and not isinstance(value, bool),
    "ints": lambda value: isinstance(value, (list, tuple)) and all(isinstance(v, int) for v in value),
    "float": lambda value: isinstance(value, (float, int)) and not isinstance(value, bool),
    "floats": lambda value: isinstance(value, (list, tuple)) and all(isinstance(v, (float, int)) and not isinstance(v, bool)
                                                                     for v in value),
    "string": lambda value: isinstance(value, str),
}


def typed_attribute(attributes: Mapping[str, Any], name: str, kind: str, owner: str) -> Any:
    """The attribute as `kind` ('int', 'ints', 'float', 'floats', 'string'), or AttributeError_ saying why not."""
    if name not in attributes:
        raise AttributeError_(f"{owner} has no attribute {name!r} (it has {sorted(attributes)!r}); "
                              "check HasAttribute first and use your default")
    value = attributes[name]
    if not _KIND_CHECKS[kind](value):
        raise AttributeError_(f"{owner} attribute {name!r} is {value!r}, not of kind {kind!r}; "
                              "call the getter for its kind")
    if kind == "floats":
        return [float(v) for v in value]
    return float(value) if kind == "float" else value


def node_attributes(node: Any) -> dict[str, Any]:
    return {n: a.value for n, a in node.attributes.items()}


class HostApi:
    """Node, attribute and EP queries for estimate functions (Python twin of the C table)."""

    version = 5

    # -- nodes ------------------------------------------------------------------------------------
    @staticmethod
    def node_name(node: Any) -> str:
        return node.name

    @staticmethod
    def node_op_type(node: Any) -> str:
        return node.op_type

    @staticmethod
    def node_domain(node: Any) -> str:
        return node.domain

    @staticmethod
    def node_input_count(node: Any) -> int:
        return len(node.inputs)

    @staticmethod
    def node_output_count(node: Any) -> int:
        return len(node.outputs)

    @staticmethod
    def _input(node: Any, index: int, shapes: Sequence[WorkspaceInputShape] | None = None) -> WorkspaceInputShape:
        """Input `index` of `node` as `workspace_input_shapes(node)` gives it (`shapes`: that list, made already)."""
        if not 0 <= index < len(node.inputs):
            raise IndexError(f"input index {index} out of range: node {node.name!r} has {len(node.inputs)} inputs")
        return (workspace_input_shapes(node) if shapes is None else shapes)[index]

    @classmethod
    def node_has_input(cls, node: Any, index: int, shapes: Sequence[WorkspaceInputShape] | None = None) -> bool:
        return cls._input(node, index, shapes).state != InputState.MISSING

    @classmethod
    def node_input_shape(cls, node: Any, index: int,
                         shapes: Sequence[WorkspaceInputShape] | None = None) -> tuple[int, ...] | None:
        """The static shape of input `index`, or None when it is missing or any extent is not static."""
        shape = cls._input(node, index, shapes)
        return shape.dims if shape.is_static else None

    @classmethod
    def node_input_element_type(cls, node: Any, index: int, shapes: Sequence[WorkspaceInputShape] | None = None) -> int:
        return cls._input(node, index, shapes).elem_type

    @staticmethod
    def node_has_attribute(node: Any, name: str) -> bool:
        return name in node.attributes

    @staticmethod
    def node_attribute(node: Any, name: str, kind: str, default: Any = _MISSING) -> Any:
        """The attribute as `kind`; absent: `default` when given, else None for the pointer kinds ('ints',
        'floats', 'string': the C getters' OK + NULL) and an error for the scalar ones (as in C)."""
        try:
            return typed_attribute(node_attributes(node), name, kind, f"node {node.name!r}")
        except AttributeError_:
            if name in node.attributes:
                raise
            if default is not _MISSING:
                return default
            if kind in ("ints", "floats", "string"):
                return None
            raise

    # -- the EP -----------------------------------------------------------------------------------
    @staticmethod
    def ep_name(ep: Any) -> str:
        return ep_info(ep).identity.name

    @staticmethod
    def ep_device_type(ep: Any) -> str:
        return ep_info(ep).identity.device_type

    @staticmethod
    def ep_device_id(ep: Any) -> int:
        return ep_info(ep).identity.device_id

    @staticmethod
    def ep_device_property(ep: Any, key: str, default: Any = _MISSING) -> int:
        info = ep_info(ep)
        value = info.property(key)
        if value is None:
            if default is not _MISSING:
                return default
            raise AttributeError_(f"EP {info.identity} has no device property {key!r} "
                                  f"(it has {[k for k, _ in info.device_properties]!r})")
        return value


HOST_API = HostApi()
