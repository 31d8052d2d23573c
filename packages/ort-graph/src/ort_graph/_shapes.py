"""Shape resolution: ONNX inference plus dimension overrides, max shapes and contrib-op handlers.

`resolve_shapes(model, dims={"batch": 1, "x.2": 48}, max_shapes={"input_ids": [8, 4096]})` fills every value's
dtype and shape in place. Shapes are computed, never trusted from the file: a declared annotation that
contradicts inference is reported as a ShapeAnnotationWarning naming the value, and inference wins.

Per node, in topological order: contrib handlers, ONNX schemas, then `output_shapes` (e.g. the kernel
registry's shape callbacks for custom-domain ops), and only then the file's declared `value_info` /
graph-output annotation — applied at once, so the nodes after a custom op resolve from it. What stays
unresolved is reported (ShapeResolutionWarning) naming the first node that produced it and the fix.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Mapping, Sequence

import attrs
import numpy as np
import onnx
from onnx import ModelProto, TypeProto, helper, numpy_helper

from ._constprop import evaluate, shape_value
from ._contrib_shapes import handler_for
from ._control_shapes import infer_control_flow, is_control_flow
from ._convert import _shape_of, graph_to_proto
from ._data_prop import InferredTable, inferred_table
from ._declared import (
    _apply_declared,
    _has_anonymous,
    _substitute,
    first_unresolved_node,
    unresolved_hint,
)
from ._dimspec import parse_shapes
from ._errors import MalformedNodeError, ShapeAnnotationWarning, ShapeResolutionWarning
from ._inference_guard import bound_slice_steps, bounded_steps, slice_unsafe
from ._input_dims import input_shapes
from ._ir import Graph, Model, Node, Shape, Value, is_static
from ._overridable import constant_names
from ._shape_values import Vector, shape_from_vector, vector_of
from ._topo import topological_order
from ._type_checks import check_input_types

Type = tuple[int, Shape | None]
# (node, its input types) -> one (dtype, shape) per output ((0, None) where unknown), or None: not known
OutputShapes = Callable[[Node, list[Type]], list[Type] | None]

SMALL_INITIALIZER = 4096  # bytes: initializers up to this size keep their data for data propagation

_log = logging.getLogger("ort_graph")


@attrs.frozen
class ShapeReport:
    """What resolution achieved: counts of values by how well their shape is known, and warnings."""

    static: int
    symbolic: int
    unknown: int
    warnings: tuple[str, ...]
    unresolved: tuple[str, ...]  # values whose rank is unknown
    unresolved_node: str | None = None  # the first node whose outputs could not be resolved


def parse_max_shape_override(text: str) -> dict[str, list[int]]:
    """Parse `session.max_shape_override`: `input_ids=[8,4096];mask=[8,4096]` (`_dimspec`'s grammar; the
    older `input_ids:[8,4096]` spelling too)."""
    return parse_shapes(text)


def _shape_only_proto(model: Model, inputs: dict[str, Shape | None]) -> ModelProto:
    g = model.graph
    consts = constant_names(g)  # an overridable initializer's value is not known before the run: an input only
    small = lambda t: t.nbytes <= SMALL_INITIALIZER and t.name in consts  # noqa: E731
    gp = graph_to_proto(g, embed=True, include_value_info=False, initializer_filter=small)
    del gp.input[:]
    del gp.output[:]
    for name in g.inputs:
        gp.input.append(helper.make_tensor_value_info(name, g.values[name].dtype, inputs[name]))
    for name, t in g.initializers.items():
        if not small(t) and name in consts:
            gp.input.append(helper.make_tensor_value_info(name, t.dtype, list(t.dims)))
    gp.output.extend(helper.make_empty_tensor_value_info(n) for n in g.outputs)
    mp = helper.make_model(gp, opset_imports=[helper.make_opsetid(d, v) for d, v in model.opset_imports.items()],
                           ir_version=max(model.ir_version, 4))
    mp.functions.extend(model.functions)
    bound_slice_steps(mp)  # steps onnx's C++ does not survive (`_inference_guard`)
    return mp


def _read_back(found: InferredTable, graph: Graph, inferred: dict[int, dict[str, tuple[int, Shape | None]]]) -> None:
    values, subs = found
    table = inferred.setdefault(id(graph), {})
    for name, dtype, shape in values:
        table[name] = (dtype, shape)
    nodes = graph.nodes
    for index, tables in subs:
        if index < len(nodes):
            for sub, sub_found in zip(nodes[index].subgraphs, tables):
                _read_back(sub_found, sub, inferred)


def _type_proto(v: Value) -> TypeProto:
    return helper.make_tensor_type_proto(v.dtype, None if v.shape is None else list(v.shape))


def _complete(shape: Shape | None) -> bool:
    return shape is not None and all(d is not None for d in shape)


def _infer_node(node: Node, graph: Graph, opsets: dict[str, int], consts: dict[str, np.ndarray],
                output_shapes: OutputShapes | None = None) -> list[tuple[int, Shape | None]] | None:
    ins = [(graph.values[n].dtype, graph.values[n].shape) if n and n in graph.values else (0, None) for n in node.inputs]
    node_consts = {i: consts[n] for i, n in enumerate(node.inputs) if n in consts}
    handler = handler_for(node.domain, node.op_type)
    if handler is not None:
        try:
            return handler(node, ins, node_consts)
        except (ValueError, IndexError, TypeError, ZeroDivisionError, OverflowError, AttributeError) as e:
            attrs = {k: a.value for k, a in node.attributes.items() if not isinstance(a.value, Graph)}
            raise MalformedNodeError(
                f"node {node.label!r} ({node.qualified_op}) has malformed attributes or inputs: its output shapes "
                f"cannot be computed ({type(e).__name__}: {e}); attributes {attrs!r}. Fix the attribute (e.g. an "
                "integer axis) or re-export the model") from e
    domain = "" if node.domain == "ai.onnx" else node.domain
    try:
        schema = onnx.defs.get_schema(node.op_type, opsets.get(domain, 1), domain)
    except onnx.defs.SchemaError:
        return output_shapes(node, ins) if output_shapes is not None else None
    from ._convert import node_to_proto

    if slice_unsafe(node.op_type, node.domain, ins[0][1] if ins else None):
        return None  # onnx's C++ does not survive it (`_inference_guard`): the shape stays unknown
    types = {n: _type_proto(graph.values[n]) for n in node.inputs if n and n in graph.values and graph.values[n].dtype}
    data = {n: numpy_helper.from_array(consts[n], n) for n in node.inputs if n in consts}
    if node.op_type == "Slice" and len(node.inputs) > 4 and node.inputs[4] in data:
        data[node.inputs[4]] = numpy_helper.from_array(bounded_steps(consts[node.inputs[4]]), node.inputs[4])
    try:
        out = onnx.shape_inference.infer_node_outputs(
            schema, node_to_proto(node), types, data,
            opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()])
    except onnx.shape_inference.InferenceError as e:
        if _fully_known(node, graph):  # not a shape it cannot know: the node is impossible on these shapes
            graph.shape_refusals[node.name] = (f"{_inputs_text(node, graph, consts)}: onnx shape inference "
                                               f"refuses it: {_inference_text(e)}")
        return None
    except (onnx.checker.ValidationError, RuntimeError, KeyError, ValueError):
        return None
    result = []
    for name in node.outputs:
        tp = out.get(name)
        if tp is None or not tp.HasField("tensor_type"):
            result.append((0, None))
            continue
        vi = helper.make_value_info(name, tp)
        result.append(_shape_of(vi))
    return result


def _fully_known(node: Node, graph: Graph) -> bool:
    """Every present input has a dtype and a static shape (so a refusal is about the node, not about the unknown)."""
    present = [n for n in node.inputs if n]
    return bool(present) and all(n in graph.values and graph.values[n].dtype and is_static(graph.values[n].shape)
                                 for n in present)


def _inputs_text(node: Node, graph: Graph, consts: dict[str, np.ndarray]) -> str:
    parts = []
    for n in node.inputs:
        if not n:
            continue
        v = graph.values[n]
        text = f"{n!r} {list(v.shape or ())}"
        if n in consts and consts[n].size <= 8:
            text += f" = {consts[n].tolist()}"
        parts.append(text)
    return ", ".join(parts)


def _inference_text(e: Exception) -> str:
    """onnx's message without its '[ShapeInferenceError]' prefixes."""
    return " ".join(str(e).replace("[ShapeInferenceError]", "").replace("Inference error(s):", "").split())


