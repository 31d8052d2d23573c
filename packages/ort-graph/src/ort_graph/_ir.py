"""The graph IR: Model, Graph, Node, Value, Attr. Plain attrs classes, linked by name."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import attrs
from onnx import AttributeProto

from ._dtypes import tensor_nbytes
from ._errors import GraphStructureError
from ._tensor import Tensor

Dim = int | str | None  # static extent, symbolic name, or unknown
Shape = tuple[Dim, ...]

LAYER_ANN_KEY = "layer_ann"
_GRAPH, _GRAPHS = AttributeProto.GRAPH, AttributeProto.GRAPHS


def is_static(shape: Shape | None) -> bool:
    return shape is not None and all(isinstance(d, int) for d in shape)


def symbolic_inputs(graph: Graph) -> dict[str, Shape | None]:
    """Graph inputs (not initializers) whose shape is unknown or has symbolic dimensions, with that shape."""
    out = {}
    for name in graph.inputs:
        shape = graph.values[name].shape if name in graph.values else None
        if name not in graph.initializers and not is_static(shape):
            out[name] = shape
    return out


@attrs.define(eq=False)
class Value:
    """A named tensor flowing between nodes. `shape` is None when even the rank is unknown."""

    name: str
    dtype: int = 0
    shape: Shape | None = None
    producer: Node | None = attrs.field(default=None, repr=False)
    consumers: list[Node] = attrs.field(factory=list, repr=False)

    @property
    def nbytes(self) -> int | None:
        """Bytes of the value when its shape is static and its type sized; else None."""
        shape = self.shape
        if shape is None:
            return None
        for d in shape:
            if not isinstance(d, int):
                return None
        return tensor_nbytes(self.dtype, shape)


@attrs.define
class Attr:
    """A node attribute: its ONNX type and python value (Graph for subgraphs)."""

    name: str
    type: int
    value: Any


@attrs.define(eq=False)
class Node:
    """One operator application. `inputs` keeps '' for omitted optional inputs."""

    index: int
    name: str
    op_type: str
    domain: str = ""
    inputs: list[str] = attrs.field(factory=list)
    outputs: list[str] = attrs.field(factory=list)
    attributes: dict[str, Attr] = attrs.field(factory=dict)
    metadata: dict[str, str] = attrs.field(factory=dict)
    doc_string: str = ""
    ep: str | None = None
    graph: Graph | None = attrs.field(default=None, repr=False)

    @property
    def layer_ann(self) -> str | None:
        """The `layer_ann` metadata annotation, stripped, or None when absent or empty."""
        ann = self.metadata.get(LAYER_ANN_KEY, "").strip()
        return ann or None

    @property
    def label(self) -> str:
        """The name, or `<unnamed Op #index>` for the unnamed nodes many exporters emit (for messages)."""
        return self.name or f"<unnamed {self.op_type} #{self.index}>"

    @property
    def qualified_op(self) -> str:
        return f"{self.domain}::{self.op_type}" if self.domain not in ("", "ai.onnx") else self.op_type

    def attr(self, name: str, default: Any = None) -> Any:
        a = self.attributes.get(name)
        return default if a is None else a.value

    @property
    def subgraphs(self) -> list[Graph]:
        out: list[Graph] = []
        for a in self.attributes.values():  # called per node by every graph walk: keep it lean
            t = a.type
            if t == _GRAPH:
                out.append(a.value)
            elif t == _GRAPHS:
                out.extend(a.value)
        return out

    def implicit_inputs(self) -> list[str]:
        """Outer-scope values that this node's subgraphs read."""
        if not self.attributes:  # most nodes: no attribute, no subgraph
            return []
        subgraphs = self.subgraphs
        if not subgraphs:
            return []
        names: list[str] = []
        for g in subgraphs:
            for n in g.outer_references():
                if n not in names:
                    names.append(n)
        return names


