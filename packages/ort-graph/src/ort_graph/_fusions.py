"""Level-1 fusions. A fused node is named after the node it replaces (`<name>/MatMulAddFusion`), so
name-based layer rules keep matching; its `layer_ann` annotation is copied from that node too.

Run after shape resolution: fusions check shapes and constants before rewriting.
"""

from __future__ import annotations

import attrs
import numpy as np
from onnx import AttributeProto

from ._ir import Attr, Graph, Model, Node, is_static
from ._overridable import constant_initializer, is_overridable
from ._rewrite import Rewriter
from ._tensor import Tensor


@attrs.frozen
class FusionRecord:
    fusion: str
    replaced: tuple[str, ...]  # names of the removed nodes
    created: tuple[str, ...]  # names of the new nodes


def _only_consumer(graph: Graph, value: str) -> Node | None:
    v = graph.values.get(value)
    if v is None or len(v.consumers) != 1 or value in graph.outputs:  # outputs: a list, scanned last
        return None
    return v.consumers[0]


def _producer(graph: Graph, value: str, op_type: str) -> Node | None:
    v = graph.values.get(value)
    p = v.producer if v is not None else None
    return p if p is not None and p.op_type == op_type and p.domain in ("", "ai.onnx") else None


def _scalar(graph: Graph, name: str) -> float | None:
    """The one value of a constant (a Constant node's, or an initializer no feed can replace), else None."""
    if is_overridable(graph, name):
        return None
    t = graph.initializers.get(name)
    if t is None and name in graph.values and graph.values[name].producer is not None:
        p = graph.values[name].producer
        if p.op_type == "Constant" and p.attr("value") is not None:
            from onnx import numpy_helper

            arr = numpy_helper.to_array(p.attr("value"))
            return float(arr.reshape(-1)[0]) if arr.size == 1 else None
        return None
    if t is None or int(np.prod(t.dims)) != 1:
        return None
    return float(np.asarray(t.numpy()).reshape(-1)[0])


def _last_axis_mean(graph: Graph, node: Node, rank: int) -> bool:
    if node.op_type != "ReduceMean" or not node.attr("keepdims", 1):
        return False
    axes = node.attr("axes")
    if axes is None and len(node.inputs) > 1 and constant_initializer(graph, node.inputs[1]) is not None:
        axes = graph.initializers[node.inputs[1]].numpy().reshape(-1).tolist()
    return axes is not None and len(axes) == 1 and axes[0] % rank == rank - 1


def _replace(rw: Rewriter, old: list[Node], op_type: str, inputs: list[str], outputs: list[str], suffix: str,
             attributes: dict[str, Attr] | None = None, domain: str = "") -> Node:
    first = old[0]
    meta = {k: v for k, v in first.metadata.items()}
    new, = rw.replace(old, lambda position: [rw.graph.add_node(
        op_type, inputs, outputs, name=first.name + suffix, domain=domain, attributes=attributes, metadata=meta,
        position=position)])
    return new