def _conflict(declared: Shape | None, inferred: Shape | None) -> bool:
    if declared is None or inferred is None:
        return False
    if len(declared) != len(inferred):
        return True
    return any(isinstance(a, int) and isinstance(b, int) and a != b for a, b in zip(declared, inferred))


def _fmt(shape: Shape | None) -> str:
    return "unknown rank" if shape is None else "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def _python_pass(graph: Graph, opsets: dict[str, int], dims: Mapping[str, int],
                 output_shapes: OutputShapes | None = None) -> None:
    """Values ONNX inference left incomplete, in topological order: contrib handlers, schemas, the
    `output_shapes` callbacks, the file's declared annotation of what is still unknown, constants."""
    known = constant_names(graph)  # not the overridable initializers: their values are the run's
    consts: dict[str, np.ndarray] = {n: t.numpy() for n, t in graph.initializers.items()
                                      if t.nbytes <= SMALL_INITIALIZER and t.dtype in (6, 7, 1, 9, 10, 11) and n in known}
    vectors: dict[str, Vector] = {}  # shape vectors with symbolic elements (`_shape_values`)
    for node in topological_order(graph):
        outs = [graph.values[o] for o in node.outputs if o]
        if node.attributes and is_control_flow(node, opsets):  # its bodies are resolved on the way
            flow = infer_control_flow(node, graph, opsets, dims, consts, _python_pass, output_shapes)
            for name, (dtype, shape) in zip(node.outputs, flow or ()):
                v = graph.values[name] if name else None
                if v is not None and (dtype or shape is not None):
                    v.dtype = dtype or v.dtype
                    if shape is not None and (v.shape is None or not _better(v.shape, shape)):
                        v.shape = shape
        ins_static = all(is_static(graph.values[n].shape) for n in node.inputs if n and n in graph.values)
        if any(not _complete(v.shape) or not v.dtype or (ins_static and not is_static(v.shape))
               or _has_anonymous(v.shape) for v in outs):
            result = _infer_node(node, graph, opsets, consts, output_shapes)
            for name, (dtype, shape) in zip(node.outputs, result or ()):
                if not name:
                    continue
                v = graph.values[name]
                if dtype and not v.dtype:
                    v.dtype = dtype
                if shape is not None and (v.shape is None or _better(shape, v.shape)):
                    v.shape = shape
            if outs and (not _complete(outs[0].shape) or _has_anonymous(outs[0].shape)):  # a shape input ONNX found no value for
                shaped = shape_from_vector(node, graph, vectors)
                if shaped is not None and (outs[0].shape is None or _more_known(shaped, outs[0].shape)):
                    outs[0].shape = shaped
            for v in outs:  # what no inference knows: the file's annotation, now, so later nodes resolve
                _apply_declared(graph, v, dims)
        if node.op_type == "Shape" and node.domain in ("", "ai.onnx"):
            val = shape_value(node, graph.values[node.inputs[0]].shape)
        else:
            val = evaluate(node, [consts.get(n) for n in node.inputs])
        if val is not None and node.outputs and node.outputs[0]:
            consts[node.outputs[0]] = val
            v = graph.values[node.outputs[0]]
            if not _complete(v.shape) or len(v.shape) != val.ndim:
                v.shape = tuple(val.shape)
        elif (vec := vector_of(node, graph, consts, vectors)) is not None:
            vectors[node.outputs[0]] = vec
    for v in graph.values.values():  # last resort: the file's annotation, with overrides applied
        _apply_declared(graph, v, dims)


