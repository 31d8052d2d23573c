"""Structural copies of a model: new nodes, values and graphs; initializer Tensors are shared
(they are immutable), so copying a multi-GB model costs only its node count."""

from __future__ import annotations

import attrs
from onnx import AttributeProto

from ._ir import Attr, Graph, Model, Node, Value


def _copy_graph(g: Graph, parent: Node | None) -> Graph:
    new = Graph(name=g.name, inputs=list(g.inputs), outputs=list(g.outputs), initializers=dict(g.initializers),
                doc_string=g.doc_string, parent_node=parent, shape_warnings=list(g.shape_warnings),
                shape_refusals=dict(g.shape_refusals))
    new.declared_value_info = dict(g.declared_value_info)
    for name, v in g.values.items():
        new.values[name] = Value(name, v.dtype, v.shape)
    for n in g.nodes:
        node = Node(index=n.index, name=n.name, op_type=n.op_type, domain=n.domain, inputs=list(n.inputs),
                    outputs=list(n.outputs), metadata=dict(n.metadata), doc_string=n.doc_string, ep=n.ep)
        for key, a in n.attributes.items():
            if a.type == AttributeProto.GRAPH:
                node.attributes[key] = Attr(a.name, a.type, _copy_graph(a.value, node))
            elif a.type == AttributeProto.GRAPHS:
                node.attributes[key] = Attr(a.name, a.type, [_copy_graph(s, node) for s in a.value])
            else:
                node.attributes[key] = Attr(a.name, a.type, a.value)
        new.nodes.append(node)
    indices = [n.index for n in g.nodes]
    new.relink()
    for node, index in zip(new.nodes, indices):  # keep the original indices (relink renumbers)
        node.index = index
    new._next_index = max(indices, default=-1) + 1
    return new


def copy_model(model: Model) -> Model:
    """A copy whose graph can be edited (nodes added, eps set) without touching `model`."""
    return attrs.evolve(model, graph=_copy_graph(model.graph, None), metadata=dict(model.metadata),
                        opset_imports=dict(model.opset_imports), functions=list(model.functions))