@attrs.define(eq=False)
class Graph:
    """Nodes in file order plus values, initializers and graph inputs/outputs (by name)."""

    name: str = "graph"
    nodes: list[Node] = attrs.field(factory=list)
    inputs: list[str] = attrs.field(factory=list)
    outputs: list[str] = attrs.field(factory=list)
    initializers: dict[str, Tensor] = attrs.field(factory=dict)
    values: dict[str, Value] = attrs.field(factory=dict)
    declared_value_info: dict[str, Value] = attrs.field(factory=dict, repr=False)
    doc_string: str = ""
    parent_node: Node | None = attrs.field(default=None, repr=False)
    shape_warnings: list[str] = attrs.field(factory=list, repr=False)
    # node name -> why onnx shape inference refused the node on its (fully known) input shapes: the hint of the
    # unresolved-shapes warning and error
    shape_refusals: dict[str, str] = attrs.field(factory=dict, repr=False)
    _node_names: set[str] = attrs.field(factory=set, repr=False, alias="node_names")
    _next_index: int = attrs.field(default=0, repr=False, alias="next_index")
    _detached: set[int] = attrs.field(factory=set, repr=False, init=False)  # ids `compact` drops from `nodes`
    # base -> the token `generate_node_name` tries first: every lower one is taken (cleared when a name is freed)
    _name_tokens: dict[str, int] = attrs.field(factory=dict, repr=False, init=False, eq=False)

    # -- construction -------------------------------------------------------------------------
    def value(self, name: str) -> Value:
        v = self.values.get(name)
        if v is None:
            v = self.values[name] = Value(name)
        return v

    def add_node(self, op_type: str, inputs: list[str], outputs: list[str], *, name: str | None = None,
                 domain: str = "", attributes: dict[str, Attr] | None = None,
                 metadata: dict[str, str] | None = None, position: int | None = None) -> Node:
        """Add a node; its name is made unique with `generate_node_name` (given name or op_type)."""
        node = Node(index=self._next_index, name=self.generate_node_name(name or op_type), op_type=op_type,
                    domain=domain, inputs=list(inputs), outputs=list(outputs),
                    attributes=dict(attributes or {}), metadata=dict(metadata or {}), graph=self)
        self._next_index += 1
        if position is None:
            self.nodes.append(node)
        else:
            self.nodes.insert(position, node)
        self._link_node(node)
        return node

    def remove_node(self, node: Node) -> None:
        self.nodes.remove(node)
        self._unlink(node)

    def detach_node(self, node: Node) -> None:
        """`remove_node` except that the node stays in `nodes` until `compact()`: many removals in one pass
        over the list (each `remove_node` scans it)."""
        self._detached.add(id(node))
        self._unlink(node)

    def compact(self, placed: dict[int, list[Node]] | None = None) -> None:
        """Drop the detached nodes from `nodes`, and put each list of `placed` (nodes added since, found at
        the end) where the node whose id is its key stands: one pass, the order otherwise kept."""
        placed = placed or {}
        moving = {id(n) for new in placed.values() for n in new}
        out: list[Node] = []
        for n in self.nodes:
            if id(n) in placed:
                out.extend(placed[id(n)])
                if id(n) not in self._detached:
                    out.append(n)
            elif id(n) not in self._detached and id(n) not in moving:
                out.append(n)
        self.nodes[:] = out
        self._detached.clear()

    def _unlink(self, node: Node) -> None:
        self._node_names.discard(node.name)
        self._name_tokens.clear()
        for name in node.inputs:
            if name and name in self.values and node in self.values[name].consumers:
                self.values[name].consumers.remove(node)
        for name in node.outputs:
            if name and name in self.values and self.values[name].producer is node:
                self.values[name].producer = None

    def generate_node_name(self, base: str) -> str:
        """`base` itself when unused in this graph, else `base_token_N` for the first free N."""
        names = self._node_names
        if not names:
            names = self._node_names = {n.name for n in self.nodes if id(n) not in self._detached}
            self._name_tokens.clear()
        if base not in names:
            names.add(base)
            return base
        token = self._name_tokens.get(base, 0)  # not from 0: many unnamed nodes made this quadratic
        while (name := f"{base}_token_{token}") in names:
            token += 1
        self._name_tokens[base] = token + 1
        names.add(name)
        return name

    def _link_node(self, node: Node) -> None:
        node.graph = self
        values = self.values
        for name in node.inputs:
            if name:
                v = values.get(name)
                if v is None:
                    v = values[name] = Value(name)
                v.consumers.append(node)
        if node.attributes:
            for name in node.implicit_inputs():
                if name in values or name in self.initializers:
                    self.value(name).consumers.append(node)
        for name in node.outputs:
            if name:
                v = values.get(name)
                if v is None:
                    v = values[name] = Value(name)
                if v.producer is not None and v.producer is not node:
                    raise GraphStructureError(
                        f"value {name!r} is produced by both {v.producer.name!r} and {node.name!r}; "
                        "every value must have exactly one producer (SSA) — rename one output"
                    )
                v.producer = node

    def relink(self) -> None:
        """Rebuild producers/consumers and node indices from scratch after bulk edits."""
        for v in self.values.values():
            v.producer, v.consumers = None, []
        for name in list(self.inputs) + list(self.initializers):
            self.value(name)
        self._node_names = set()
        self._name_tokens.clear()
        for i, node in enumerate(self.nodes):
            node.index = i
            if node.name in self._node_names:
                node.name = self.generate_node_name(node.name)
            else:
                self._node_names.add(node.name)
        self._next_index = len(self.nodes)
        for node in self.nodes:
            self._link_node(node)

    # -- queries ------------------------------------------------------------------------------
    def node_by_name(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(f"no node named {name!r} in graph {self.name!r}")

    def outer_references(self) -> list[str]:
        """Names this (sub)graph reads but neither defines nor receives as inputs."""
        defined = set(self.inputs) | set(self.initializers)
        for n in self.nodes:
            defined.update(o for o in n.outputs if o)
        refs: list[str] = []
        for n in self.nodes:
            for name in list(n.inputs) + n.implicit_inputs():
                if name and name not in defined and name not in refs:
                    refs.append(name)
        return refs

    def rename_outer_reference(self, old: str, new: str) -> bool:
        """Make this (sub)graph, and the subgraphs nested in it, read outer-scope value `old` as `new`
        (where `old` is not defined at that level). Returns whether anything was renamed."""
        defined = set(self.inputs) | set(self.initializers) | {o for n in self.nodes for o in n.outputs if o}
        if old in defined:
            return False
        changed = False
        for n in self.nodes:
            if old in n.inputs:
                n.inputs = [new if i == old else i for i in n.inputs]
                changed = True
            for g in n.subgraphs:
                changed = g.rename_outer_reference(old, new) or changed
        if old in self.outputs:
            self.outputs = [new if o == old else o for o in self.outputs]
            changed = True
        if changed:
            if old in self.values and new not in self.values:
                v = self.values[old]
                self.value(new).dtype, self.value(new).shape = v.dtype, v.shape
            self.relink()
        return changed

    def walk(self) -> Iterator[Node]:
        """Every node, subgraph nodes after their parent."""
        for n in self.nodes:
            yield n
            for g in n.subgraphs:
                yield from g.walk()

    def is_initializer(self, name: str) -> bool:
        return name in self.initializers

    def output_nbytes(self, node: Node) -> int | None:
        """Bytes of a node's outputs; None if any output's size is unknown."""
        total = 0
        for o in node.outputs:
            if not o:
                continue
            n = self.values[o].nbytes if o in self.values else None
            if n is None:
                return None
            total += n
        return total

    def initializer_nbytes(self, node: Node) -> int:
        """Bytes of the initializers a node reads directly (each counted once for the node)."""
        seen = {name for name in node.inputs if name in self.initializers}
        return sum(self.initializers[name].nbytes for name in seen)


@attrs.define(eq=False)
class Model:
    """A loaded model: the main graph plus the model-level fields that round-trip."""

    graph: Graph
    ir_version: int = 10
    opset_imports: dict[str, int] = attrs.field(factory=lambda: {"": 21})
    producer_name: str = ""
    producer_version: str = ""
    domain: str = ""
    model_version: int | None = None  # None: the file has no model_version field
    doc_string: str = ""
    metadata: dict[str, str] = attrs.field(factory=dict)
    functions: list[Any] = attrs.field(factory=list, repr=False)
    path: pathlib.Path | None = None

    def opset(self, domain: str = "") -> int | None:
        if domain == "ai.onnx":
            domain = ""
        return self.opset_imports.get(domain)