def _better(new: Shape, old: Shape) -> bool:
    if len(new) != len(old):
        return True
    return sum(isinstance(d, int) for d in new) > sum(isinstance(d, int) for d in old)


def _more_known(new: Shape, old: Shape) -> bool:
    """`new` of the same rank as `old` knows more dims: more static ones, or as many and more named symbols (a
    graph input's dims) where `old` has unknown or ONNX-made ones."""
    if len(new) != len(old):
        return False
    def known(shape: Shape) -> tuple[int, int]:
        return (sum(isinstance(d, int) for d in shape),
                sum(isinstance(d, str) and not _has_anonymous((d,)) for d in shape))
    return known(new) > known(old)


def _apply(graph: Graph, table: dict[str, tuple[int, Shape | None]]) -> None:
    for name, (dtype, shape) in table.items():
        v = graph.values.get(name)
        if v is None or name in graph.initializers:
            continue
        if dtype:
            v.dtype = dtype
        if shape is not None:
            v.shape = shape


def _one_element_either_way(declared: Shape | None, inferred: Shape | None) -> bool:
    """A scalar declared where inference gives [1] (or the reverse): the genai builder writes such annotations
    on its constant nodes; the element is the same."""
    shapes = {tuple(declared or ()), tuple(inferred or ())}
    return declared is not None and inferred is not None and shapes == {(), (1,)}


