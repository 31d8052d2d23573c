"""Checks on a parsed ModelProto before it becomes IR: a model file is untrusted input.

- every text field is valid UTF-8 (protobuf hands invalid text back as `bytes`);
- every value has one definition per graph (SSA): graph inputs, initializers and node outputs do not
  collide (an initializer may still be listed as a graph input: its default); a node inside a subgraph
  may not redefine a name already defined in an enclosing graph before the node that owns the subgraph
  (the rule of `onnx.checker`, which ONNX Runtime applies too); subgraph inputs and initializers may
  shadow outer names, as ONNX allows;
- every top-level tensor input has a defined element type, every node an op_type, every attribute a defined
  type (the schema's, for a standard operator), and a node of a standard operator has as many inputs and outputs
  as its schema (for the model's opset) allows;
- every embedded tensor's data (raw_data or the typed field) holds exactly the bytes/elements its
  data type and dims call for and dims are non-negative, wherever the tensor sits: initializers, sparse
  initializers (values, indices and their shapes: `_sparse`), attribute tensors (TENSOR, TENSORS,
  SPARSE_TENSOR, SPARSE_TENSORS); a tensor in any of those places may keep its data in an external file,
  checked against its file when the IR is built (`_external`).

Violations raise ModelLoadError subclasses naming the field, tensor or value; nothing is left half-built.
"""

from __future__ import annotations

import functools
import math
from collections import ChainMap
from collections.abc import Mapping

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from onnx import (
    AttributeProto,
    GraphProto,
    ModelProto,
    NodeProto,
    SparseTensorProto,
    TensorProto,
    defs,
    helper,
)

from ._contrib_attrs import CONTRIB_ATTRIBUTE_TYPES
from ._dtypes import dtype_name, tensor_nbytes
from ._errors import (
    DuplicateNameError,
    ExternalDataError,
    ModelLoadError,
    TensorDataError,
    UnsupportedModelError,
)
from ._sparse import check_structure

_ELEMENTS_PER_ENTRY = {TensorProto.COMPLEX64: 0.5, TensorProto.COMPLEX128: 0.5}
for _n, _per in (("INT4", 2), ("UINT4", 2), ("FLOAT4E2M1", 2), ("INT2", 4), ("UINT2", 4)):
    if hasattr(TensorProto, _n):
        _ELEMENTS_PER_ENTRY[getattr(TensorProto, _n)] = _per
_RAW_BITS = {getattr(TensorProto, n): 2 for n in ("INT2", "UINT2") if hasattr(TensorProto, n)}


def check_model_proto(mp: ModelProto) -> None:
    """Raise a ModelLoadError for the first problem found (see the module docstring)."""
    _check_text(mp, "model")
    opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in mp.opset_import}
    _check_opset(opsets.get(""))
    _check_graph(mp.graph, {}, "graph", opsets)
    for fp in mp.functions:
        _check_function_tensors(fp.node, f"function {fp.domain + ':' if fp.domain else ''}{fp.name}")


def _check_opset(version: int | None) -> None:
    """The default domain's opset must be one onnx defines: for a later one no schema says what its ops mean (an op
    would silently run at the latest semantics known), and onnxruntime refuses it too."""
    if version is None:
        return
    known = defs.onnx_opset_version()
    if version > known:
        raise UnsupportedModelError(
            f"the model imports opset {version} of the default ONNX domain, but the installed onnx knows opsets up to "
            f"{known}, so what its ops mean at {version} is unknown (onnxruntime refuses it too); upgrade onnx "
            f"(pip install -U onnx) or re-export the model at opset {known} or lower")
    if version < 1:
        raise UnsupportedModelError(f"the model imports opset {version} of the default ONNX domain; opsets start at 1: "
                                    "the model file is corrupt, re-export it")


# -- text ---------------------------------------------------------------------------------------------
def _is_repeated(fd: FieldDescriptor) -> bool:
    repeated = getattr(fd, "is_repeated", None)  # protobuf >= 6; older versions only have `label`
    return bool(repeated) if repeated is not None else fd.label == FieldDescriptor.LABEL_REPEATED


_SKIP, _TEXT, _TEXTS, _MESSAGE, _MESSAGES = range(5)
_KINDS: dict[FieldDescriptor, int] = {}  # what `_check_text` does with a field, decided once per field


