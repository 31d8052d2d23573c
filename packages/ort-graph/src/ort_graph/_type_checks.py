"""Element types against op schemas: a node whose inputs its op's ONNX schema does not accept is refused.

ONNX Runtime refuses such a model when it resolves the graph ("Type parameter (T) of Optype (Add) bound to
different types", "Type (tensor(int32)) of input parameter (shape) of operator (Reshape) ... is invalid"). Without
the check the kernels computed such a node anyway, converting the odd input silently (a float + int64 Add gave
a float result). So, after shape resolution, for every node of a domain ONNX defines (subgraph nodes included): inputs one type parameter binds
(`T` of Add's A and B, a homogeneous variadic's every argument) must have one element type, and each input's type
must be one its parameter allows. Only tensor parameters are checked (sequence, optional and map types are not
element types here), only inputs whose element type is known, and not ops a model-local function defines.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import onnx.defs
from onnx import TensorProto

from ._errors import GraphStructureError
from ._ir import Graph, Model, Node

__all__ = ["InputTypeError", "check_input_types"]


class InputTypeError(GraphStructureError):
    """A node's inputs have element types its op's schema does not accept: two inputs bound to one type parameter
    differ, or one is outside its parameter's allowed types. Names the node, the inputs and their types."""


# (domain, op, opset) -> per formal input: (type string, allowed element types or None where not all tensors,
# variadic, homogeneous); None where ONNX has no schema
_Formal = tuple[str, frozenset[int] | None, bool, bool]
_SCHEMAS: dict[tuple[str, str, int], tuple[_Formal, ...] | None] = {}
_BY_TYPE_STR = {f"tensor({name.lower()})": number for name, number in TensorProto.DataType.items()}
_ONNX_DOMAINS = ("", "ai.onnx.ml", "ai.onnx.preview.training")


def _type_str(elem_type: int) -> str:
    try:
        return f"tensor({TensorProto.DataType.Name(elem_type).lower()})"
    except ValueError:
        return f"element type {elem_type}"


def _allowed(strs: list[str]) -> frozenset[int] | None:
    types = [_BY_TYPE_STR.get(s) for s in strs]
    return None if not types or None in types else frozenset(t for t in types if t is not None)


def _formals(domain: str, op: str, opset: int) -> tuple[_Formal, ...] | None:
    key = (domain, op, opset)
    if key not in _SCHEMAS:
        try:
            schema = onnx.defs.get_schema(op, opset, domain)
        except onnx.defs.SchemaError:
            _SCHEMAS[key] = None
            return None
        constraints = {c.type_param_str: list(c.allowed_type_strs) for c in schema.type_constraints}
        variadic = onnx.defs.OpSchema.FormalParameterOption.Variadic
        _SCHEMAS[key] = tuple(
            (f.type_str, _allowed(constraints.get(f.type_str, [f.type_str])), f.option == variadic,
             bool(f.is_homogeneous)) for f in schema.inputs)
    return _SCHEMAS[key]


def _nodes(graph: Graph) -> Iterator[tuple[Graph, Node]]:
    for node in graph.nodes:
        yield graph, node
        for sub in node.subgraphs:
            yield from _nodes(sub)


def check_input_types(model: Model, opsets: Mapping[str, int] | None = None) -> None:
    """Raise InputTypeError for the first node (in graph order, subgraphs after their parent) whose known input
    element types its ONNX schema refuses."""
    opsets = model.opset_imports if opsets is None else opsets
    local = {(getattr(f, "domain", ""), getattr(f, "name", "")) for f in model.functions}
    for graph, node in _nodes(model.graph):
        domain = "" if node.domain == "ai.onnx" else node.domain
        if domain not in _ONNX_DOMAINS or (node.domain, node.op_type) in local or domain not in opsets:
            continue
        formals = _formals(domain, node.op_type, opsets[domain])
        if formals:
            _check_node(graph, node, formals)


def _check_node(graph: Graph, node: Node, formals: tuple[_Formal, ...]) -> None:
    bound: dict[str, tuple[int, str]] = {}  # type parameter -> (element type, the input that bound it)
    values = graph.values
    for i, name in enumerate(node.inputs):
        if not name:
            continue
        type_str, allowed, variadic, homogeneous = formals[min(i, len(formals) - 1)]
        if i >= len(formals) and not variadic:
            return  # more inputs than the schema has: the arity check's business
        v = values.get(name)
        if allowed is None or v is None or not v.dtype:
            continue
        if v.dtype not in allowed:
            want = ", ".join(sorted(_type_str(t) for t in allowed))
            raise InputTypeError(
                f"node {node.name or node.op_type!r} ({node.op_type}): input {i} {name!r} is {_type_str(v.dtype)}, "
                f"which {node.op_type} does not accept for {type_str!r} (allowed: {want}); onnxruntime refuses "
                "this model too — insert a Cast to one of the allowed types before the node")
        if variadic and not homogeneous:
            continue
        first = bound.setdefault(type_str, (v.dtype, name))
        if first[0] != v.dtype:
            raise InputTypeError(
                f"node {node.name or node.op_type!r} ({node.op_type}): inputs {first[1]!r} ({_type_str(first[0])}) "
                f"and {name!r} ({_type_str(v.dtype)}) must have one element type, {node.op_type}'s type parameter "
                f"{type_str!r} binds both; onnxruntime refuses this model too — insert a Cast so that both have "
                "the same type")