def resolve_shapes(model: Model, dims: Mapping[str, int] | None = None,
                   max_shapes: Mapping[str, Sequence[int]] | str | None = None,
                   output_shapes: OutputShapes | None = None) -> ShapeReport:
    """Infer every value's dtype and shape in place, with free-dimension overrides and max-shape bounds.
    `output_shapes(node, input_types)` answers for ops without an ONNX schema or contrib handler
    (custom domains): one (dtype, shape) per output, or None when it does not know the op."""
    dims = dict(dims or {})
    if isinstance(max_shapes, str):
        max_shapes = parse_max_shape_override(max_shapes)
    max_shapes = dict(max_shapes or {})
    graph = model.graph
    inputs, dims = input_shapes(graph, dims, max_shapes)
    graph_inputs = set(graph.inputs)
    graph.shape_refusals.clear()
    for v in graph.values.values():  # forget previous resolution; inputs restart from their declaration
        if v.name not in graph.initializers and v.name not in graph_inputs:
            v.shape, v.dtype = None, 0
    for name, shape in inputs.items():
        graph.values[name].shape = shape
    table: dict[int, dict] = {}
    try:  # bounded: ONNX's data propagation would materialise a long 1-D value (see _data_prop)
        _read_back(inferred_table(_shape_only_proto(model, inputs)), graph, table)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, RuntimeError, ValueError,
            MemoryError):  # MemoryError: the isolated child's address-space limit (`_inference_guard`)
        pass  # the per-node pass below does the work
    _apply(graph, table.get(id(graph), {}))
    for node in graph.walk():
        for sub in node.subgraphs:
            _apply(sub, table.get(id(sub), {}))
    _python_pass(graph, model.opset_imports, dims, output_shapes)
    found: list[str] = []
    for name, declared in graph.declared_value_info.items():
        v = graph.values.get(name)
        if v is None:
            continue
        shape = _substitute(declared.shape, dims)
        if _conflict(shape, v.shape):
            if _one_element_either_way(shape, v.shape):  # onnxruntime accepts [] for [1] silently: a debug note
                _log.debug("value %r: the file declares shape %s, inference gives %s (one element either way); "
                           "using the inferred shape", name, _fmt(declared.shape), _fmt(v.shape))
                continue
            found.append(f"value {name!r}: the file declares shape {_fmt(declared.shape)} but inference gives "
                         f"{_fmt(v.shape)}; using the inferred shape")
    for msg in found:
        warnings.warn(msg, ShapeAnnotationWarning, stacklevel=2)
    origin = first_unresolved_node(graph)
    if origin is not None:
        msg = f"planning degrades to tracing at run time (pre-allocation is refused): {unresolved_hint(origin)}"
        warnings.warn(msg, ShapeResolutionWarning, stacklevel=2)
        found.append(msg)
    graph.shape_warnings = found
    check_input_types(model)  # element types as the op schemas allow them, now that every known one is
    values = [v for v in graph.values.values() if v.name not in graph.initializers]
    return ShapeReport(
        static=sum(is_static(v.shape) for v in values),
        symbolic=sum(v.shape is not None and not is_static(v.shape) for v in values),
        unknown=sum(v.shape is None for v in values),
        warnings=tuple(found),
        unresolved=tuple(v.name for v in values if v.shape is None),
        unresolved_node=origin.name if origin is not None else None,
    )
