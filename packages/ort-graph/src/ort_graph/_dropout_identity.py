"""An inference Dropout whose mask no one reads, as an execution provider's pass: replaced by an Identity of the same
name (onnxruntime's EliminateDropout removes the node; here the provider picks its Identity kernel afresh, a C copy
where the C kernels are loaded, so a run is not split around a numpy step). Inference: no `training_mode` input
(opset 12 on) and no `is_test` of 0 (opsets 1-6): Y is X, whatever the ratio."""

from __future__ import annotations

from collections.abc import Collection

from ._fusions import FusionRecord, _replace
from ._ir import Graph, Node
from ._rewrite import Rewriter

__all__ = ["inference_dropout_as_identity"]


def _mask_unread(graph: Graph, node: Node) -> bool:
    if len(node.outputs) < 2 or not node.outputs[1]:
        return True
    mask = node.outputs[1]
    value = graph.values.get(mask)
    if mask in graph.outputs or (value is not None and value.consumers):
        return False
    return not any(mask in n.implicit_inputs() for n in graph.nodes)  # a subgraph reading it from outside


def inference_dropout_as_identity(graph: Graph, nodes: Collection[Node] | None = None) -> list[FusionRecord]:
    """Each ONNX-domain Dropout among `nodes` (all when None) in inference mode whose mask output is absent or unread
    becomes Identity(X) -> Y, same name."""
    allowed = None if nodes is None else {id(n) for n in nodes}
    records: list[FusionRecord] = []
    rw = Rewriter(graph)
    for node in list(graph.nodes):
        if node.op_type != "Dropout" or node.domain not in ("", "ai.onnx") or (allowed is not None and id(node) not in allowed):
            continue
        if not node.inputs or not node.inputs[0] or not node.outputs or not node.outputs[0]:
            continue
        if (len(node.inputs) > 2 and node.inputs[2]) or node.attr("is_test", 1) == 0 or not _mask_unread(graph, node):
            continue
        new = _replace(rw, [node], "Identity", [node.inputs[0]], [node.outputs[0]], "")
        records.append(FusionRecord("InferenceDropoutAsIdentity", (node.name,), (new.name,)))
    rw.finish()
    return records