def _kind(fd: FieldDescriptor) -> int:
    kind = _KINDS.get(fd)
    if kind is None:
        many = _is_repeated(fd)
        kind = _KINDS[fd] = (_TEXTS if many else _TEXT) if fd.type == FieldDescriptor.TYPE_STRING else \
            (_MESSAGES if many else _MESSAGE) if fd.type == FieldDescriptor.TYPE_MESSAGE else _SKIP
    return kind


def _check_text(msg: Message, path: str) -> None:
    for fd, value in msg.ListFields():  # every message of the file: kept lean
        kind = _KINDS.get(fd)
        if kind is None:
            kind = _kind(fd)
        if kind == _SKIP:
            continue
        if kind == _TEXT:
            if not isinstance(value, str):
                _not_text(f"{path}.{fd.name}", value)
        elif kind == _TEXTS:
            for i, text in enumerate(value):
                if not isinstance(text, str):
                    _not_text(f"{path}.{fd.name}[{i}]", text)
        elif kind == _MESSAGE:
            _check_text(value, f"{path}.{fd.name}")
        else:
            for i, sub in enumerate(value):
                _check_text(sub, f"{path}.{fd.name}[{i}]")


def _not_text(where: str, text: object) -> None:
    raise ModelLoadError(
        f"text field {where} of the model is not valid UTF-8 ({bytes(text)[:80]!r}); ONNX stores "
        "names and strings as UTF-8 — the file is corrupt or was written by a broken exporter")


# -- names --------------------------------------------------------------------------------------------
def _node_label(node: NodeProto, index: int) -> str:
    return f"node {node.name!r} ({node.op_type})" if node.name else f"unnamed node #{index} ({node.op_type})"


class _Output:
    """'<node label> output k' (`_node_label`), as the definition of a value: written out only in an error
    message, not for every output of the file."""

    __slots__ = ("index", "k", "node")

    def __init__(self, node: NodeProto, index: int, k: int) -> None:
        self.node, self.index, self.k = node, index, k

    def __str__(self) -> str:
        return f"{_node_label(self.node, self.index)} output {self.k}"


def _duplicate(name: str, first: str | _Output, second: str | _Output, graph: str) -> DuplicateNameError:
    return DuplicateNameError(
        f"value {name!r} is defined twice in {graph}: by {first} and by {second}; every value must have exactly "
        "one definition (SSA; onnx.checker and ONNX Runtime refuse this model too) — rename one of them")


def _check_graph(gp: GraphProto, outer: Mapping[str, str | _Output], where: str, opsets: dict[str, int]) -> None:
    graph = f"graph {gp.name!r} ({where})"
    defined: dict[str, str | _Output] = {}
    for vi in gp.input:
        if vi.name in defined:
            raise _duplicate(vi.name, "a graph input", "another graph input of the same name", graph)
        defined[vi.name] = "a graph input"
        elem = vi.type.tensor_type.elem_type if vi.type.HasField("tensor_type") else None
        if not outer and elem is not None and (elem == TensorProto.UNDEFINED or elem not in _DATA_TYPES):
            raise TensorDataError(f"input {vi.name!r} of {graph} declares element type {dtype_name(elem)}, which "
                                  "ONNX does not define as a tensor's (ONNX Runtime refuses it too); the model file "
                                  "is corrupt — re-export it with the input's real type")
    initializers: set[str] = set()
    for t in gp.initializer:
        if t.name in initializers:
            raise _duplicate(t.name, "an initializer", "another initializer of the same name", graph)
        initializers.add(t.name)
        defined.setdefault(t.name, "an initializer")  # an initializer listed as an input is that input's default
        _check_tensor(t, f"initializer {t.name!r} of {graph}")
    for sp in gp.sparse_initializer:
        name = sp.values.name
        if name in initializers:
            raise _duplicate(name, "an initializer", "a sparse initializer of the same name", graph)
        initializers.add(name)
        defined.setdefault(name, "a sparse initializer")
        _check_sparse(sp, f"sparse initializer {name!r} of {graph}")
    for i, node in enumerate(gp.node):
        _check_arity(node, i, graph, opsets)
        for a in node.attribute:  # names visible to a subgraph: this graph's so far, then the enclosing ones
            _check_attribute(a, node, i, ChainMap(defined, outer) if a.type in _SUBGRAPH_TYPES or a.HasField("g")
                             or a.graphs else outer, graph, opsets)
        for k, out in enumerate(node.output):
            if not out:
                continue
            producer = _Output(node, i, k)
            if out in defined:
                raise _duplicate(out, defined[out], producer, graph)
            if out in outer:
                raise _duplicate(out, f"{outer[out]} of an enclosing graph", producer, graph)
            defined[out] = producer


