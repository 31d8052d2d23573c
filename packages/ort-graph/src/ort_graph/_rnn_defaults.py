"""An RNN / GRU / LSTM `activations` attribute that spells out the defaults (RNN: Tanh; GRU: Sigmoid, Tanh; LSTM:
Sigmoid, Tanh, Tanh; once per direction or once for both) dropped, as an execution provider's pass: the same
numbers (Sigmoid and Tanh take no alpha / beta, so activation_alpha / activation_beta go with it), and the node is
one a kernel computing only the defaults takes (the CPU provider's C kernel: its ABI has no string-list attribute
getter). Exporters such as tf2onnx write the defaults out."""

from __future__ import annotations

from collections.abc import Collection

from ._fusions import FusionRecord, _replace
from ._ir import Graph, Node
from ._rewrite import Rewriter

__all__ = ["drop_default_rnn_activations"]

_DEFAULTS = {"RNN": ("tanh",), "GRU": ("sigmoid", "tanh"), "LSTM": ("sigmoid", "tanh", "tanh")}


def drop_default_rnn_activations(graph: Graph, nodes: Collection[Node] | None = None) -> list[FusionRecord]:
    """Each RNN / GRU / LSTM (ONNX domain) among `nodes` (all when None) whose `activations` are the defaults
    (case-insensitive, for one direction or for each) is replaced by the same node, same name, without
    `activations`, `activation_alpha` and `activation_beta` (a new node: a provider picks its kernel afresh)."""
    allowed = None if nodes is None else {id(n) for n in nodes}
    records: list[FusionRecord] = []
    rw = Rewriter(graph)
    for node in list(graph.nodes):
        defaults = _DEFAULTS.get(node.op_type)
        if defaults is None or node.domain not in ("", "ai.onnx") or (allowed is not None and id(node) not in allowed):
            continue
        names = node.attr("activations", None)
        if not names:
            continue
        dirs = 2 if node.attr("direction", "forward") == "bidirectional" else 1
        lowered = tuple((n.decode() if isinstance(n, bytes) else str(n)).lower() for n in names)
        if lowered not in (defaults, defaults * dirs):
            continue
        kept = {k: v for k, v in node.attributes.items() if k not in ("activations", "activation_alpha", "activation_beta")}
        new = _replace(rw, [node], node.op_type, list(node.inputs), list(node.outputs), "", attributes=kept,
                       domain=node.domain)
        records.append(FusionRecord("RecurrentDefaultActivations", (node.name,), (new.name,)))
    rw.finish()
    return records
