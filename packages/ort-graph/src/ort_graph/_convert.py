"""ModelProto <-> IR conversion (no file I/O here)."""

from __future__ import annotations

import pathlib
from collections.abc import Mapping

from onnx import AttributeProto, GraphProto, ModelProto, NodeProto, ValueInfoProto, helper

from ._dimspec import UNNAMED
from ._external import DataDirectory, ExternalLocation, materialise
from ._ir import Attr, Dim, Graph, Model, Node, Shape, Value
from ._overridable import OVERRIDABLE_IR_VERSION, list_initializers_as_inputs, settle_inputs
from ._proto_checks import check_model_proto
from ._sparse import materialise_sparse
from ._tensor import Tensor, detached


def _shape_of(vi: ValueInfoProto) -> tuple[int, Shape | None]:
    t = vi.type
    if not t.HasField("tensor_type"):
        return 0, None
    tt = t.tensor_type
    if not tt.HasField("shape"):
        return tt.elem_type, None
    dims: list[Dim] = []
    for d in tt.shape.dim:
        if d.HasField("dim_value") and d.dim_value >= 0:
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param and d.dim_param != UNNAMED:
            dims.append(d.dim_param)
        else:
            dims.append(None)  # a negative value (paddle2onnx's -1), no value, or '?': dynamic and unnamed
    return tt.elem_type, tuple(dims)


def value_from_info(vi: ValueInfoProto) -> Value:
    dtype, shape = _shape_of(vi)
    return Value(vi.name, dtype, shape)


def value_info(v: Value) -> ValueInfoProto:
    shape = None if v.shape is None else [d if d is not None else None for d in v.shape]
    return helper.make_tensor_value_info(v.name, v.dtype, shape)


def _tensor_attribute(a: AttributeProto, value, directory: DataDirectory | None, where: str):
    """A tensor-valued attribute's value with every tensor's external data confined and read (`_external`)."""
    what = f"the tensor of {where}"
    if a.type == AttributeProto.TENSOR:
        return materialise(value, directory, what)
    if a.type == AttributeProto.TENSORS:
        return [materialise(t, directory, f"tensor {k} of {where}") for k, t in enumerate(value)]
    if a.type == AttributeProto.SPARSE_TENSOR:
        return materialise_sparse(value, directory, f"the sparse tensor of {where}")
    return [materialise_sparse(t, directory, f"sparse tensor {k} of {where}") for k, t in enumerate(value)]


_TENSOR_ATTRIBUTES = (AttributeProto.TENSOR, AttributeProto.TENSORS, AttributeProto.SPARSE_TENSOR,
                      AttributeProto.SPARSE_TENSORS)
_TYPE_ATTRIBUTES = (AttributeProto.TYPE_PROTO, AttributeProto.TYPE_PROTOS)


def _own_messages(value):
    """A message-valued attribute (tensor, type) copied out of the parsed file (`detached`); a materialised
    copy (external data read) already is its own."""
    if isinstance(value, list):
        return [_own_messages(v) for v in value]
    return detached(value) if hasattr(value, "CopyFrom") else value


def graph_from_proto(gp: GraphProto, base_dir: pathlib.Path | DataDirectory | None, parent: Node | None = None,
                     in_model_file: Mapping[int, ExternalLocation] | None = None) -> Graph:
    """`in_model_file`: initializers (by index) whose inline bytes are mapped from the model file (`_inline`).
    Every tensor, wherever it sits, has its external data confined to `base_dir` (`_external`): initializers
    stay lazy, sparse initializers become dense initializers, attribute tensors are read now."""
    if base_dir is not None and not isinstance(base_dir, DataDirectory):
        base_dir = DataDirectory.of(base_dir)
    g = Graph(name=gp.name, doc_string=gp.doc_string, parent_node=parent)
    for i, t in enumerate(gp.initializer):
        mapped = in_model_file.get(i) if in_model_file else None
        g.initializers[t.name] = Tensor.from_proto(t, base_dir) if mapped is None else Tensor.in_model_file(t, mapped)
        g.values[t.name] = Value(t.name, t.data_type, tuple(int(d) for d in t.dims))
    for sp in gp.sparse_initializer:
        t = Tensor.from_sparse(sp, base_dir, f"sparse initializer {sp.values.name!r} of graph {gp.name!r}")
        g.initializers[t.name] = t
        g.values[t.name] = Value(t.name, t.dtype, t.dims)
    for vi in gp.input:
        v = value_from_info(vi)
        if vi.name in g.values and v.shape is None:  # initializer listed as input without a shape
            continue
        g.values[vi.name] = v
        g.inputs.append(vi.name)
    for vi in list(gp.value_info) + list(gp.output):
        g.declared_value_info[vi.name] = value_from_info(vi)
    g.outputs = [o.name for o in gp.output]
    # one str object per value name: the values table, producers' outputs and consumers' inputs share it
    # (protobuf makes a new str at every read; a large graph held each name once per use)
    names = {n: n for n in g.values}
    share = names.setdefault
    for i, np_ in enumerate(gp.node):
        node = Node(index=i, name=np_.name, op_type=np_.op_type, domain=np_.domain,
                    inputs=[share(n, n) for n in np_.input], outputs=[share(n, n) for n in np_.output],
                    doc_string=np_.doc_string, metadata={p.key: p.value for p in np_.metadata_props})
        for a in np_.attribute:
            if a.type == AttributeProto.GRAPH:
                value = graph_from_proto(a.g, base_dir, node)
            elif a.type == AttributeProto.GRAPHS:
                value = [graph_from_proto(sg, base_dir, node) for sg in a.graphs]
            else:
                value = helper.get_attribute_value(a)
                if a.type in _TENSOR_ATTRIBUTES:
                    label = f"node {np_.name!r} ({np_.op_type})" if np_.name else f"unnamed node #{i} ({np_.op_type})"
                    value = _own_messages(_tensor_attribute(a, value, base_dir, f"attribute {a.name!r} of {label} "
                                                            f"in graph {gp.name!r}"))
                elif a.type in _TYPE_ATTRIBUTES:
                    value = _own_messages(value)
                elif isinstance(value, bytes):
                    value = value.decode("utf-8", errors="replace")
                elif a.type == AttributeProto.STRINGS:
                    value = [s.decode("utf-8", errors="replace") for s in value]
            node.attributes[a.name] = Attr(a.name, a.type, value)
        g.nodes.append(node)
    for name, declared in g.declared_value_info.items():
        v = g.value(name)
        if v.shape is None and v.dtype == 0:
            v.dtype, v.shape = declared.dtype, declared.shape
    g.relink()
    # relink renames duplicate node names; file order indices are kept
    return g