def fuse_matmul_add(graph: Graph, exact_shapes: bool = True) -> list[FusionRecord]:
    """MatMul(A, W[K,N]) + Add(bias[N]) -> Gemm (rank-2 A) or Reshape/Gemm/Reshape (static rank>2 A: its
    leading dims are written into the second Reshape, so only where shapes are exact, not max-shape bounds)."""
    records: list[FusionRecord] = []
    rw = Rewriter(graph)
    for mm in [n for n in graph.nodes if n.op_type == "MatMul" and n.domain in ("", "ai.onnx")]:
        a, w = mm.inputs
        wt = graph.initializers.get(w)
        add = _only_consumer(graph, mm.outputs[0])
        if wt is None or len(wt.dims) != 2 or add is None or add.op_type != "Add":
            continue
        bias = add.inputs[1] if add.inputs[0] == mm.outputs[0] else add.inputs[0]
        bt = graph.initializers.get(bias)
        shape = graph.values[a].shape
        if bt is None or tuple(bt.dims) not in ((wt.dims[1],), (1, wt.dims[1])) or not is_static(shape) or len(shape) < 2:
            continue
        out = add.outputs[0]
        if len(shape) > 2 and not exact_shapes:
            continue
        if len(shape) == 2:
            g = _replace(rw, [mm, add], "Gemm", [a, w, bias], [out], "/MatMulAddFusion")
            records.append(FusionRecord("MatMulAddFusion", (mm.name, add.name), (g.name,)))
            continue
        k, n = wt.dims
        base = mm.name + "/MatMulAddFusion"
        shape_in, shape_out = graph.generate_node_name(base + "/shape_in"), graph.generate_node_name(base + "/shape_out")
        graph.initializers[shape_in] = Tensor.from_numpy(shape_in, np.array([-1, k], np.int64))
        graph.initializers[shape_out] = Tensor.from_numpy(shape_out, np.array([*shape[:-1], n], np.int64))
        for name in (shape_in, shape_out):
            graph.value(name).dtype, graph.value(name).shape = 7, tuple(graph.initializers[name].dims)
        flat, gemm_out = f"{base}/flat", f"{base}/gemm_out"
        rows = int(np.prod(shape[:-1]))
        graph.value(flat).dtype, graph.value(flat).shape = graph.values[a].dtype, (rows, k)
        graph.value(gemm_out).dtype, graph.value(gemm_out).shape = graph.values[a].dtype, (rows, n)
        meta = dict(mm.metadata)

        def build(pos: int | None, a: str = a, w: str = w, bias: str = bias, out: str = out, base: str = base,
                  flat: str = flat, gemm_out: str = gemm_out, shapes: tuple[str, str] = (shape_in, shape_out),
                  meta: dict[str, str] = meta) -> list[Node]:
            at = (lambda i: None) if pos is None else (lambda i: pos + i)
            return [graph.add_node("Reshape", [a, shapes[0]], [flat], name=base + "/Reshape", metadata=meta,
                                   position=at(0)),
                    graph.add_node("Gemm", [flat, w, bias], [gemm_out], name=base, metadata=meta, position=at(1)),
                    graph.add_node("Reshape", [gemm_out, shapes[1]], [out], name=base + "/Reshape_1", metadata=meta,
                                   position=at(2))]

        r1, g, r2 = rw.replace([mm, add], build)
        records.append(FusionRecord("MatMulAddFusion", (mm.name, add.name), (r1.name, g.name, r2.name)))
    rw.finish()
    return records


def _norm_tail(graph: Graph, numerator: str, start: Node, rank: int) -> tuple[list[Node], float, str] | None:
    """Pow(numerator,2) -> ReduceMean -> Add(eps) -> Sqrt -> Div(numerator, .) -> Mul(gamma); or the
    Reciprocal/Mul form. Returns (nodes from Pow to Mul(gamma), eps, gamma)."""
    pow_ = next((c for c in graph.values[numerator].consumers if c.op_type == "Pow"), None)
    if pow_ is None or pow_.inputs[0] != numerator or _scalar(graph, pow_.inputs[1]) != 2.0:
        return None
    rm = _only_consumer(graph, pow_.outputs[0])
    if rm is None or not _last_axis_mean(graph, rm, rank):
        return None
    add = _only_consumer(graph, rm.outputs[0])
    if add is None or add.op_type != "Add":
        return None
    eps = _scalar(graph, add.inputs[1] if add.inputs[0] == rm.outputs[0] else add.inputs[0])
    sqrt = _only_consumer(graph, add.outputs[0])
    if eps is None or sqrt is None or sqrt.op_type != "Sqrt":
        return None
    nxt = _only_consumer(graph, sqrt.outputs[0])
    chain = [pow_, rm, add, sqrt]
    if nxt is not None and nxt.op_type == "Div" and nxt.inputs == [numerator, sqrt.outputs[0]]:
        chain.append(nxt)
    elif nxt is not None and nxt.op_type == "Reciprocal":
        mul = _only_consumer(graph, nxt.outputs[0])
        if mul is None or mul.op_type != "Mul" or numerator not in mul.inputs:
            return None
        chain += [nxt, mul]
    else:
        return None
    scale = _only_consumer(graph, chain[-1].outputs[0])
    if scale is None or scale.op_type != "Mul":
        return None
    gamma = scale.inputs[1] if scale.inputs[0] == chain[-1].outputs[0] else scale.inputs[0]
    if gamma not in graph.initializers:
        return None
    return chain + [scale], eps, gamma


