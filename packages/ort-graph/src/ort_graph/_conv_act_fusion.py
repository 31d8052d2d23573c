"""A Conv and the activation after it fused into com.microsoft FusedConv(activation, activation_params) (ONNX
Runtime's ConvActivationFusion), as an execution provider's pass on the nodes it claimed: the kernel applies the
activation to each output block while it is in cache, and the plan loses the Conv's output block.

Activations: Relu, Sigmoid, Tanh, LeakyRelu (alpha), HardSigmoid (alpha, beta), Clip (constant bounds) and
HardSwish, the last also as exporters write it out: Div(Mul(x, Clip(Add(x, 3), 0, 6)), 6) and
Mul(x, HardSigmoid(x, alpha=1/6, beta=0.5)). The fused node is named `<conv name>/ConvActivationFusion`.

A residual block's Conv + Add (or a two-input Sum) of a tensor of the Conv output's shape + activation becomes
FusedConv(X, W, B, Z) (ONNX Runtime's ConvAddActivationFusion): the kernel adds Z after the bias, then applies the
activation, and the plan loses both intermediate blocks. Named `<conv name>/ConvAddActivationFusion`."""

from __future__ import annotations

from collections.abc import Callable, Collection

from onnx import AttributeProto

from ._fusions import FusionRecord, _only_consumer, _replace, _scalar
from ._ir import Attr, Graph, Node, is_static
from ._rewrite import Rewriter

__all__ = ["CONV_ACTIVATIONS", "fuse_conv_activation", "fuse_conv_add_activation"]

CONV_ACTIVATIONS = frozenset({"Relu", "Sigmoid", "Tanh", "LeakyRelu", "HardSigmoid", "Clip", "HardSwish"})
_FLOAT = 1
_FLT_MAX = 3.4028234663852886e38


def _onnx(node: Node | None, op: str) -> bool:
    return node is not None and node.op_type == op and node.domain in ("", "ai.onnx")


def _clip_bounds(graph: Graph, clip: Node) -> tuple[float, float] | None:
    """Clip's constant (min, max): inputs 1 and 2 (opset 11+) or attributes; an absent bound is float32's limit."""
    if len(clip.inputs) > 1:
        bounds = []
        for i, default in ((1, -_FLT_MAX), (2, _FLT_MAX)):
            name = clip.inputs[i] if i < len(clip.inputs) else ""
            value = _scalar(graph, name) if name else default
            if value is None:
                return None
            bounds.append(value)
        return bounds[0], bounds[1]
    return float(clip.attr("min", -_FLT_MAX)), float(clip.attr("max", _FLT_MAX))


def _other(node: Node, value: str) -> str | None:
    """The input of a two-input node besides `value` (None when both are `value` or it has another arity)."""
    if len(node.inputs) != 2 or node.inputs.count(value) != 1:
        return None
    return node.inputs[1] if node.inputs[0] == value else node.inputs[0]


def _written_hard_swish(graph: Graph, x: str) -> list[Node] | None:
    """The nodes of HardSwish(x) written out, in order, ending with the one whose output is the result; None when
    x's consumers are not exactly such a pattern."""
    v = graph.values.get(x)
    if v is None or len(v.consumers) != 2 or x in graph.outputs:
        return None
    by_op = {n.op_type: n for n in v.consumers if n.domain in ("", "ai.onnx")}
    add, mul, hsig = by_op.get("Add"), by_op.get("Mul"), by_op.get("HardSigmoid")
    if add is not None and mul is not None:  # Div(Mul(x, Clip(Add(x, 3), 0, 6)), 6)
        clip = _only_consumer(graph, add.outputs[0])
        if _scalar(graph, _other(add, x) or "") != 3.0 or not _onnx(clip, "Clip") or clip.inputs[0] != add.outputs[0]:
            return None
        if _clip_bounds(graph, clip) != (0.0, 6.0) or _other(mul, x) != clip.outputs[0]:
            return None
        if _only_consumer(graph, clip.outputs[0]) is not mul:
            return None
        div = _only_consumer(graph, mul.outputs[0])
        if not _onnx(div, "Div") or div.inputs[0] != mul.outputs[0] or _scalar(graph, div.inputs[1]) != 6.0:
            return None
        return [add, clip, mul, div]
    if hsig is not None and mul is not None:  # Mul(x, HardSigmoid(x, 1/6, 0.5))
        if abs(float(hsig.attr("alpha", 0.2)) - 1 / 6) > 1e-7 or float(hsig.attr("beta", 0.5)) != 0.5:
            return None
        if _other(mul, x) != hsig.outputs[0] or _only_consumer(graph, hsig.outputs[0]) is not mul:
            return None
        return [hsig, mul]
    return None


def _activation(graph: Graph, y: str) -> tuple[str, list[float], list[Node]] | None:
    """(activation, its parameters, the nodes it replaces) for value `y` (a Conv's output), or None."""
    written = _written_hard_swish(graph, y)
    if written is not None:
        return "HardSwish", [], written
    act = _only_consumer(graph, y)
    if act is None or act.domain not in ("", "ai.onnx") or act.op_type not in CONV_ACTIVATIONS or act.inputs[0] != y:
        return None
    if act.op_type == "LeakyRelu":
        return "LeakyRelu", [float(act.attr("alpha", 0.01))], [act]
    if act.op_type == "HardSigmoid":
        return "HardSigmoid", [float(act.attr("alpha", 0.2)), float(act.attr("beta", 0.5))], [act]
    if act.op_type == "Clip":
        bounds = _clip_bounds(graph, act)
        return None if bounds is None else ("Clip", list(bounds), [act])
    return act.op_type, [], [act]