def model_from_proto(mp: ModelProto, base_dir: pathlib.Path | DataDirectory | None,
                     path: pathlib.Path | None = None,
                     in_model_file: Mapping[int, ExternalLocation] | None = None) -> Model:
    """The IR of a model; the proto is checked first (text, unique names, tensor data: `_proto_checks`)."""
    check_model_proto(mp)
    graph = graph_from_proto(mp.graph, base_dir, in_model_file=in_model_file)
    model = Model(
        graph=graph, ir_version=mp.ir_version,
        opset_imports={("" if o.domain == "ai.onnx" else o.domain): o.version for o in mp.opset_import},
        producer_name=mp.producer_name, producer_version=mp.producer_version, domain=mp.domain,
        model_version=mp.model_version if mp.HasField("model_version") else None, doc_string=mp.doc_string,
        metadata={p.key: p.value for p in mp.metadata_props}, functions=[detached(f) for f in mp.functions], path=path,
    )
    settle_inputs(model)  # before IR 4 no initializer is a feedable input (`_overridable`)
    return model


def _attr_proto(a: Attr, embed: bool) -> AttributeProto:
    if a.type == AttributeProto.GRAPH:
        return helper.make_attribute(a.name, graph_to_proto(a.value, embed))
    if a.type == AttributeProto.GRAPHS:
        return helper.make_attribute(a.name, [graph_to_proto(g, embed) for g in a.value],
                                     attr_type=AttributeProto.GRAPHS)
    return helper.make_attribute(a.name, a.value, attr_type=a.type)


def node_to_proto(n: Node, embed: bool = True) -> NodeProto:
    p = NodeProto(name=n.name, op_type=n.op_type, domain=n.domain, doc_string=n.doc_string)
    p.input.extend(n.inputs)
    p.output.extend(n.outputs)
    p.attribute.extend(_attr_proto(a, embed) for a in n.attributes.values())
    for k, v in n.metadata.items():
        entry = p.metadata_props.add()
        entry.key, entry.value = k, v
    return p


def graph_to_proto(g: Graph, embed: bool = True, *, include_value_info: bool = True,
                   initializer_filter=None) -> GraphProto:
    gp = GraphProto(name=g.name, doc_string=g.doc_string)
    gp.node.extend(node_to_proto(n, embed) for n in g.nodes)
    for t in g.initializers.values():
        if initializer_filter is None or initializer_filter(t):
            gp.initializer.append(t.to_proto(embed))
    gp.input.extend(value_info(g.values[n]) for n in g.inputs)
    gp.output.extend(value_info(g.values.get(n) or g.declared_value_info.get(n) or Value(n)) for n in g.outputs)
    if include_value_info:
        skip = set(g.inputs) | set(g.outputs) | set(g.initializers)
        for name, v in g.values.items():
            if name not in skip and (v.dtype or v.shape is not None) and (v.producer is not None or v.consumers):
                gp.value_info.append(value_info(v))
    return gp


def model_to_proto(m: Model, embed: bool = True) -> ModelProto:
    gp = graph_to_proto(m.graph, embed)
    if m.ir_version < OVERRIDABLE_IR_VERSION:  # that IR lists every initializer as a graph input
        list_initializers_as_inputs(gp)
    mp = helper.make_model(gp, opset_imports=[helper.make_opsetid(d, v) for d, v in m.opset_imports.items()],
                           ir_version=m.ir_version, producer_name=m.producer_name,
                           producer_version=m.producer_version, domain=m.domain,
                           doc_string=m.doc_string)
    if m.model_version is not None:  # absent stays absent (onnxruntime reports an absent version apart from 0)
        mp.model_version = m.model_version
    for k, v in m.metadata.items():
        entry = mp.metadata_props.add()
        entry.key, entry.value = k, v
    mp.functions.extend(m.functions)
    return mp