_ATTR_NAMES = {v: k for k, v in AttributeProto.AttributeType.items() if v != AttributeProto.UNDEFINED}
_SUBGRAPH_TYPES = (AttributeProto.GRAPH, AttributeProto.GRAPHS)
_DATA_TYPES = frozenset(TensorProto.DataType.values())  # protobuf builds the list anew at every values() call


def _attr_value(a: AttributeProto) -> str:
    try:
        text = repr(helper.get_attribute_value(a))
    except Exception:  # noqa: BLE001 - a value onnx cannot read back is shown by its type alone
        return "unreadable"
    return text if len(text) <= 80 else text[:80] + "..."


@functools.lru_cache(maxsize=4096)
def _schema(op_type: str, version: int, domain: str) -> defs.OpSchema | None:
    try:
        return defs.get_schema(op_type, version, domain)
    except defs.SchemaError:
        return None


def _check_arity(node: NodeProto, index: int, graph: str, opsets: dict[str, int]) -> None:
    if not node.op_type:
        raise ModelLoadError(f"{_node_label(node, index)} in {graph} has an empty op_type; every node names its operator (onnx.checker "
                             "and ONNX Runtime refuse this too) — the model file is corrupt, re-export it")
    domain = "" if node.domain == "ai.onnx" else node.domain
    version = opsets.get(domain)
    if version is None:
        raise ModelLoadError(
            f"{_node_label(node, index)} in {graph} uses operator domain {domain or 'ai.onnx'!r}, but the model imports no opset for it "
            f"(opset_import: {opsets!r}); every domain a node uses must be imported (onnx.checker requires it) — "
            "the model file is truncated or corrupt")
    schema = _schema(node.op_type, version, domain)
    if schema is None:  # not a standard operator at this opset: placement declines it (or a plugin kernel serves it)
        contrib = CONTRIB_ATTRIBUTE_TYPES.get((domain, node.op_type))
        if contrib is not None:
            _check_attribute_types(node, index, graph, contrib, f"{domain + '::' if domain else ''}{node.op_type} (onnxruntime's schema)")
        return
    for kind, have, low, high in (("inputs", len(node.input), schema.min_input, schema.max_input),
                                  ("outputs", len(node.output), schema.min_output, schema.max_output)):
        if not low <= have <= high:
            allowed = f"{low}" if low == high else f"{low}..{high}"
            raise ModelLoadError(
                f"{_node_label(node, index)} in {graph} has {have} {kind}, but {node.op_type} (opset {schema.since_version} of domain "
                f"{domain or 'ai.onnx'!r}) takes {allowed}; the model file is corrupt or was exported for another "
                "opset — re-export it")
    if node.attribute:
        _check_attribute_types(node, index, graph, _declared_types(node.op_type, version, domain),
                               f"{node.op_type} (opset {schema.since_version})")


@functools.lru_cache(maxsize=4096)
def _declared_types(op_type: str, version: int, domain: str) -> dict[str, int]:
    """The attribute types the op's schema declares (reading `schema.attributes` builds them all each time)."""
    schema = _schema(op_type, version, domain)
    return {} if schema is None else {k: int(a.type) for k, a in schema.attributes.items()}


def _check_attribute_types(node: NodeProto, index: int, graph: str, declared: Mapping[str, int], op: str) -> None:
    for a in node.attribute:
        want = declared.get(a.name)
        if want is not None and not a.ref_attr_name and a.type in _ATTR_NAMES and a.type != want:
            raise ModelLoadError(
                f"attribute {a.name!r} of {_node_label(node, index)} in {graph} is of type {_ATTR_NAMES[a.type]} ({_attr_value(a)}), "
                f"but {op} declares it {_ATTR_NAMES.get(want, want)}; onnx.checker and ONNX Runtime refuse this too "
                "— fix the attribute or re-export the model")