def _fusable(graph: Graph, conv: Node, allowed: set[int] | None) -> bool:
    """A float32 Conv(X, W[, B]) of one output that `allowed` (all when None) lets take part."""
    out = graph.values.get(conv.outputs[0]) if len(conv.outputs) == 1 else None
    return (2 <= len(conv.inputs) <= 3 and out is not None and out.dtype == _FLOAT
            and (allowed is None or id(conv) in allowed))


def _epilogue(graph: Graph, conv: Node, found: tuple[str, list[float], list[Node]], between: list[Node],
              allowed: set[int] | None, accepts: Callable[[str, list[float]], bool] | None) -> dict[str, Attr] | None:
    """FusedConv's attributes for `conv` and the activation `found` after the nodes `between` (a residual Add), or
    None where the activation's output differs from the Conv's in type or shape, a node is not allowed or
    `accepts` refuses the activation."""
    kind, params, acts = found
    out, y = graph.values[conv.outputs[0]], graph.values.get(acts[-1].outputs[0])
    if (y is None or y.dtype != out.dtype or y.shape != out.shape or len(acts[-1].outputs) != 1
            or (allowed is not None and any(id(n) not in allowed for n in (*between, *acts)))
            or (accepts is not None and not accepts(kind, params))):
        return None
    attributes = dict(conv.attributes)
    attributes["activation"] = Attr("activation", AttributeProto.STRING, kind)
    if params:
        attributes["activation_params"] = Attr("activation_params", AttributeProto.FLOATS, params)
    return attributes


def fuse_conv_activation(graph: Graph, nodes: Collection[Node] | None = None,
                         accepts: Callable[[str, list[float]], bool] | None = None) -> list[FusionRecord]:
    """float32 Conv(X, W[, B]) + its activation -> com.microsoft FusedConv with the Conv's attributes and
    `activation` / `activation_params`, where the activation is the Conv output's only reader (HardSwish written
    out: its nodes are x's only readers) and `accepts(activation, params)` (all when None) takes it. Only nodes
    in `nodes` (all when None) take part."""
    allowed = None if nodes is None else {id(n) for n in nodes}
    records: list[FusionRecord] = []
    rw = Rewriter(graph)
    for conv in [n for n in graph.nodes if _onnx(n, "Conv")]:
        found = _activation(graph, conv.outputs[0]) if _fusable(graph, conv, allowed) else None
        attributes = _epilogue(graph, conv, found, [], allowed, accepts) if found is not None else None
        if attributes is None:
            continue
        acts = found[2]
        last = acts[-1]
        fused = _replace(rw, [conv, *acts], "FusedConv", [i for i in conv.inputs if i], [last.outputs[0]],
                         "/ConvActivationFusion", attributes=attributes, domain="com.microsoft")
        records.append(FusionRecord("ConvActivationFusion", tuple(n.name for n in (conv, *acts)), (fused.name,)))
    rw.finish()
    return records


def _residual(graph: Graph, conv: Node) -> tuple[Node, str] | None:
    """(the Add / two-input Sum that is the Conv output's only reader, the other tensor it adds), where that tensor
    has the Conv output's type and static shape (no broadcast) and the sum's output the same."""
    y = conv.outputs[0]
    add = _only_consumer(graph, y)
    if add is None or add.domain not in ("", "ai.onnx") or add.op_type not in ("Add", "Sum") or len(add.outputs) != 1:
        return None
    z = _other(add, y)
    out, zv, sv = graph.values.get(y), graph.values.get(z or ""), graph.values.get(add.outputs[0])
    if z is None or out is None or zv is None or sv is None or not is_static(out.shape):
        return None
    if zv.dtype != out.dtype or zv.shape != out.shape or sv.dtype != out.dtype or sv.shape != out.shape:
        return None
    return add, z


def fuse_conv_add_activation(graph: Graph, nodes: Collection[Node] | None = None,
                             accepts: Callable[[str, list[float]], bool] | None = None) -> list[FusionRecord]:
    """float32 Conv(X, W[, B]) + Add(., Z) (or Sum of the two) + an activation -> com.microsoft FusedConv(X, W, B, Z)
    with `activation` / `activation_params`, where each node's output is the next one's only reader, Z has the
    Conv output's shape and `accepts(activation, params)` (all when None) takes the activation. Only nodes in
    `nodes` (all when None) take part."""
    allowed = None if nodes is None else {id(n) for n in nodes}
    records: list[FusionRecord] = []
    rw = Rewriter(graph)
    for conv in [n for n in graph.nodes if _onnx(n, "Conv")]:
        residual = _residual(graph, conv) if _fusable(graph, conv, allowed) else None
        found = _activation(graph, residual[0].outputs[0]) if residual is not None else None
        attributes = _epilogue(graph, conv, found, [residual[0]], allowed, accepts) if found is not None else None
        if attributes is None:
            continue
        (add, z), acts = residual, found[2]
        last = acts[-1]
        bias = conv.inputs[2] if len(conv.inputs) == 3 else ""
        fused = _replace(rw, [conv, add, *acts], "FusedConv", [conv.inputs[0], conv.inputs[1], bias, z],
                         [last.outputs[0]], "/ConvAddActivationFusion", attributes=attributes, domain="com.microsoft")
        records.append(FusionRecord("ConvAddActivationFusion", tuple(n.name for n in (conv, add, *acts)), (fused.name,)))
    rw.finish()
    return records