def fuse_layer_norm(graph: Graph) -> list[FusionRecord]:
    """Decomposed LayerNormalization (mean, Sub, Pow, mean, Add eps, Sqrt, Div, Mul gamma, Add beta)."""
    records: list[FusionRecord] = []
    rw = Rewriter(graph)
    for rm in [n for n in graph.nodes if n.op_type == "ReduceMean"]:
        if rm.graph is not graph or rw.removed(rm):
            continue
        x = rm.inputs[0]
        shape = graph.values[x].shape
        if shape is None or not _last_axis_mean(graph, rm, len(shape)):
            continue
        sub = next((c for c in graph.values[rm.outputs[0]].consumers if c.op_type == "Sub" and c.inputs == [x, rm.outputs[0]]), None)
        if sub is None or len(graph.values[rm.outputs[0]].consumers) != 1:
            continue
        tail = _norm_tail(graph, sub.outputs[0], sub, len(shape))
        if tail is None or len(graph.values[sub.outputs[0]].consumers) != 2:
            continue
        nodes, eps, gamma = tail
        beta_add = _only_consumer(graph, nodes[-1].outputs[0])
        beta = None
        if beta_add is not None and beta_add.op_type == "Add":
            cand = beta_add.inputs[1] if beta_add.inputs[0] == nodes[-1].outputs[0] else beta_add.inputs[0]
            beta = cand if cand in graph.initializers else None
        old = [rm, sub, *nodes] + ([beta_add] if beta else [])
        out = old[-1].outputs[0]
        attrs_ = {"axis": Attr("axis", AttributeProto.INT, -1), "epsilon": Attr("epsilon", AttributeProto.FLOAT, eps)}
        new = _replace(rw, old, "LayerNormalization", [x, gamma] + ([beta] if beta else []), [out],
                       "/LayerNormFusion/", attrs_)
        records.append(FusionRecord("LayerNormFusion", tuple(n.name for n in old), (new.name,)))
    rw.finish()
    return records


def fuse_simplified_layer_norm(graph: Graph) -> list[FusionRecord]:
    """Decomposed RMSNorm (Pow, mean, Add eps, Sqrt, Div or Reciprocal+Mul, Mul gamma) ->
    SimplifiedLayerNormalization (the onnx-domain contrib op that ONNX Runtime and this project run)."""
    records: list[FusionRecord] = []
    rw = Rewriter(graph)
    for pow_ in [n for n in graph.nodes if n.op_type == "Pow"]:
        if rw.removed(pow_):
            continue
        x = pow_.inputs[0]
        shape = graph.values[x].shape
        if shape is None or graph.values[x].dtype not in (1, 10, 11, 16):
            continue
        tail = _norm_tail(graph, x, pow_, len(shape))
        if tail is None:
            continue
        nodes, eps, gamma = tail
        attrs_ = {"axis": Attr("axis", AttributeProto.INT, -1), "epsilon": Attr("epsilon", AttributeProto.FLOAT, eps),
                  "stash_type": Attr("stash_type", AttributeProto.INT, 1)}
        new = _replace(rw, nodes, "SimplifiedLayerNormalization", [x, gamma], [nodes[-1].outputs[0]],
                       "/SimplifiedLayerNormFusion/", attrs_)
        records.append(FusionRecord("SimplifiedLayerNormFusion", tuple(n.name for n in nodes), (new.name,)))
    rw.finish()
    return records


FUSIONS = {
    "MatMulAddFusion": fuse_matmul_add,
    "LayerNormFusion": fuse_layer_norm,
    "SimplifiedLayerNormFusion": fuse_simplified_layer_norm,
}


def apply_l1_fusions(model: Model, enabled: list[str] | None = None, *, exact_shapes: bool = True) -> list[FusionRecord]:
    """Run the L1 fusions (all by default) on the main graph; returns what each one rewrote.
    `exact_shapes=False` (shapes resolved from max shapes, upper bounds): no rewrite writes a size into the graph."""
    unknown = set(enabled or ()) - set(FUSIONS)
    if unknown:
        raise ValueError(f"unknown fusion(s) {sorted(unknown)!r}; available: {sorted(FUSIONS)!r}")
    records: list[FusionRecord] = []
    for name, fn in FUSIONS.items():
        if enabled is None or name in enabled:
            records += fn(model.graph, exact_shapes=False) if fn is fuse_matmul_add and not exact_shapes else fn(model.graph)
    if records:
        remove_unused_initializers(model.graph)
    return records


def remove_unused_initializers(graph: Graph) -> list[str]:
    """Drop initializers no node (or subgraph) reads and that are not graph outputs."""
    used = {name for n in graph.nodes for name in list(n.inputs) + n.implicit_inputs()} | set(graph.outputs)
    dropped = [name for name in graph.initializers if name not in used]
    for name in dropped:
        del graph.initializers[name]
        graph.values.pop(name, None)
    if dropped and any(name in graph.inputs for name in dropped):  # an unused initializer also listed as an
        gone = set(dropped)                                          # input leaves the inputs too, as onnxruntime
        graph.inputs[:] = [name for name in graph.inputs if name not in gone]
    return dropped
