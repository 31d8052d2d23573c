"""Which initializers a run may feed ("overridable" initializers), decided once per model, at load.

From ONNX IR version 4 on, an initializer may also be listed in graph.input: a caller may then feed it, and the
feed replaces the stored value for that run. Before IR 4 every initializer had to be listed there, and none may
be fed: ONNX Runtime treats them all as constants and refuses a feed of one ("Invalid input name").

`settle_inputs` (called by `from_proto` / `load`, and by a session given a `Model`) takes the initializers of a
model before IR 4 out of every graph's `inputs`, so that afterwards one rule holds for any IR version: an
initializer is overridable exactly when its graph lists it in `inputs`. `save` lists them again for IR < 4
(`list_initializers_as_inputs`), as that IR requires, so a saved IR-3 model keeps its meaning.

Everything that reads an initializer's value at initialization to rewrite or specialise the graph (constant
folding, the Conv / BatchNormalization / LayerNorm folds, shape propagation, pre-packing, kernels choosing a
path for a constant weight) asks `constant_initializer(graph, name)`, which is None for an overridable one: as in ONNX
Runtime, an overridable initializer is never folded, so a feed of it is honoured, never silently ignored.
"""

from __future__ import annotations

from onnx import AttributeProto, GraphProto, helper

from ._ir import Graph, Model
from ._tensor import Tensor

OVERRIDABLE_IR_VERSION = 4  # the first IR version whose initializers listed in graph.input may be fed


def is_overridable(graph: Graph, name: str) -> bool:
    """Whether a feed may replace initializer `name` of `graph` (it is an initializer listed in `inputs`)."""
    return name in graph.initializers and name in graph.inputs


def constant_initializer(graph: Graph, name: str) -> Tensor | None:
    """Initializer `name` of `graph` when no feed can replace it (a constant of the model); None when it is not
    an initializer of `graph` or is overridable."""
    t = graph.initializers.get(name) if name else None
    return None if t is None or name in graph.inputs else t


def constant_names(graph: Graph) -> set[str]:
    """The names of the initializers of `graph` that no feed can replace."""
    return graph.initializers.keys() - set(graph.inputs)


def overridable_initializers(graph: Graph) -> list[str]:
    """The initializers of `graph` a run may feed, in graph-input order."""
    return [n for n in graph.inputs if n in graph.initializers]


def settle_inputs(model: Model) -> None:
    """Before IR 4 no initializer may be fed: drop them from every graph's `inputs` (subgraphs included). From
    IR 4 on nothing changes. Idempotent."""
    if model.ir_version >= OVERRIDABLE_IR_VERSION:
        return
    for graph in _graphs(model.graph):
        if any(n in graph.initializers for n in graph.inputs):
            graph.inputs[:] = [n for n in graph.inputs if n not in graph.initializers]


def _graphs(graph: Graph):
    yield graph
    for node in graph.walk():
        yield from node.subgraphs


def list_initializers_as_inputs(gp: GraphProto) -> None:
    """What IR < 4 requires of a saved graph (and its subgraphs): every initializer is also a graph input."""
    listed = {i.name for i in gp.input}
    for t in gp.initializer:
        if t.name not in listed:
            gp.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    for sp in gp.sparse_initializer:
        if sp.values.name not in listed:
            gp.input.append(helper.make_tensor_value_info(sp.values.name, sp.values.data_type, list(sp.dims)))
    for node in gp.node:
        for a in node.attribute:
            if a.type == AttributeProto.GRAPH:
                list_initializers_as_inputs(a.g)
            elif a.type == AttributeProto.GRAPHS:
                for g in a.graphs:
                    list_initializers_as_inputs(g)
