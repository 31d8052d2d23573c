"""RepeatKVFusion, a CPU execution provider pass: grouped-query attention's materialized KV repeat
(`repeat_kv`: Unsqueeze(KV, 2) [b, kvh, 1, t, d] -> Expand [b, kvh, g, t, d] -> Reshape [b, kvh*g, t, d])
read by MatMul / FusedMatMul(X [b, kvh*g, s, n], .) is replaced by folding the group into X's rows:
Reshape(X -> [b, kvh, g*s, n]) @ KV -> Reshape back to [b, kvh*g, s, .]. The same products, without the
g-times-the-cache expanded block (the Reshapes are in-place views in the memory plan).

Matched strictly: the Unsqueeze inserts axis 2 of a rank-4 KV; the Expand's target shape (a constant, or
computed from constants only) repeats along that axis only; the Reshape's target (likewise) merges exactly
(kvh, g); the Unsqueeze, Expand and Reshape outputs are read by nothing else; the matmul reads the repeat as
its B operand without transA/transBatch; float32/16/64; the shapes involved resolved and static.
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np
from onnx import AttributeProto

from ._constprop import evaluate
from ._fusions import FusionRecord, _only_consumer
from ._ir import Attr, Graph, Node, is_static
from ._tensor import Tensor

__all__ = ["fuse_repeat_kv"]

_DTYPES = frozenset({1, 10, 11})  # float32, float16, float64
_MAX_DEPTH = 8


def _constant(graph: Graph, name: str, depth: int = 0) -> np.ndarray | None:
    """The value of `name` when it is an initializer or computed from initializers only; None otherwise (a
    Shape of an activation is never a constant here: a run's shapes may differ from the resolved ones)."""
    if not name or name in graph.inputs:  # a graph input or an overridable initializer: fed, not a constant
        return None
    t = graph.initializers.get(name)
    if t is not None:
        return np.asarray(t.numpy())
    v = graph.values.get(name)
    p = v.producer if v is not None else None
    if p is None or depth >= _MAX_DEPTH or len(p.outputs) != 1:
        return None
    inputs = [_constant(graph, i, depth + 1) if i else None for i in p.inputs]
    if any(x is None for x, i in zip(inputs, p.inputs) if i):
        return None
    return evaluate(p, inputs)


def _ints(graph: Graph, name: str) -> list[int] | None:
    value = _constant(graph, name)
    if value is None or value.dtype.kind not in "iu" or value.ndim > 1:
        return None
    return [int(x) for x in value.reshape(-1)]


def _same(dim: object, want: object) -> bool:
    return isinstance(dim, int) and dim == want


def _repeat(graph: Graph, name: str, allowed: set[int] | None) -> tuple[list[Node], str, int] | None:
    """(Unsqueeze, Expand, Reshape), the repeated KV value and the group size g, when `name` is a strict
    repeat_kv of a rank-4 KV; None otherwise."""
    nodes: list[Node] = []
    current = name
    for op in ("Reshape", "Expand", "Unsqueeze"):
        v = graph.values.get(current)
        p = v.producer if v is not None else None
        if (p is None or p.op_type != op or p.domain not in ("", "ai.onnx") or len(p.outputs) != 1
                or (allowed is not None and id(p) not in allowed)
                or (nodes and _only_consumer(graph, current) is not nodes[-1])):
            return None
        nodes.append(p)
        current = p.inputs[0]
    reshape, expand, unsqueeze = nodes
    kv = graph.values.get(unsqueeze.inputs[0])
    if kv is None or kv.shape is None or len(kv.shape) != 4:
        return None
    axes = unsqueeze.attr("axes") if len(unsqueeze.inputs) < 2 else _ints(graph, unsqueeze.inputs[1])
    if axes is None or [a % 5 for a in axes] != [2]:
        return None
    b, kvh, t, d = kv.shape
    target = _ints(graph, expand.inputs[1]) if len(expand.inputs) > 1 else None
    if target is None or len(target) != 5 or target[2] < 1:
        return None
    g = target[2]
    # every other axis keeps KV's extent: 1 (broadcast keeps it) or exactly KV's static extent
    if not all(s == 1 or _same(dim, s) for s, dim in zip(target[:2] + target[3:], (b, kvh, t, d))):
        return None
    if not isinstance(kvh, int) or not isinstance(d, int):
        return None
    merge = _ints(graph, reshape.inputs[1]) if len(reshape.inputs) > 1 else None
    if merge is None or len(merge) != 4 or merge[1] != kvh * g or merge.count(-1) > 1 \
            or (reshape.attr("allowzero", 0) and 0 in merge):  # allowzero: a 0 is an empty axis, not a copy
        return None
    # each entry gives [b, kvh*g, t, d]: 0 copies the expanded axis at the same index (b at 0; kvh at 1 only when
    # g == 1), a positive entry is the static extent, -1 (at most one) is inferred from the others
    wants = (b, kvh * g, t, d)
    for i, r in enumerate(merge):
        if not (r == -1 or (r == 0 and (i == 0 or (i == 1 and g == 1))) or (r > 0 and _same(wants[i], r))):
            return None
    return [unsqueeze, expand, reshape], unsqueeze.inputs[0], g


def _fresh_value(graph: Graph, base: str) -> str:
    name, token = base, 0
    while name in graph.values or name in graph.initializers:
        name, token = f"{base}_{token}", token + 1
    return name


def _shape_constant(graph: Graph, dims: list[int]) -> str:
    """An int64 initializer holding `dims`, shared by every fusion that needs the same one."""
    name = "RepeatKVFusion/shape_" + "_".join(str(d).replace("-", "m") for d in dims)
    t = graph.initializers.get(name)
    if t is not None and list(np.asarray(t.numpy()).reshape(-1)) == dims and t.dtype == 7:
        return name
    name = _fresh_value(graph, name)
    graph.initializers[name] = Tensor.from_numpy(name, np.array(dims, np.int64))
    graph.value(name).dtype, graph.value(name).shape = 7, (len(dims),)
    return name


def _prune_dead(graph: Graph, names: list[str], allowed: set[int] | None) -> list[Node]:
    """Remove the producers of `names` left unread (their outputs read by nothing, not graph outputs), and
    theirs in turn, among the allowed nodes: the constant subgraphs that computed the repeat's shapes."""
    removed: list[Node] = []
    pending = list(names)
    while pending:
        v = graph.values.get(pending.pop())
        p = v.producer if v is not None else None
        if p is None or (allowed is not None and id(p) not in allowed):
            continue
        if any(o in graph.outputs or (o in graph.values and graph.values[o].consumers) for o in p.outputs if o):
            continue
        graph.detach_node(p)
        removed.append(p)
        pending += [i for i in p.inputs if i]
    return removed


def fuse_repeat_kv(graph: Graph, nodes: Collection[Node] | None = None) -> list[FusionRecord]:
    """MatMul / FusedMatMul(X [b, kvh*g, s, n], repeat_kv(KV [b, kvh, t, d])) ->
    Reshape(X -> [b, kvh, g*s, n]) @ KV -> Reshape to [b, kvh*g, s, .], named `<matmul name>/RepeatKVFusion`
    (the Reshapes `.../RepeatKVFusion/Reshape` and `.../RepeatKVFusion/Reshape_1`) and placed where the
    matmul was. Only nodes in `nodes` (all when None) take part."""
    allowed = None if nodes is None else {id(n) for n in nodes}
    records: list[FusionRecord] = []
    placed: dict[int, list[Node]] = {}  # the matmul's id -> the nodes replacing it (one pass over the list at the end)
    for mm in [n for n in graph.nodes if (n.op_type, n.domain) in (("MatMul", ""), ("MatMul", "ai.onnx"),
                                                                    ("FusedMatMul", "com.microsoft"))]:
        if id(mm) in graph._detached:  # pruned with an earlier match's shape subgraph
            continue
        if len(mm.inputs) != 2 or len(mm.outputs) != 1 or (allowed is not None and id(mm) not in allowed):
            continue
        if mm.op_type == "FusedMatMul" and any(mm.attr(a, 0) for a in ("transA", "transBatchA", "transBatchB")):
            continue
        x, y = graph.values.get(mm.inputs[0]), graph.values.get(mm.outputs[0])
        if x is None or y is None or y.dtype not in _DTYPES or x.dtype != y.dtype:
            continue
        if _only_consumer(graph, mm.inputs[1]) is not mm or mm.inputs[0] == mm.inputs[1]:
            continue
        found = _repeat(graph, mm.inputs[1], allowed)
        if found is None:
            continue
        repeat, kv, g = found
        kvh = graph.values[kv].shape[1]
        if not is_static(x.shape) or len(x.shape) != 4 or x.shape[1] != kvh * g or not is_static(y.shape) \
                or len(y.shape) != 4 or y.shape[1] != kvh * g or graph.values[kv].dtype != y.dtype \
                or 0 in x.shape or 0 in y.shape:  # empty: a -1 extent beside a 0 cannot be inferred
            continue
        for old in repeat:
            graph.detach_node(old)
        shape_inputs = [n.inputs[1] for n in repeat[1:]] + ([repeat[0].inputs[1]] if len(repeat[0].inputs) > 1 else [])
        pruned = _prune_dead(graph, shape_inputs, allowed)
        graph.detach_node(mm)
        base = mm.name + "/RepeatKVFusion"
        b_x, _, s, n = x.shape
        rows = _fresh_value(graph, base + "/rows")
        out_rows = _fresh_value(graph, base + "/out_rows")
        graph.value(rows).dtype, graph.value(rows).shape = x.dtype, (b_x, kvh, g * s, n)
        graph.value(out_rows).dtype = y.dtype
        graph.value(out_rows).shape = (y.shape[0], kvh, g * y.shape[2], y.shape[3])
        meta = dict(mm.metadata)
        fold = graph.add_node("Reshape", [mm.inputs[0], _shape_constant(graph, [0, kvh, -1, 0])],
                              [rows], name=base + "/Reshape", metadata=meta)
        attributes = {k: v for k, v in mm.attributes.items()}
        if mm.op_type == "FusedMatMul":
            attributes.setdefault("alpha", Attr("alpha", AttributeProto.FLOAT, 1.0))
        fused = graph.add_node(mm.op_type, [rows, kv], [out_rows], name=base, domain=mm.domain,
                               attributes=attributes, metadata=meta)
        unfold = graph.add_node("Reshape", [out_rows, _shape_constant(graph, [0, kvh * g, -1, 0])],
                                list(mm.outputs), name=base + "/Reshape_1", metadata=meta)
        placed[id(mm)] = [fold, fused, unfold]  # where the matmul was: after X's and KV's producers
        records.append(FusionRecord("RepeatKVFusion", tuple(n.name for n in (*pruned, *repeat, mm)),
                                    (fold.name, fused.name, unfold.name)))
    if records:
        graph.compact(placed)
    return records
