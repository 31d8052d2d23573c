"""ONNX shape inference with data propagation, bounded in memory.

ONNX's data propagation (`infer_shapes(data_prop=True)`) gives shape computations their values (Shape -> Gather
-> Concat -> Reshape), but its Cast propagator builds one entry per element of a 1-D input whatever its length:
`Cast(Range(0, 2**40, 1))`, or a `[past_sequence]` input overridden to 2**31, makes it allocate until the process
dies (std::bad_alloc at best, the OOM killer at worst). So inference runs first without data propagation
(shapes only, no values: always bounded); then every Cast whose input is not known to be a short 1-D value (at
most `SHAPE_DATA_LIMIT` elements) or of another rank is inferred as a CastLike (same output type and shape,
no value propagated) in the data-propagating pass. Shape data is short by nature (a tensor's rank), so the
values shape resolution needs still propagate.
"""

from __future__ import annotations

from collections.abc import Iterator

import onnx
from onnx import GraphProto, ModelProto, helper

SHAPE_DATA_LIMIT = 4096  # elements: a 1-D value longer than this is data, not a shape
_TARGET = "__ort_graph_castlike_target_{}"


def _graphs(g: GraphProto) -> Iterator[GraphProto]:
    yield g
    for node in g.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for sub in a.graphs:
                    yield from _graphs(sub)


def _short_or_not_1d(plain: ModelProto) -> set[str]:
    """Values the shapes-only pass proved safe for Cast's propagator: rank other than 1, or 1-D and short."""
    safe: set[str] = set()
    for g in _graphs(plain.graph):
        for vi in list(g.input) + list(g.value_info) + list(g.output):
            t = vi.type.tensor_type
            if not t.HasField("shape"):
                continue
            dims = t.shape.dim
            if len(dims) != 1 or (dims[0].HasField("dim_value") and dims[0].dim_value <= SHAPE_DATA_LIMIT):
                safe.add(vi.name)
    for g in _graphs(plain.graph):
        safe.update(t.name for t in g.initializer if len(t.dims) != 1 or t.dims[0] <= SHAPE_DATA_LIMIT)
    return safe


def _casts_as_castlike(proto: ModelProto, safe: set[str]) -> int:
    """Rewrite (in place) the Casts whose input may be a long 1-D value; returns how many."""
    targets: set[int] = set()
    count = 0
    for g in _graphs(proto.graph):
        for node in g.node:
            if node.op_type != "Cast" or node.domain not in ("", "ai.onnx") or not node.input or node.input[0] in safe:
                continue
            to = next((a.i for a in node.attribute if a.name == "to"), None)
            if to is None:
                continue
            node.op_type = "CastLike"
            del node.attribute[:]
            node.input.append(_TARGET.format(to))
            targets.add(to)
            count += 1
    for to in sorted(targets):  # main-graph inputs: visible to every subgraph, no body signature changes
        proto.graph.input.append(helper.make_tensor_value_info(_TARGET.format(to), to, []))
    return count


def infer_shapes_bounded(proto: ModelProto) -> ModelProto:
    """`proto` (a private copy, rewritten in place) with inferred shapes, data propagated where bounded.
    Errors of the shapes-only pass propagate (onnx's InferenceError, RuntimeError, ValueError)."""
    plain = onnx.shape_inference.infer_shapes(proto, check_type=False, strict_mode=False, data_prop=False)
    _casts_as_castlike(proto, _short_or_not_1d(plain))
    try:
        return onnx.shape_inference.infer_shapes(proto, check_type=False, strict_mode=False, data_prop=True)
    except (onnx.shape_inference.InferenceError, RuntimeError, ValueError, MemoryError):
        return plain  # what the shapes-only pass knows; the per-node pass does the rest


__all__ = ["SHAPE_DATA_LIMIT", "infer_shapes_bounded"]