def _check_attribute(a: AttributeProto, node: NodeProto, index: int, visible: Mapping[str, str | _Output], graph: str,
                     opsets: dict[str, int]) -> None:
    kind = a.type
    if kind not in _ATTR_NAMES:
        raise ModelLoadError(f"attribute {a.name!r} of {_node_label(node, index)} in {graph} has attribute type {kind}, which ONNX does "
                             "not define; the model file is corrupt — re-export it")
    if kind in _SIMPLE_ATTRIBUTES and not (a.HasField("g") or a.HasField("t") or a.HasField("sparse_tensor")
                                           or a.graphs or a.tensors or a.sparse_tensors):
        return  # a number, a string or lists of them (most attributes): nothing nested to check
    where = f"attribute {a.name!r} of {_node_label(node, index)} in {graph}"
    if kind == AttributeProto.GRAPH or a.HasField("g"):
        _check_graph(a.g, visible, where, opsets)
    for k, sub in enumerate(a.graphs):
        _check_graph(sub, visible, f"{where} [{k}]", opsets)
    if a.HasField("t"):
        _check_tensor(a.t, f"the tensor of {where}")
    for k, t in enumerate(a.tensors):
        _check_tensor(t, f"tensor {k} of {where}")
    if a.HasField("sparse_tensor"):
        _check_sparse(a.sparse_tensor, f"the sparse tensor of {where}")
    for k, sp in enumerate(a.sparse_tensors):
        _check_sparse(sp, f"sparse tensor {k} of {where}")


_SIMPLE_ATTRIBUTES = frozenset({AttributeProto.FLOAT, AttributeProto.INT, AttributeProto.STRING, AttributeProto.FLOATS,
                                AttributeProto.INTS, AttributeProto.STRINGS})


def _check_function_tensors(nodes, where: str) -> None:
    """Model-local functions are kept as protos (for onnx shape inference), never converted: a tensor in them
    with external data is refused rather than left for a later reader to resolve."""
    for i, node in enumerate(nodes):
        for a in node.attribute:
            what = f"attribute {a.name!r} of {_node_label(node, i)} in {where}"
            subs = ([a.g] if a.HasField("g") else []) + list(a.graphs)
            tensors = ([a.t] if a.HasField("t") else []) + list(a.tensors)
            for sp in ([a.sparse_tensor] if a.HasField("sparse_tensor") else []) + list(a.sparse_tensors):
                tensors += [sp.values, sp.indices]
            for sub in subs:
                tensors += list(sub.initializer) + [p for sp in sub.sparse_initializer for p in (sp.values, sp.indices)]
                _check_function_tensors(sub.node, f"graph {sub.name!r} of {what}")
            for t in tensors:
                if t.data_location == TensorProto.EXTERNAL:
                    location = next((e.value for e in t.external_data if e.key == "location"), "")
                    raise ExternalDataError(
                        f"tensor {t.name!r} of {what} has external data location {location!r}: a model-local "
                        "function's tensors may not keep data in external files; embed the tensor")


# -- tensor data --------------------------------------------------------------------------------------
def _check_sparse(sp: SparseTensorProto, what: str) -> None:
    check_structure(sp, what)
    _check_tensor(sp.values, f"values of {what}")
    if sp.HasField("indices"):
        _check_tensor(sp.indices, f"indices of {what}")


def _check_tensor(t: TensorProto, what: str) -> None:
    dims = list(t.dims)
    if any(d < 0 for d in dims):
        raise TensorDataError(f"{what} has negative dims {dims!r}; the model file is corrupt — re-export it")
    if t.data_type not in _DATA_TYPES or t.data_type == TensorProto.UNDEFINED:
        raise TensorDataError(f"{what} has data type {dtype_name(t.data_type)}, which ONNX does not define; "
                              "the model file is corrupt — re-export it")
    if t.data_location == TensorProto.EXTERNAL:
        return  # checked against its file by _external.resolve
    count = math.prod(dims)
    if t.HasField("raw_data"):
        expected = tensor_nbytes(t.data_type, dims)
        if expected is None and t.data_type in _RAW_BITS:
            expected = math.ceil(count * _RAW_BITS[t.data_type] / 8)
        if t.data_type == TensorProto.STRING:
            raise TensorDataError(f"{what} is a string tensor with raw_data; strings go in string_data — "
                                  "the model file is corrupt")
        if expected is not None and len(t.raw_data) != expected:
            raise TensorDataError(
                f"{what} holds {len(t.raw_data)} bytes of raw_data, but {dtype_name(t.data_type)} {dims!r} needs "
                f"{expected}; the model file is corrupt or truncated — re-export it")
        return
    field = helper.tensor_dtype_to_field(t.data_type)
    have = len(getattr(t, field))
    expected = math.ceil(count / _ELEMENTS_PER_ENTRY.get(t.data_type, 1))
    if have != expected:
        raise TensorDataError(
            f"{what} holds {have} entries in {field}, but {dtype_name(t.data_type)} {dims!r} needs {expected}; "
            "the model file is corrupt or truncated — re-export it")
