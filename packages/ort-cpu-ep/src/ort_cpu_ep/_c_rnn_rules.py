"""Which RNN / GRU / LSTM nodes the C kernel (csrc/rnn_kernel.c) computes; `_c_rules.c_kernel_applies` asks here."""

from __future__ import annotations

from ort_graph import Node

_RECURRENT = ("RNN", "GRU", "LSTM")
_FLOAT, _INT32 = 1, 6  # TensorProto.FLOAT, INT32


def c_rnn_applies(node: Node) -> bool:
    """X, W, R and every present float input (B, initial_h, initial_c, P) known float32, sequence_lens int32, and no
    `activations` attribute: the C kernel computes the default activations (f = Sigmoid, g = h = Tanh) only, the
    ABI having no string-list attribute getter, so listed activations stay with the numpy kernel (the provider's
    RecurrentDefaultActivations pass first drops a list that spells out the defaults). Every output it lists named (a C kernel of this ABI cannot tell an omitted output from a
    named one, so it would ask for the omitted Y, which a pre-allocated plan has no block for; trailing omitted
    outputs are not listed and cost nothing). Any direction, layout, clip, linear_before_reset, input_forget,
    peepholes."""
    graph = node.graph
    if graph is None or len(node.inputs) < 3 or not all(node.inputs[:3]) or node.attr("activations", None):
        return False
    if not all(node.outputs):
        return False
    for i, name in enumerate(node.inputs):
        if not name:
            continue
        value = graph.values.get(name)
        if value is None or value.dtype != (_INT32 if i == 4 else _FLOAT):
            return False
    return True


__all__ = ["c_rnn_applies"]
