"""ONNX shape inference with data propagation, bounded in memory.

ONNX's data propagation (`infer_shapes(data_prop=True)`) gives shape computations their values (Shape -> Gather
-> Concat -> Reshape), but its propagators (Cast, Add, Mul, ... ) build one entry per element of a 1-D value
whatever its length: `Cast(Range(0, 2**40, 1))`, or `Add(x, x)` with an input `[past_sequence]` overridden to
2**31, make it allocate until the process dies (std::bad_alloc at best, the OOM killer at worst). So inference
runs first without data propagation (shapes only: always bounded), and the data-propagating pass runs only when
every 1-D value is known to be short (at most `SHAPE_DATA_LIMIT` elements) or symbolic; a 1-D value that is
long, or whose length is unknown (a Range, a ConstantOfShape: data propagation could make it long), keeps the
shapes-only result. Shape resolution's own pass (`_constprop`, bounded) then computes the shape values.
"""

from __future__ import annotations

import onnx
from onnx import GraphProto, ModelProto

from ._convert import _shape_of
from ._inference_guard import _graphs, isolated

SHAPE_DATA_LIMIT = 4096  # elements: a 1-D value longer than this is data, not a shape


def long_vectors(plain: ModelProto) -> list[str]:
    """The 1-D values of a shapes-only inference result whose length is above SHAPE_DATA_LIMIT or unknown (ONNX
    names an unknown dimension `unk__N`: only the symbolic names of the graph's inputs are symbolic): data
    propagation over them is unbounded."""
    symbolic = {d.dim_param for vi in plain.graph.input for d in vi.type.tensor_type.shape.dim if d.dim_param}
    found: list[str] = []
    for g in _graphs(plain.graph):
        for vi in list(g.input) + list(g.value_info) + list(g.output):
            t = vi.type.tensor_type
            if not t.HasField("shape") or len(t.shape.dim) != 1:
                continue
            d = t.shape.dim[0]
            if (d.dim_value > SHAPE_DATA_LIMIT) if d.HasField("dim_value") else d.dim_param not in symbolic:
                found.append(vi.name)
    return list(dict.fromkeys(found))


# per graph: its values' (name, element type, shape), then per node holding subgraphs (node index, [per subgraph:
# the same, recursively]); plain tuples, lists, ints and strs (what `isolated` passes back)
InferredTable = tuple[list[tuple[str, int, "tuple | None"]], list[tuple[int, list]]]


def inferred_table(proto: ModelProto) -> InferredTable:
    """What `infer_shapes_bounded` infers, as an `InferredTable`, computed in an isolated child
    (`_inference_guard.isolated`): InferenceCrashed (a RuntimeError) when onnx's C++ died on the model."""
    return isolated(_bounded_table, proto)


def _bounded_table(proto: ModelProto) -> InferredTable:
    return _table(infer_shapes_bounded(proto).graph)


def _table(gp: GraphProto) -> InferredTable:
    values = []
    for vi in list(gp.value_info) + list(gp.output):
        dtype, shape = _shape_of(vi)
        if dtype or shape is not None:
            values.append((vi.name, dtype, shape))
    subs = []
    for i, node in enumerate(gp.node):
        graphs = [a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH] + \
                 [g for a in node.attribute if a.type == onnx.AttributeProto.GRAPHS for g in a.graphs]
        if graphs:
            subs.append((i, [_table(g) for g in graphs]))
    return values, subs


def infer_shapes_bounded(proto: ModelProto) -> ModelProto:
    """`proto` with inferred shapes, values propagated where that is bounded (see the module's docstring), in this
    process. Errors of the shapes-only pass propagate (onnx's InferenceError / ValidationError, RuntimeError,
    ValueError, MemoryError)."""
    plain = _infer(proto, data_prop=False)
    if long_vectors(plain):
        return plain
    del plain  # a copy of the whole model: not kept alive under the second pass (peak memory)
    try:
        return _infer(proto, data_prop=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError, RuntimeError, ValueError,
            MemoryError):
        return _infer(proto, data_prop=False)  # what the shapes-only pass knows; the per-node pass does the rest


def _infer(proto: ModelProto, data_prop: bool) -> ModelProto:
    return onnx.shape_inference.infer_shapes(proto, check_type=False, strict_mode=False, data_prop=data_prop)


__all__ = ["SHAPE_DATA_LIMIT", "InferredTable", "infer_shapes_bounded", "inferred_table", "long_vectors"]
